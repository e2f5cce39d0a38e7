"""The ``WatchHub``: the triggerer's process-wide registry of subscriptions and the watch loops that serve
them, and ``HUB``, its one instance. What it does and why is the package's doc (``kueue_ray.hub``).

It ties the package's parts together: a trigger's ``Subscription`` (``subscriptions``) joins a per
(connection, namespace) ``_Scope`` (``scope``) whose watch loops offer what they see; the hub caches it and
delivers it to the subscribers. The parts are handed the hub as the narrow view each needs
(``scope.LoopOwner``, ``subscriptions.HubView``) and never reach into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partialmethod
from typing import Any

from kueue_ray import metrics
from kueue_ray.holdings import Holding, holding_of
from kueue_ray.hub.reads import JOB_WORKLOADS, shared_read
from kueue_ray.hub.resources import (
    RAYJOB,
    RAYJOBS,
    RAYSERVICE,
    RAYSERVICES,
    WORKLOAD,
    WORKLOADS,
    WatchedResource,
    of_deployment,
)
from kueue_ray.hub.scope import _PendingRead, _Scope, _WatchLoop
from kueue_ray.hub.settings import HubSettings
from kueue_ray.hub.subscriptions import (
    NOTICE,
    ServiceSubscription,
    Subscription,
    Update,
)
from kueue_ray.kube.errors import may_be_missing_api, not_served_message, read_of, reading
from kueue_ray.kube.essential import resource_version_newer
from kueue_ray.kube.refusals import ApiNotServed
from kueue_ray.kube.shared_client import SharedApiClient, provider_connection
from kueue_ray.kube.watch_target import RefusalMemory
from kueue_ray.wait_policy import DEFAULT_RESYNC_SECONDS
from kueue_ray.why_queued_log import sentences_key, why_queued_sentences
from kueue_ray.workload import SERVICE_OWNERS, controller_owner

log = logging.getLogger(__name__)


class Subscribed:
    """``async with hub.subscribe(...) as subscription``: joins the hub on entering, leaves on exit.

    A slotted class rather than a ``contextlib.asynccontextmanager`` generator: a triggerer holds one per
    waiting task for the whole wait, and a suspended generator frame (two, nested) costs several times
    this object's memory."""

    __slots__ = ("hub", "subscription", "resources", "scope")

    def __init__(
        self, hub: WatchHub, subscription: Subscription, resources: tuple[WatchedResource, ...]
    ) -> None:
        self.hub = hub
        self.subscription = subscription
        self.resources = resources
        self.scope: _Scope | None = None

    async def __aenter__(self) -> Any:
        self.scope = self.hub._join(self.subscription, self.resources)
        return self.subscription

    async def __aexit__(self, *exc_info: object) -> None:
        if self.scope is not None:
            await self.hub._leave(self.subscription, self.scope)


class WatchHub:
    """Process-wide registry of subscriptions and the watch loops that serve them."""

    def __init__(
        self,
        settings: HubSettings | None = None,
        connection_factory: Callable[
            [str], contextlib.AbstractAsyncContextManager[Any]
        ] = provider_connection,
    ) -> None:
        self.settings = settings or HubSettings()
        self.connection_factory = connection_factory
        self._scopes: dict[tuple[str, str], _Scope] = {}
        self.watch_refusals: RefusalMemory = {}
        """The last 403 to each target's watch and when: it outlives the loops (``ListWatchLoop``)."""
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._gauges: asyncio.Task | None = None

    def subscribe(
        self,
        conn_id: str,
        namespace: str,
        name: str,
        uid: str,
        resync_interval: float = DEFAULT_RESYNC_SECONDS,
        deployment: str = "",
        *,
        kind: str = RAYJOB,
        reader: Any = None,
    ) -> Subscribed:
        """Register interest in one RayJob (``kind`` RAYSERVICE: one RayService, and the Workloads admitting
        it) for the duration of the ``async with`` block (which gives the ``Subscription``): the
        namespace's RayJob (RayService) watch and its Workload watch, shared by every subscriber.

        ``resync_interval`` bounds how long a missed event can go unnoticed: the namespace's loops relist
        at the shortest interval of their subscribers (a shorter one takes effect from the next relist).
        ``deployment`` (the Airflow deployment of the waiting task) narrows the RayJob watch to that
        deployment's RayJobs; waits of tasks that predate deployments ("") share a watch of every RayJob of
        this integration. ``reader`` reads what the cache cannot answer (``Subscription.reader``: the
        trigger's async hook).
        """
        service = kind == RAYSERVICE
        subscription = (ServiceSubscription if service else Subscription)(
            self, conn_id, namespace, name, uid, resync_interval, deployment, reader
        )
        watched = of_deployment(RAYSERVICES if service else RAYJOBS, deployment)
        return Subscribed(self, subscription, (watched, WORKLOADS))

    subscribe_service = partialmethod(subscribe, kind=RAYSERVICE)
    """``subscribe`` to a RayService."""

    def _join(self, subscription: Subscription, resources: tuple[WatchedResource, ...]) -> _Scope:
        """Add ``subscription`` to its scope with the watch loops it needs; the scope joined."""
        self._adopt_event_loop()
        scope = self._scopes.get(subscription.scope)
        if scope is None:
            scope = self._scopes[subscription.scope] = _Scope(
                subscription.scope, SharedApiClient(self.connection_factory, subscription.conn_id)
            )
        for resource in resources:
            if resource.kind not in scope.loops:
                loop = scope.loops[resource.kind] = _WatchLoop(self, scope, resource)
                loop.start()
        scope.add(subscription)
        if self._gauges is None or self._gauges.done():
            self._gauges = asyncio.create_task(
                self._report_waiting(), name="kueue-ray-tasks-waiting", context=contextvars.Context()
            )
        for loop in scope.loops.values():
            if loop.polling_because is not None:
                subscription.updates.put_nowait(Update(NOTICE, None, loop.polling_notice()))
        return scope

    async def _leave(self, subscription: Subscription, scope: _Scope) -> None:
        """Remove ``subscription`` from the ``scope`` it joined; stop the loops nobody needs any more and
        close the scope with its last subscriber."""
        scope.remove(subscription)
        if not scope.empty():
            if not isinstance(subscription, ServiceSubscription):
                self._forget_unwatched(scope, subscription.name)
            for kind in set(scope.loops) - scope.needed_kinds():
                await scope.loops.pop(kind).stop()
        elif self._scopes.get(subscription.scope) is scope:
            del self._scopes[subscription.scope]
            for read in scope.pending_reads.values():
                read.task.cancel()
            for task in scope.reads.values():
                task.cancel()
            for loop in scope.loops.values():
                await loop.stop()
            await scope.client.retire()

    def waiting(self) -> dict[tuple[str, str | None, str], int]:
        """Subscribers per (namespace, LocalQueue, stage): the tasks this triggerer waits for."""
        counts: dict[tuple[str, str | None, str], int] = {}
        for (_, namespace, _), scope in self._scopes.items():
            for group in scope.by_name.values():
                for subscription in group:
                    key = (namespace, subscription.queue, subscription.stage)
                    counts[key] = counts.get(key, 0) + 1
        return counts

    async def _report_waiting(self) -> None:
        """Send ``kueue_ray.tasks_waiting`` every ``gauge_interval`` while anyone waits; a queue nobody
        waits in any more is sent once as 0, so its graph does not stay at its last value."""
        host = metrics.hostname()
        reported: set[tuple[str, str | None, str]] = set()
        while True:
            counts = self.waiting()
            for key in reported - counts.keys():
                counts[key] = 0
            stats = metrics.stats()
            for (namespace, queue, stage), count in counts.items():
                tags = metrics.tags(queue=queue, namespace=namespace, stage=stage, hostname=host)
                stats.gauge(metrics.TASKS_WAITING, count, tags=tags)
            reported = {key for key, count in counts.items() if count}
            if not reported:
                return
            await asyncio.sleep(self.settings.gauge_interval)

    def watch_loops(self) -> list[tuple[str, str, str]]:
        """(connection, namespace, resource) of every running watch loop."""
        return sorted(
            (conn_id, namespace, kind)
            for (conn_id, namespace, _), scope in self._scopes.items()
            for kind in scope.loops
        )

    def loop_of(self, subscription: Subscription, kind: str) -> _WatchLoop | None:
        scope = self._scopes.get(subscription.scope)
        return scope.loops.get(kind) if scope is not None else None

    def cached(self, subscription: Subscription, kind: str) -> dict | None:
        loop = self.loop_of(subscription, kind)
        if loop is None:
            return None
        by_name = kind in (RAYJOB, RAYSERVICE)
        obj = loop.objects.get(subscription.name if by_name else subscription.uid)
        if obj is not None and by_name and obj["metadata"].get("uid") != subscription.uid:
            return None
        return obj

    async def read(self, subscription: Subscription, what: str) -> None:
        """Read one of ``subscription``'s objects from the API server and offer it to the cache: ``RAYJOB``
        or ``RAYSERVICE`` (by name), ``WORKLOAD`` (by its owner's uid) or ``JOB_WORKLOADS`` (the
        namespace's, for a RayService). One request per object is in flight in a scope, shared by every
        subscriber that asks meanwhile (``kueue_ray.hub.reads.shared_read``)."""
        scope = self._scopes.get(subscription.scope)
        if scope is None:
            await self._read_one(subscription, what)
            return
        key = (what, subscription.uid if what == WORKLOAD else subscription.name)
        await shared_read(scope.reads, key, lambda: self._read_one(subscription, what))

    async def _read_one(self, subscription: Subscription, what: str) -> None:
        # The scope's shared client (no TLS setup per read).
        async with self.lease(subscription) as client:
            try:
                await self._fetch(subscription, what, client)
            except Exception as exc:
                await self._retire_refused(subscription, client, exc)
                await self._ask_discovery(client, exc)
                raise

    async def _retire_refused(self, subscription: Subscription, client: Any, exc: BaseException) -> None:
        """A read answered 401: retire the shared client so the next read loads the credentials again."""
        scope = self._scopes.get(subscription.scope)
        if getattr(exc, "status", None) == 401 and scope is not None and client is not None:
            await scope.client.retire(client)

    async def _ask_discovery(self, client: Any, exc: BaseException) -> None:
        """A read answered with a 404 that may mean its whole API group/version is missing: ask discovery
        once; raise ``ApiNotServed`` when the cluster does not serve it."""
        read = read_of(exc)
        if read is None or not may_be_missing_api(exc):
            return
        from kubernetes_asyncio.client import CustomObjectsApi

        group, version = read[2], read[3]
        try:
            await CustomObjectsApi(client).get_api_resources(group, version)
        except Exception as probe:  # noqa: BLE001 - only a 404 says "not served"
            if getattr(probe, "status", None) == 404:
                raise ApiNotServed(group, version, not_served_message(group, version)) from exc

    async def _fetch(self, subscription: Subscription, what: str, client: Any) -> None:
        namespace, hook = subscription.namespace, subscription.reader
        if hook is None:
            raise RuntimeError(
                f"{subscription.name}: subscribed without a reader; the cache cannot be filled"
            )
        if what == RAYJOB:
            with reading("get", *_coordinates(RAYJOBS)):
                obj = await hook.get_rayjob(subscription.name, namespace, api_client=client)
            self.offer_read(self.loop_of(subscription, RAYJOB), subscription.name, obj)
        elif what == RAYSERVICE:
            with reading("get", *_coordinates(RAYSERVICES)):
                obj = await hook.get_rayservice(subscription.name, namespace, api_client=client)
            self.offer_read(self.loop_of(subscription, RAYSERVICE), subscription.name, obj)
        elif what == WORKLOAD:
            with reading("list", *_coordinates(WORKLOADS)):
                obj = await hook.find_workload(subscription.uid, namespace, api_client=client)
            loop = self.loop_of(subscription, WORKLOAD)
            if loop is not None and obj is not None:
                self.offer(loop, subscription.uid, obj)
        elif what == JOB_WORKLOADS:
            with reading("list", *_coordinates(WORKLOADS)):
                items = await hook.list_job_workloads(namespace, api_client=client)
            loop = self.loop_of(subscription, WORKLOAD)
            for item in items if loop is not None else ():
                key = WORKLOADS.key_of(item)
                if key is not None:
                    self.offer(loop, key, item)

    def lease(self, subscription: Subscription) -> contextlib.AbstractAsyncContextManager[Any]:
        """The subscription's scope's shared ApiClient; None (the hook opens its own) outside a scope."""
        scope = self._scopes.get(subscription.scope)
        return scope.client.lease() if scope is not None else contextlib.nullcontext()

    def identity(self, subscription: Subscription) -> str | None:
        """Who the subscription's scope's client authenticates as, when its token says (for a refusal)."""
        scope = self._scopes.get(subscription.scope)
        return scope.client.identity() if scope is not None else None

    def workload_changes(self, subscription: Subscription) -> int:
        """How many Workload changes of the subscription's namespace the hub has seen."""
        scope = self._scopes.get(subscription.scope)
        return scope.workload_changes if scope is not None else 0

    async def pending_positions(self, subscription: Subscription, queue: str) -> dict[str, Any] | None:
        """One visibility read of LocalQueue ``queue`` shared by every subscriber of the namespace, indexed
        by Workload name once as it is decoded (``AsyncRayJobHook.pending_positions``).

        Concurrent callers await the same request; its answer (or its failure, as None) serves everyone
        for ``pending_workloads_ttl_seconds`` after it completes, so a burst of queued triggers logging
        their position costs one request, and positions are never older than a few seconds.
        """
        scope = self._scopes.get(subscription.scope)
        if scope is None:
            return None
        read = scope.pending_reads.get(queue)
        if read is None or time.monotonic() >= read.fresh_until:
            read = _PendingRead(asyncio.ensure_future(self._read_pending(subscription, queue)))
            read.task.add_done_callback(lambda _, read=read: self._mark_fresh(read))
            scope.pending_reads[queue] = read
        return await asyncio.shield(read.task)

    def _mark_fresh(self, read: _PendingRead) -> None:
        read.fresh_until = time.monotonic() + self.settings.pending_workloads_ttl_seconds

    async def _read_pending(self, subscription: Subscription, queue: str) -> dict[str, Any] | None:
        try:
            async with self.lease(subscription) as client:
                return await subscription.reader.pending_positions(
                    subscription.namespace, queue, api_client=client
                )
        except Exception as exc:  # noqa: BLE001 - a position is a nicety; never fail a wait for it
            log.debug(
                "Pending workloads of LocalQueue %s/%s unavailable: %s", subscription.namespace, queue, exc
            )
            return None

    def notify(self, scope: _Scope, message: str) -> None:
        """Tell every subscriber of ``scope`` something about waiting itself (their task logs show it)."""
        for group in (*scope.by_name.values(), *scope.services.values()):
            for subscription in group:
                subscription.updates.put_nowait(Update(NOTICE, None, message))

    def offer(self, loop: _WatchLoop, key: str, obj: dict, deliver: bool = True) -> bool:
        """A version of ``key`` arrived: cache what waiting reads of it if it is newer (True), and tell its
        subscribers unless ``deliver`` is False (a page of the loop's first list: ``_WatchLoop.end_list``)."""
        previous = loop.objects.get(key)
        if not resource_version_newer(obj, previous):
            return False
        obj = loop.objects[key] = loop.resource.essential(obj)
        self._reindex(loop, key, previous, obj)
        if deliver:
            self.deliver(loop, key, obj)
        return True

    def offer_read(self, loop: _WatchLoop | None, key: str, obj: dict | None) -> None:
        """What a GET of ``key`` answered: the object, or None when it is gone. No loop, no cache."""
        if loop is None:
            return
        if obj is None:
            self.offer_deleted(loop, key)
        else:
            self.offer(loop, key, obj)

    def offer_deleted(self, loop: _WatchLoop, key: str, obj: dict | None = None) -> None:
        """``key`` is gone: ``obj`` is its last state from a DELETED event, None when a GET or relist found
        nothing under that key."""
        deleted_uid = (obj.get("metadata") or {}).get("uid") if obj is not None else None
        cached = loop.objects.get(key)
        if cached is not None and deleted_uid is not None and cached["metadata"].get("uid") != deleted_uid:
            return  # an older object of the same name went away; the cached one is newer
        loop.objects.pop(key, None)
        self._reindex(loop, key, cached, None)
        self.deliver(loop, key, None, deleted_uid=deleted_uid, last=obj or cached)

    @staticmethod
    def _reindex(loop: _WatchLoop, key: str, previous: dict | None, obj: dict | None) -> None:
        """What the scope keeps beside the cache as ``key`` changes from ``previous`` to ``obj`` (None: not
        cached): a RayJob's name by its uid (``_Scope.rayjob_names``); a Workload change counted, and what
        it holds now (``_Scope.holdings``)."""
        scope = loop.scope
        if loop.resource.kind == RAYJOB:
            before = previous["metadata"].get("uid") if previous is not None else None
            after = obj["metadata"].get("uid") if obj is not None else None
            if before is not None and scope.rayjob_names.get(before) == key:
                del scope.rayjob_names[before]
            if after is not None:
                scope.rayjob_names[after] = key
            if before != after:
                scope.explanations.clear()  # a holder may be named now, or no more
        elif loop.resource.kind == WORKLOAD:
            scope.workload_changes += 1
            if obj is not None and controller_owner(obj)[0] in SERVICE_OWNERS:
                scope.service_workloads.add(key)
            else:
                scope.service_workloads.discard(key)
            holding = holding_of(obj) if obj is not None else None
            if holding is None and key in scope.holdings:
                del scope.holdings[key]
            elif holding is not None:
                scope.holdings[key] = holding
            else:
                return  # neither held before nor now: no explanation changes
            scope.explanations.clear()

    def rayjob_by_uid(self, subscription: Subscription, uid: str) -> dict | None:
        """A RayJob of the subscription's namespace the watch holds, by uid (``_Scope.rayjob_names``)."""
        scope = self._scopes.get(subscription.scope)
        loop = scope.loops.get(RAYJOB) if scope is not None else None
        name = scope.rayjob_names.get(uid) if scope is not None else None
        return loop.objects.get(name) if loop is not None and name is not None else None

    def service_workloads(self, subscription: Subscription) -> list[dict]:
        """The cached Workloads of the subscription's namespace that a RayService or a RayCluster controls
        (``_Scope.service_workloads``)."""
        scope = self._scopes.get(subscription.scope)
        loop = scope.loops.get(WORKLOAD) if scope is not None else None
        if loop is None:
            return []
        return [loop.objects[key] for key in scope.service_workloads if key in loop.objects]

    def holdings(self, subscription: Subscription) -> Iterable[Holding]:
        """What the admitted Workloads of the subscription's namespace hold (``_Scope.holdings``)."""
        scope = self._scopes.get(subscription.scope)
        return scope.holdings.values() if scope is not None else ()

    def why_queued(
        self, subscription: Subscription, cluster_queue: Mapping | None, own: Mapping | None, queues: list
    ) -> list[str]:
        """``why_queued_log.why_queued_sentences`` for ``own`` from the scope's holdings, computed once per
        ``sentences_key`` while the holders stay as they are (``_reindex`` empties ``_Scope.explanations``
        when they change)."""
        scope = self._scopes.get(subscription.scope)

        def explain() -> list[str]:
            return why_queued_sentences(
                cluster_queue, own, self.holdings(subscription), queues, subscription.rayjob_by_uid
            )

        if scope is None or not cluster_queue or own is None:
            return explain()
        key = sentences_key(own, cluster_queue, queues)
        if key is None:
            return explain()
        found = scope.explanations.get(key)
        if found is None:
            found = scope.explanations[key] = explain()
        return list(found)

    def deliver(
        self,
        loop: _WatchLoop,
        key: str,
        obj: dict | None,
        deleted_uid: str | None = None,
        last: dict | None = None,
    ) -> None:
        """Tell the subscribers of ``key`` (and a RayService's, of a Workload) its state ``obj``."""
        kind = loop.resource.kind
        subscribers = loop.scope.subscribers_of(kind, key)
        if kind == WORKLOAD:
            extra = loop.scope.workload_watchers(obj or last)
            subscribers = [*subscribers, *(s for s in extra if s not in subscribers)]
        for subscription in subscribers:
            if kind == WORKLOAD:
                subscription.updates.put_nowait(Update(WORKLOAD, obj))
                continue
            if obj is None and deleted_uid not in (None, subscription.uid):
                continue  # a predecessor with this name was deleted, not the subscribed object
            mine = obj if obj is not None and obj["metadata"].get("uid") == subscription.uid else None
            subscription.updates.put_nowait(Update(kind, mine))

    def _forget_unwatched(self, scope: _Scope, name: str) -> None:
        """Drop a RayJob read by GET that the watch does not cover once nobody waits for it: no watch event
        or relist would ever update or remove it."""
        loop = scope.loops.get(RAYJOB)
        cached = loop.objects.get(name) if loop is not None else None
        selects = loop.resource.selects if loop is not None else RAYJOBS.selects
        if cached is not None and not selects(cached) and not scope.subscribers_of(RAYJOB, name):
            del loop.objects[name]
            self._reindex(loop, name, cached, None)

    def _adopt_event_loop(self) -> None:
        """Forget loops bound to an event loop that is gone (a new triggerer loop, or a new test)."""
        running = asyncio.get_running_loop()
        if self._event_loop is not running:
            self._event_loop = running
            self._scopes.clear()
            self._gauges = None


def _coordinates(resource: WatchedResource) -> tuple[str, str, str]:
    return resource.qualified, resource.group, resource.version


HUB = WatchHub()
