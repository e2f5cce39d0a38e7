"""The triggerer's watch hub: one list+watch per (connection, namespace, resource), shared by all triggers.

A triggerer runs up to a thousand deferred tasks in one asyncio loop. If every RayJobTrigger polled or
watched on its own, the API server would see one request stream per waiting task and the triggerer would
spend its loop on TLS handshakes (apache/airflow#71349 reports that of polling Kubernetes triggers). Instead, every trigger of a process
subscribes here with its RayJob name and uid; the hub runs exactly one watch for the namespace's RayJobs
created by this project and one for its Kueue Workloads, keeps what they return in memory (like a
client-go informer) and hands changes to the subscribers through their own asyncio queues.

What waiting costs is therefore per namespace, not per trigger, and grows with state transitions, not
with time:

* A subscriber starts from the cache once the loop has listed (a burst of triggers starting together waits
  for that one LIST); only a RayJob missing from the cache costs one GET (``Subscription.current``).
* The safety net against a missed event is one relist per loop every ``resync_interval`` (the shortest of
  the namespace's subscribers, jittered), not a re-read per trigger: the relist refreshes the cache for
  every subscriber at once, and anything that changed or vanished is delivered.
* Queue positions come from one visibility read per LocalQueue, shared by every trigger that asks within
  a few seconds (``Subscription.pending_workloads``), so a thousand queued triggers cost one request.

Robustness: each loop is a ``kueue_ray.listwatch.ListWatchLoop`` (the one the Kueue UI's cache runs too):
watches resume from the last resourceVersion, relist on 410 Gone, back off with jitter, and read a watch
answered with anything but 200 as the refusal it is (401 loads the credentials again, 429 waits for
``Retry-After``, a 403 to the watch alone turns the loop into one list per ``degraded_list_interval``).
While a loop polls, every waiting task is told so in its log, with the ``kubectl auth can-i`` check that
shows what is missing. A subscriber's reads retry transient failures (5xx, 429, dropped connections,
timeouts) with backoff until they succeed, so an API server having a bad minute delays a trigger but never
ends it. The (connection, namespace) has one ApiClient (``SharedApiClient``), lent to its watch loops and
to every read. Objects only replace cached ones with a higher resourceVersion, so a slow GET cannot roll
state back. The loops for a (connection, namespace) start with its first subscription and stop with its
last, so an idle triggerer holds no connection open.

Module-level ``HUB`` is the process-wide instance: every trigger of a triggerer runs in the same process
and event loop, so they share module state. It is a cache only: the truth stays in the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from kueue_ray import api, metrics
from kueue_ray.api_errors import can_i, describe_error, retry_after_seconds
from kueue_ray.listwatch import (
    Backoff,
    ListWatchLoop,
    ListWatchSettings,
    RefusalMemory,
    SharedApiClient,
    Target,
    resource_version_newer,
)
from kueue_ray.naming import JOB_UID_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE
from kueue_ray.status import essential_rayjob, essential_workload
from kueue_ray.waiting import DEFAULT_RESYNC_SECONDS

log = logging.getLogger(__name__)

RAYJOB = "rayjob"
RAYSERVICE = "rayservice"
WORKLOAD = "workload"
NOTICE = "notice"
"""An ``Update`` that is news about waiting itself (the API server refuses to watch), for the task log."""


def _labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


@dataclass(frozen=True)
class WatchedResource:
    """What one watch loop lists and watches, and how it keys the objects it caches.

    ``selects`` mirrors ``label_selector`` on the client side: a relist may only conclude that a cached
    object was deleted if the list would have returned it (a RayJob read by GET may lack our label).
    """

    kind: str
    group: str
    version: str
    plural: str
    label_selector: str
    key_of: Callable[[dict], str | None]
    selects: Callable[[dict], bool]
    essential: Callable[[dict], dict]
    """What the cache keeps of an object: the fields waiting reads (``kueue_ray.status.essential_*``)."""

    @property
    def qualified(self) -> str:
        """``plural.group``, as RBAC and ``kubectl auth can-i`` name it."""
        return f"{self.plural}.{self.group}"


RAYJOBS = WatchedResource(
    kind=RAYJOB,
    group=api.RAYJOB.group,
    version=api.RAYJOB.version,
    plural=api.RAYJOB.plural,
    label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
    key_of=lambda obj: (obj.get("metadata") or {}).get("name"),
    selects=lambda obj: _labels(obj).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE,
    essential=essential_rayjob,
)
RAYSERVICES = WatchedResource(
    kind=RAYSERVICE,
    group=api.RAYSERVICE.group,
    version=api.RAYSERVICE.version,
    plural=api.RAYSERVICE.plural,
    label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
    key_of=lambda obj: (obj.get("metadata") or {}).get("name"),
    selects=lambda obj: _labels(obj).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE,
    # Whole: the RayService status model reads spec and status alike, and a namespace holds few services.
    essential=lambda obj: obj,
)
"""The deploy operator's RayServices. Their Workloads are in the same Workload watch: the RayService's own
(keyed by its uid) or, when Kueue admits it through its RayClusters, each cluster's."""
# Kueue copies no labels of ours onto Workloads, only the owner's uid: select on that label existing and
# key the Workloads by it.
WORKLOADS = WatchedResource(
    kind=WORKLOAD,
    group=api.WORKLOAD.group,
    version=api.WORKLOAD.version,
    plural=api.WORKLOAD.plural,
    label_selector=JOB_UID_LABEL,
    key_of=lambda obj: _labels(obj).get(JOB_UID_LABEL),
    selects=lambda obj: JOB_UID_LABEL in _labels(obj),
    essential=essential_workload,
)


@dataclass(frozen=True)
class Update:
    """A change of one subscribed object. ``object`` None means it no longer exists (for this uid).

    ``kind`` NOTICE carries no object but a ``message`` for the task log (how waiting works right now)."""

    kind: str
    object: dict | None
    message: str = ""


@dataclass
class HubSettings(ListWatchSettings):
    """Tunables; tests shorten them, production keeps the defaults (the loop's own in ``ListWatchSettings``)."""

    connect_wait_seconds: float = 5.0
    pending_workloads_ttl_seconds: float = 5.0
    """How long one visibility read of a LocalQueue answers every trigger asking for a queue position."""
    gauge_interval: float = 10.0
    """Seconds between two reports of the ``kueue_ray.tasks_waiting`` gauge (StatsD's usual flush)."""


class Mailbox:
    """A subscriber's undelivered updates: what an ``asyncio.Queue`` does here, in a fraction of its
    memory (a Queue holds four deques of 64 slots each; a triggerer holds thousands of these)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: list[Update] | None = None
        self._waiter: asyncio.Future | None = None

    def put_nowait(self, item: Update) -> None:
        if self._items is None:
            self._items = [item]
        else:
            self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def empty(self) -> bool:
        return not self._items

    def get_nowait(self) -> Update:
        if not self._items:
            raise asyncio.QueueEmpty
        item = self._items.pop(0)
        if not self._items:
            self._items = None
        return item

    async def get(self, timeout: float | None) -> Update:
        """The next update; TimeoutError when ``timeout`` seconds pass without one (None: no limit)."""
        if self._items is None:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(self._waiter, timeout)
            finally:
                self._waiter = None
        return self.get_nowait()


QUEUED, ADMITTED = "queued", "admitted"
"""A subscriber's ``stage`` for the ``kueue_ray.tasks_waiting`` gauge: waiting for admission, or not."""


class Subscription:
    """One trigger's interest in one RayJob (name + uid) and its Workload.

    ``queue`` and ``stage`` are what the trigger last told about it (LocalQueue, ``QUEUED`` / ``ADMITTED``),
    counted by the hub's ``kueue_ray.tasks_waiting`` gauge. Slotted: a triggerer holds thousands.
    """

    __slots__ = ("hub", "conn_id", "namespace", "name", "uid", "resync_interval", "updates", "queue", "stage")

    noun = "RayJob"
    resource = RAYJOBS

    def __init__(
        self, hub: WatchHub, conn_id: str, namespace: str, name: str, uid: str, resync_interval: float
    ) -> None:
        self.hub = hub
        self.conn_id = conn_id
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.resync_interval = resync_interval
        self.updates = Mailbox()
        self.queue: str | None = None
        self.stage = QUEUED

    @property
    def scope(self) -> tuple[str, str]:
        return (self.conn_id, self.namespace)

    async def next_update(self, timeout: float | None) -> Update | None:
        """The next change, or None when ``timeout`` seconds pass without one (None waits for ever)."""
        try:
            return await self.updates.get(timeout)
        except TimeoutError:
            return None

    def api_client(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The scope's shared ApiClient for a one-off read (e.g. the driver log at the end)."""
        return self.hub._lease(self)

    async def current(
        self, *, reread_rayjob: bool = False, reread_workload: bool = False
    ) -> tuple[dict | None, dict | None]:
        """(RayJob, Workload) as known now: from the hub's cache, or read from the API server.

        A read that fails (API errors, dropped connections, timeouts, beyond what the hook's own retries
        absorb) is retried with backoff until it succeeds: a trigger waits through an unhealthy API server
        instead of dying with it.
        """
        settings = self.hub.settings
        backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        while True:
            try:
                return await self._read_current(reread_rayjob, reread_workload)
            except Exception as exc:  # noqa: BLE001 - whatever the API did, waiting goes on
                delay = max(backoff.next_delay(), retry_after_seconds(exc) or 0.0)
                hint = ""
                if getattr(exc, "status", None) == 403:
                    hint = f" (check: {can_i('get', self.resource.qualified, self.namespace)})"
                log.warning(
                    "Reading %s %s/%s failed (%s)%s; retrying in %.1fs",
                    self.noun,
                    self.namespace,
                    self.name,
                    describe_error(exc),
                    hint,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _read_current(
        self, reread_rayjob: bool, reread_workload: bool
    ) -> tuple[dict | None, dict | None]:
        """One attempt of ``current``.

        A subscription waits for its loops' first list (a burst of triggers starting together costs one
        LIST per resource, not a GET each). After that the cache is authoritative up to the watch's
        position: a missing Workload simply does not exist yet (its ADDED event will come), and only a
        missing RayJob is read (just created, or outside the watch's label selector). ``reread_rayjob``
        reads the RayJob anyway, for a RayJob the watch does not cover; with ``reread_workload`` too, both
        are what the API server says now (the cache may be an event, or a polling interval, behind).
        Whatever is read goes through the hub, so every subscriber of it benefits.
        """
        listed = {kind: await self._wait_for_list(kind) for kind in (RAYJOB, WORKLOAD)}
        rayjob = self.hub.cached(self, RAYJOB)
        workload = self.hub.cached(self, WORKLOAD)
        read_rayjob = reread_rayjob or rayjob is None
        read_workload = reread_workload or (workload is None and not listed[WORKLOAD])
        if read_rayjob or read_workload:
            await self.hub.read_through(self, rayjob=read_rayjob, workload=read_workload)
            rayjob = self.hub.cached(self, RAYJOB)
            workload = self.hub.cached(self, WORKLOAD)
        return rayjob, workload

    def rayjob_by_uid(self, uid: str) -> dict | None:
        """A RayJob of this namespace the hub's watch holds, found by uid (e.g. the preemptor that Kueue's
        eviction message names only by its JobUID); None when the watch does not have it."""
        loop = self.hub.loop_of(self, RAYJOB)
        objects = loop.objects.values() if loop is not None else ()
        return next((obj for obj in objects if (obj.get("metadata") or {}).get("uid") == uid), None)

    async def pending_positions(self, queue: str) -> dict[str, Any] | None:
        """The positions of LocalQueue ``queue``'s pending Workloads by name (``kueue_ray.hook.QueuePosition``,
        shared, a few seconds old at most); None when the visibility API is not served, not allowed or
        failing."""
        return await self.hub.pending_positions(self, queue)

    def workloads_version(self) -> int:
        """How many Workload changes of this namespace the hub has seen; a queue position (in a LocalQueue,
        hence in this namespace) can only move when this moves, so an unchanged number needs no new read."""
        scope = self.hub._scopes.get(self.scope)
        return scope.workload_changes if scope is not None else 0

    async def _wait_for_list(self, kind: str) -> bool:
        """True once the loop's first list is in the cache (waiting for it a bounded time)."""
        loop = self.hub.loop_of(self, kind)
        if loop is None:
            return False
        if not loop.listed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(loop.listed.wait(), self.hub.settings.connect_wait_seconds)
        return loop.listed.is_set()


class ServiceSubscription(Subscription):
    """One trigger's interest in one RayService (name + uid) and the Workloads that admit it.

    Every change of the RayService or of one of its Workloads is an ``Update`` that only says "look again";
    ``snapshot`` then reads the current pair from the cache, so the order in which the two watches deliver
    does not matter.
    """

    noun = "RayService"
    resource = RAYSERVICES

    async def current(  # type: ignore[override]
        self, *, reread_rayjob: bool = False, reread_workload: bool = False
    ) -> tuple[dict | None, list[dict]]:
        """(RayService, its Workloads) as known now; reads what the cache cannot answer (retrying), or
        with ``reread_rayjob`` / ``reread_workload`` the RayService / its Workloads anyway."""
        return await super().current(reread_rayjob=reread_rayjob, reread_workload=reread_workload)

    async def _read_current(  # type: ignore[override]
        self, reread_rayjob: bool, reread_workload: bool
    ) -> tuple[dict | None, list[dict]]:
        listed = {kind: await self._wait_for_list(kind) for kind in (RAYSERVICE, WORKLOAD)}
        service, _ = self.snapshot()
        read_workloads = reread_workload or not listed[WORKLOAD]
        if service is None or reread_rayjob or read_workloads:
            await self.hub.read_service_through(self, workloads=read_workloads)
        return self.snapshot()

    def snapshot(self) -> tuple[dict | None, list[dict]]:
        """(RayService, its Workloads) from the cache alone."""
        from kueue_ray.service_status import related_workload

        service = self.hub.cached(self, RAYSERVICE)
        if service is None:
            return None, []
        loop = self.hub.loop_of(self, WORKLOAD)
        workloads = list(loop.objects.values()) if loop is not None else []
        return service, [w for w in workloads if related_workload(service, w)]

    def cares_about(self, workload: dict) -> bool:
        """Whether a Workload change may concern this RayService: its own, or a RayCluster's named after it
        (KubeRay names a RayService's clusters ``<service>-<5 random>``)."""
        for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
            if ref.get("kind") == "RayService" and ref.get("uid") == self.uid:
                return True
            if ref.get("kind") == "RayCluster" and str(ref.get("name", "")).startswith(f"{self.name}-"):
                return True
        return False


class _WatchLoop(ListWatchLoop):
    """The list+watch of one resource (RayJobs, RayServices or Workloads) in one namespace of one connection, serving
    every subscription of that scope: objects are cached by ``resource.key_of`` and offered to the hub,
    which hands newer versions to their subscribers. While the watch is refused, every subscriber is told
    in its task log how waiting works instead (``polling_notice``)."""

    def __init__(self, hub: WatchHub, scope: _Scope, resource: WatchedResource) -> None:
        self.hub = hub
        self.scope = scope
        self.conn_id, self.namespace = scope.key
        self.resource = resource
        super().__init__(
            Target(
                self.conn_id,
                resource.group,
                resource.version,
                resource.plural,
                self.namespace,
                resource.label_selector,
            ),
            scope.client,
            hub.settings,
            hub.watch_refusals,
        )

    def resync_interval(self) -> float:
        return self.scope.resync_interval()

    def apply_list(self, items: list[dict]) -> None:
        """Deliver what changed, and what disappeared since the last list."""
        seen: set[str] = set()
        for obj in items:
            key = self.resource.key_of(obj)
            if key is not None:
                seen.add(key)
                self.hub.offer(self, key, obj)
        # A cached object the list would have returned but did not was deleted while we were not watching.
        gone = [k for k, obj in self.objects.items() if k not in seen and self.resource.selects(obj)]
        for key in gone:
            self.hub.offer_deleted(self, key)

    def apply_event(self, kind: str, obj: dict) -> None:
        key = self.resource.key_of(obj)
        if key is None:
            return
        if kind == "DELETED":
            self.hub.offer_deleted(self, key, obj)
        else:
            self.hub.offer(self, key, obj)

    def polling_started(self) -> None:
        self.hub.notify(self.scope, self.polling_notice())

    def watching_again(self) -> None:
        self.hub.notify(
            self.scope,
            f"The API server lets connection {self.conn_id} watch {self.resource.plural} in namespace "
            f"{self.namespace} again: changes reach this task as they happen",
        )


@dataclass
class _PendingRead:
    """One shared visibility read of a LocalQueue: in flight, or done and fresh until ``fresh_until``."""

    task: asyncio.Task
    fresh_until: float = math.inf


@dataclass
class _Scope:
    """Everything the hub keeps for one (connection, namespace): subscribers indexed by what events are
    keyed on, the shared ApiClient, the two watch loops, and the shared visibility reads."""

    key: tuple[str, str]
    client: SharedApiClient
    by_name: dict[str, list[Subscription]] = field(default_factory=dict)
    by_uid: dict[str, list[Subscription]] = field(default_factory=dict)
    services: dict[str, list[ServiceSubscription]] = field(default_factory=dict)
    """RayService subscriptions by name (a RayJob and a RayService may share a name)."""
    loops: dict[str, _WatchLoop] = field(default_factory=dict)
    pending_reads: dict[str, _PendingRead] = field(default_factory=dict)
    workload_changes: int = 0
    """Workload changes cached so far (``Subscription.workloads_version``)."""

    def _indexes(self, subscription: Subscription) -> tuple[tuple[dict, str], ...]:
        by_name = self.services if isinstance(subscription, ServiceSubscription) else self.by_name
        return ((by_name, subscription.name), (self.by_uid, subscription.uid))

    def add(self, subscription: Subscription) -> None:
        for index, key in self._indexes(subscription):
            index.setdefault(key, []).append(subscription)

    def remove(self, subscription: Subscription) -> None:
        for index, key in self._indexes(subscription):
            index[key].remove(subscription)
            if not index[key]:
                del index[key]

    def empty(self) -> bool:
        return not self.by_name and not self.services

    def needed_kinds(self) -> set[str]:
        """The watch loops the current subscribers need."""
        kinds = set()
        if self.by_name:
            kinds |= {RAYJOB, WORKLOAD}
        if self.services:
            kinds |= {RAYSERVICE, WORKLOAD}
        return kinds

    def subscribers_of(self, kind: str, key: str) -> list[Subscription]:
        index = {RAYJOB: self.by_name, RAYSERVICE: self.services}.get(kind, self.by_uid)
        return index.get(key, [])

    def workload_watchers(self, workload: dict | None) -> list[ServiceSubscription]:
        """The RayService subscribers a Workload change may concern beyond its job-uid key (their
        clusters' Workloads)."""
        if workload is None:
            return []
        return [s for group in self.services.values() for s in group if s.cares_about(workload)]

    def resync_interval(self) -> float:
        """The shortest safety-net interval any subscriber asked for."""
        groups = [*self.by_name.values(), *self.services.values()]
        intervals = [s.resync_interval for group in groups for s in group]
        return min(intervals, default=DEFAULT_RESYNC_SECONDS)


@contextlib.asynccontextmanager
async def provider_connection(conn_id: str) -> AsyncIterator[Any]:
    """An ApiClient configured from the Airflow ``kubernetes`` connection, exactly as the cncf provider's
    AsyncKubernetesHook configures it (kubeconfig path/content, in-cluster, context)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    async with AsyncKubernetesHook(conn_id=conn_id).get_conn() as api_client:
        yield api_client


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

    @contextlib.asynccontextmanager
    async def subscribe(
        self,
        conn_id: str,
        namespace: str,
        name: str,
        uid: str,
        resync_interval: float = DEFAULT_RESYNC_SECONDS,
    ) -> AsyncIterator[Subscription]:
        """Register interest in one RayJob for the duration of the ``async with`` block.

        ``resync_interval`` bounds how long a missed event can go unnoticed: the namespace's loops relist
        at the shortest interval of their subscribers (a shorter one takes effect from the next relist).
        """
        self._adopt_event_loop()
        subscription = Subscription(self, conn_id, namespace, name, uid, resync_interval)
        async with self._subscribed(subscription, (RAYJOBS, WORKLOADS)):
            yield subscription

    @contextlib.asynccontextmanager
    async def subscribe_service(
        self,
        conn_id: str,
        namespace: str,
        name: str,
        uid: str,
        resync_interval: float = DEFAULT_RESYNC_SECONDS,
    ) -> AsyncIterator[ServiceSubscription]:
        """Register interest in one RayService (and the Workloads admitting it) for the ``async with``
        block: the namespace's RayService watch and its Workload watch, shared like the RayJob ones."""
        self._adopt_event_loop()
        subscription = ServiceSubscription(self, conn_id, namespace, name, uid, resync_interval)
        async with self._subscribed(subscription, (RAYSERVICES, WORKLOADS)):
            yield subscription

    @contextlib.asynccontextmanager
    async def _subscribed(
        self, subscription: Subscription, resources: tuple[WatchedResource, ...]
    ) -> AsyncIterator[None]:
        """Add ``subscription`` to its scope with the watch loops it needs; on leaving, stop the loops
        nobody needs any more and close the scope with its last subscriber."""
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
        try:
            yield
        finally:
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
                for loop in scope.loops.values():
                    await loop.stop()
                await scope.client.retire()

    def waiting(self) -> dict[tuple[str, str | None, str], int]:
        """Subscribers per (namespace, LocalQueue, stage): the tasks this triggerer waits for."""
        counts: dict[tuple[str, str | None, str], int] = {}
        for (_, namespace), scope in self._scopes.items():
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
        return sorted((*key, kind) for key, scope in self._scopes.items() for kind in scope.loops)

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

    async def read_through(self, subscription: Subscription, *, rayjob: bool, workload: bool) -> None:
        """Read the subscription's objects from the API server and offer them to the cache."""
        from kueue_ray.hook import AsyncRayJobHook

        hook = AsyncRayJobHook(kubernetes_conn_id=subscription.conn_id)
        # The scope's shared client (no TLS setup per trigger), held until both reads are done.
        async with self._lease(subscription) as client:
            try:
                await self._read(hook, subscription, client, rayjob=rayjob, workload=workload)
            except Exception as exc:
                await self._retire_refused(subscription, client, exc)
                raise

    async def _retire_refused(self, subscription: Subscription, client: Any, exc: BaseException) -> None:
        """A read answered 401: retire the shared client so the next read loads the credentials again."""
        scope = self._scopes.get(subscription.scope)
        if getattr(exc, "status", None) == 401 and scope is not None and client is not None:
            await scope.client.retire(client)

    async def _read(
        self, hook: Any, subscription: Subscription, client: Any, *, rayjob: bool, workload: bool
    ) -> None:
        if rayjob:
            obj = await hook.get_rayjob(subscription.name, subscription.namespace, api_client=client)
            loop = self.loop_of(subscription, RAYJOB)
            if loop is not None:
                if obj is None:
                    self.offer_deleted(loop, subscription.name)
                else:
                    self.offer(loop, subscription.name, obj)
        if workload:
            obj = await hook.find_workload(subscription.uid, subscription.namespace, api_client=client)
            loop = self.loop_of(subscription, WORKLOAD)
            if loop is not None and obj is not None:
                self.offer(loop, subscription.uid, obj)

    async def read_service_through(self, subscription: ServiceSubscription, *, workloads: bool) -> None:
        """Read the RayService (and, before the Workload watch listed, the namespace's job Workloads) from
        the API server and offer them to the cache."""
        from kueue_ray.service_hook import AsyncRayServiceHook

        hook = AsyncRayServiceHook(kubernetes_conn_id=subscription.conn_id)
        async with self._lease(subscription) as client:
            try:
                await self._read_service(hook, subscription, client, workloads=workloads)
            except Exception as exc:
                await self._retire_refused(subscription, client, exc)
                raise

    async def _read_service(
        self, hook: Any, subscription: ServiceSubscription, client: Any, *, workloads: bool
    ) -> None:
        obj = await hook.get_rayservice(subscription.name, subscription.namespace, api_client=client)
        loop = self.loop_of(subscription, RAYSERVICE)
        if loop is not None:
            if obj is None:
                self.offer_deleted(loop, subscription.name)
            else:
                self.offer(loop, subscription.name, obj)
        if workloads:
            items = await hook.list_job_workloads(subscription.namespace, api_client=client)
            loop = self.loop_of(subscription, WORKLOAD)
            if loop is not None:
                for item in items:
                    key = WORKLOADS.key_of(item)
                    if key is not None:
                        self.offer(loop, key, item)

    def _lease(self, subscription: Subscription) -> contextlib.AbstractAsyncContextManager[Any]:
        """The subscription's scope's shared ApiClient; None (the hook opens its own) outside a scope."""
        scope = self._scopes.get(subscription.scope)
        return scope.client.lease() if scope is not None else contextlib.nullcontext()

    async def pending_positions(self, subscription: Subscription, queue: str) -> dict[str, Any] | None:
        """One visibility read of LocalQueue ``queue`` shared by every subscriber of the namespace, indexed
        by Workload name once (``kueue_ray.hook.positions_from_summary``).

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
        from kueue_ray.hook import AsyncRayJobHook, positions_from_summary

        try:
            async with self._lease(subscription) as client:
                summary = await AsyncRayJobHook(kubernetes_conn_id=subscription.conn_id).pending_workloads(
                    subscription.namespace, queue, api_client=client
                )
            return positions_from_summary(summary) if summary is not None else None
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

    def offer(self, loop: _WatchLoop, key: str, obj: dict) -> None:
        """A version of ``key`` arrived: cache what waiting reads of it if it is newer, and tell its
        subscribers."""
        if not resource_version_newer(obj, loop.objects.get(key)):
            return
        obj = loop.objects[key] = loop.resource.essential(obj)
        self._count_change(loop)
        self._deliver(loop, key, obj)

    def offer_deleted(self, loop: _WatchLoop, key: str, obj: dict | None = None) -> None:
        """``key`` is gone: ``obj`` is its last state from a DELETED event, None when a GET or relist found
        nothing under that key."""
        deleted_uid = (obj.get("metadata") or {}).get("uid") if obj is not None else None
        cached = loop.objects.get(key)
        if cached is not None and deleted_uid is not None and cached["metadata"].get("uid") != deleted_uid:
            return  # an older object of the same name went away; the cached one is newer
        loop.objects.pop(key, None)
        self._count_change(loop)
        self._deliver(loop, key, None, deleted_uid=deleted_uid, last=obj or cached)

    @staticmethod
    def _count_change(loop: _WatchLoop) -> None:
        if loop.resource.kind == WORKLOAD:
            loop.scope.workload_changes += 1

    def _deliver(
        self,
        loop: _WatchLoop,
        key: str,
        obj: dict | None,
        deleted_uid: str | None = None,
        last: dict | None = None,
    ) -> None:
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
        if cached is not None and not RAYJOBS.selects(cached) and not scope.subscribers_of(RAYJOB, name):
            del loop.objects[name]

    def _adopt_event_loop(self) -> None:
        """Forget loops bound to an event loop that is gone (a new triggerer loop, or a new test)."""
        running = asyncio.get_running_loop()
        if self._event_loop is not running:
            self._event_loop = running
            self._scopes.clear()
            self._gauges = None


HUB = WatchHub()
