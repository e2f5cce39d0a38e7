"""The triggerer's watch hub: one list+watch per (connection, namespace, resource), shared by all triggers.

A triggerer runs up to a thousand deferred tasks in one asyncio loop. If every RayJobTrigger polled or
watched on its own, the API server would see one request stream per waiting task and the triggerer would
spend its loop on TLS handshakes (anchors §1.4, apache/airflow#71349). Instead, every trigger of a process
subscribes here with its RayJob name and uid; the hub runs exactly one watch for the namespace's RayJobs
created by this project and one for its Kueue Workloads, keeps the latest object of every *subscribed* key
in memory and hands changes to the subscribers through their own asyncio queues.

Guarantees the trigger relies on:

* A subscriber starts from the current state: the hub's cache when it already holds the object, otherwise
  one GET (``Subscription.current``), so a trigger that starts after an event was broadcast still sees it.
* Watches resume from the last resourceVersion (bookmarks keep it fresh), relist on 410 Gone, and back off
  with jitter on errors and dropped streams; a relist notices deletions that happened while disconnected.
* Objects only replace cached ones with a higher resourceVersion, so a slow GET cannot roll state back.
* The loops for a (connection, namespace) start with its first subscription and stop with its last, so an
  idle triggerer holds no connection open.

Module-level ``HUB`` is the process-wide instance (triggers of one triggerer share class and module state;
airflow-3.3 reference §2). It is a cache only: the truth stays in the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from kueue_ray.naming import JOB_UID_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE

log = logging.getLogger(__name__)

RAYJOB = "rayjob"
WORKLOAD = "workload"


@dataclass(frozen=True)
class WatchedResource:
    """What one watch loop lists and watches, and how it keys the objects it caches."""

    kind: str
    group: str
    version: str
    plural: str
    label_selector: str
    key_of: Callable[[dict], str | None]


def _rayjob_key(obj: dict) -> str | None:
    return (obj.get("metadata") or {}).get("name")


def _workload_key(obj: dict) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)


RAYJOBS = WatchedResource(
    kind=RAYJOB,
    group="ray.io",
    version="v1",
    plural="rayjobs",
    label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
    key_of=_rayjob_key,
)
# Kueue copies no labels of ours onto Workloads, only the owner's uid: select on that label existing and
# keep only the Workloads whose job uid is subscribed.
WORKLOADS = WatchedResource(
    kind=WORKLOAD,
    group="kueue.x-k8s.io",
    version="v1beta2",
    plural="workloads",
    label_selector=JOB_UID_LABEL,
    key_of=_workload_key,
)


@dataclass(frozen=True)
class Update:
    """A change of one subscribed object. ``object`` None means it no longer exists (for this uid)."""

    kind: str
    object: dict | None


class WatchGone(Exception):
    """The watch's resourceVersion is older than the server's history (410): relist."""


@dataclass
class HubSettings:
    """Tunables; tests shorten them, production keeps the defaults."""

    watch_timeout_seconds: int = 290
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    min_healthy_stream_seconds: float = 1.0
    connect_wait_seconds: float = 5.0


def resource_version_newer(candidate: dict, current: dict | None) -> bool:
    """True when ``candidate`` should replace ``current`` in the cache.

    resourceVersions are opaque strings to clients, but every API server in practice issues increasing
    integers (etcd revisions); compare them as integers when both parse, and otherwise trust the newcomer.
    """
    if current is None:
        return True
    new_rv = (candidate.get("metadata") or {}).get("resourceVersion")
    old_rv = (current.get("metadata") or {}).get("resourceVersion")
    try:
        return int(new_rv) > int(old_rv)
    except (TypeError, ValueError):
        return new_rv != old_rv


class Backoff:
    """Exponential backoff with 'equal jitter', so many triggerers do not reconnect in lockstep."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempts = 0

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * (2**self.attempts))
        self.attempts += 1
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempts = 0


class Subscription:
    """One trigger's interest in one RayJob (name + uid) and its Workload."""

    def __init__(self, hub: WatchHub, conn_id: str, namespace: str, name: str, uid: str) -> None:
        self.hub = hub
        self.conn_id = conn_id
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.updates: asyncio.Queue[Update] = asyncio.Queue()
        self.listed_after_subscribing: dict[str, bool] = {}
        """Per resource: whether the loop's (first) list was still to come when this subscription began,
        so that list covers it. Filled in by the hub."""

    async def next_update(self, timeout: float | None) -> Update | None:
        """The next change, or None when ``timeout`` seconds pass without one."""
        try:
            return await asyncio.wait_for(self.updates.get(), timeout)
        except TimeoutError:
            return None

    async def current(self, *, refresh: bool = False) -> tuple[dict | None, dict | None]:
        """(RayJob, Workload) as known now: from the hub's cache, or read from the API server.

        A subscription that arrived before its loops' first list waits for that list (a burst of triggers
        starting together costs one LIST, not one GET each). The RayJob is still read directly when the
        cache lacks it (a RayJob outside the watch's label selector); a missing Workload is only looked up
        when no list since subscribing could have seen it. With ``refresh`` (the periodic resync) both are
        read from the API server; what is read goes through the hub, so every subscriber benefits.
        """
        covered = {kind: await self._wait_for_list(kind) for kind in (RAYJOB, WORKLOAD)}
        rayjob = self.hub.cached(self, RAYJOB)
        workload = self.hub.cached(self, WORKLOAD)
        read_rayjob = refresh or rayjob is None
        read_workload = refresh or (workload is None and not covered[WORKLOAD])
        if read_rayjob or read_workload:
            await self.hub.refresh(self, rayjob=read_rayjob, workload=read_workload)
            rayjob = self.hub.cached(self, RAYJOB)
            workload = self.hub.cached(self, WORKLOAD)
        return rayjob, workload

    async def _wait_for_list(self, kind: str) -> bool:
        """True once a list that started after this subscription has been applied to the cache."""
        loop = self.hub.loop_of(self, kind)
        if loop is None or not self.listed_after_subscribing.get(kind):
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loop.listed.wait(), self.hub.settings.connect_wait_seconds)
        return loop.listed.is_set()

    @property
    def api_client(self) -> Any:
        """The hub's connected ApiClient for this namespace, or None while it (re)connects."""
        return self.hub.api_client(self.conn_id, self.namespace)

    async def connected_api_client(self, timeout: float) -> Any:
        """The hub's ApiClient, waiting up to ``timeout`` seconds for its watch loop to connect."""
        loop = self.hub.loop_of(self, RAYJOB)
        if loop is not None and loop.api_client is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(loop.connected.wait(), timeout)
        return self.api_client


class _WatchLoop:
    """One list+watch of one resource in one namespace through one connection, with its cache."""

    def __init__(self, hub: WatchHub, conn_id: str, namespace: str, resource: WatchedResource) -> None:
        self.hub = hub
        self.conn_id = conn_id
        self.namespace = namespace
        self.resource = resource
        self.objects: dict[str, dict] = {}
        self.resource_version: str | None = None
        self.task: asyncio.Task | None = None
        self.api_client: Any = None
        """The loop's ApiClient while connected; one-off reads of its subscribers reuse it."""
        self.connected = asyncio.Event()
        self.listed = asyncio.Event()
        """Set once the first list is in the cache."""

    def start(self) -> None:
        self.task = asyncio.create_task(
            self._run(), name=f"kueue-ray-watch/{self.conn_id}/{self.namespace}/{self.resource.plural}"
        )

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        from kubernetes_asyncio.client import CustomObjectsApi

        settings = self.hub.settings
        backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        while True:
            try:
                # One ApiClient for the life of this loop: no TLS setup per request or per reconnect. It is
                # only replaced when the credentials are refused (e.g. an expired exec-plugin token).
                async with self.hub.connection_factory(self.conn_id) as api_client:
                    self.api_client = api_client
                    self.connected.set()
                    await self._stream(CustomObjectsApi(api_client), backoff)
            except asyncio.CancelledError:
                self._disconnected()
                raise
            except Exception as exc:  # noqa: BLE001 - refused credentials or a broken config: reconnect later
                self._disconnected()
                delay = backoff.next_delay()
                log.warning(
                    "Connection for the %s watch in namespace %s failed (%s: %s); reconnecting in %.1fs",
                    self.resource.plural,
                    self.namespace,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _stream(self, api: Any, backoff: Backoff) -> None:
        """List, then watch from the list's resourceVersion, forever; raises only on refused credentials."""
        from aiohttp import ClientError
        from kubernetes_asyncio.client.exceptions import ApiException

        settings = self.hub.settings
        while True:
            try:
                if self.resource_version is None:
                    await self._list(api)
                    backoff.reset()
                started = time.monotonic()
                received = await self._watch(api)
                if received:
                    backoff.reset()
                elif time.monotonic() - started < settings.min_healthy_stream_seconds:
                    # The server closed an empty stream at once: treat it as a dropped stream.
                    await asyncio.sleep(backoff.next_delay())
            except WatchGone:
                log.info(
                    "Watch of %s in %s expired (410 Gone); relisting", self.resource.plural, self.namespace
                )
                self.resource_version = None
            except ApiException as exc:
                if exc.status in (401, 403):
                    raise
                await self._back_off(backoff, exc)
            except (
                ClientError,
                OSError,
                ValueError,
                TimeoutError,
            ) as exc:  # dropped stream, cut-off JSON line
                await self._back_off(backoff, exc)

    async def _back_off(self, backoff: Backoff, exc: BaseException) -> None:
        delay = backoff.next_delay()
        log.warning(
            "Watch of %s in namespace %s failed (%s: %s); retrying in %.1fs from resourceVersion %s",
            self.resource.plural,
            self.namespace,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
            delay,
            self.resource_version,
        )
        await asyncio.sleep(delay)

    def _disconnected(self) -> None:
        self.api_client = None
        self.connected.clear()

    async def _list(self, api: Any) -> None:
        result = await api.list_namespaced_custom_object(
            self.resource.group,
            self.resource.version,
            self.namespace,
            self.resource.plural,
            label_selector=self.resource.label_selector,
        )
        seen: set[str] = set()
        for obj in result.get("items") or ():
            key = self.resource.key_of(obj)
            if key is not None:
                seen.add(key)
                self.hub.offer(self, key, obj)
        # Anything we cached that the list no longer holds was deleted while we were disconnected.
        for key in [k for k in self.objects if k not in seen]:
            self.hub.offer_deleted(self, key)
        self.resource_version = (result.get("metadata") or {}).get("resourceVersion")
        self.listed.set()

    async def _watch(self, api: Any) -> bool:
        """Stream events until the server ends the watch; True if any event arrived."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            response = await api.list_namespaced_custom_object(
                self.resource.group,
                self.resource.version,
                self.namespace,
                self.resource.plural,
                label_selector=self.resource.label_selector,
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=self.resource_version,
                timeout_seconds=self.hub.settings.watch_timeout_seconds,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status == 410:
                raise WatchGone() from exc
            raise
        received = False
        try:
            while True:
                line = await response.content.readline()
                if not line:
                    return received
                if not line.strip():
                    continue
                received = True
                self._handle(json.loads(line))
        finally:
            response.release()

    def _handle(self, event: dict) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchGone()
            raise RuntimeError(f"watch error {obj.get('code')} {obj.get('reason')}: {obj.get('message')}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if kind == "BOOKMARK":
            return
        key = self.resource.key_of(obj)
        if key is None:
            return
        if kind == "DELETED":
            self.hub.offer_deleted(self, key, obj)
        else:
            self.hub.offer(self, key, obj)


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
        self._loops: dict[tuple[str, str, str], _WatchLoop] = {}
        self._subscriptions: dict[tuple[str, str], list[Subscription]] = {}
        self._event_loop: asyncio.AbstractEventLoop | None = None

    @contextlib.asynccontextmanager
    async def subscribe(
        self, conn_id: str, namespace: str, name: str, uid: str
    ) -> AsyncIterator[Subscription]:
        """Register interest in one RayJob for the duration of the ``async with`` block."""
        self._adopt_event_loop()
        subscription = Subscription(self, conn_id, namespace, name, uid)
        scope = (conn_id, namespace)
        subscribers = self._subscriptions.setdefault(scope, [])
        subscribers.append(subscription)
        if len(subscribers) == 1:
            for resource in (RAYJOBS, WORKLOADS):
                loop = _WatchLoop(self, conn_id, namespace, resource)
                self._loops[(conn_id, namespace, resource.kind)] = loop
                loop.start()
        for kind in (RAYJOB, WORKLOAD):
            loop = self._loops[(conn_id, namespace, kind)]
            subscription.listed_after_subscribing[kind] = not loop.listed.is_set()
        try:
            yield subscription
        finally:
            subscribers.remove(subscription)
            if subscribers:
                self._forget_unwatched(scope)
            else:
                del self._subscriptions[scope]
                for resource in (RAYJOBS, WORKLOADS):
                    loop = self._loops.pop((conn_id, namespace, resource.kind))
                    await loop.stop()

    def watch_loops(self) -> list[tuple[str, str, str]]:
        """(connection, namespace, resource) of every running watch loop."""
        return sorted(self._loops)

    def loop_of(self, subscription: Subscription, kind: str) -> _WatchLoop | None:
        return self._loops.get((subscription.conn_id, subscription.namespace, kind))

    def api_client(self, conn_id: str, namespace: str) -> Any:
        loop = self._loops.get((conn_id, namespace, RAYJOB))
        return loop.api_client if loop is not None else None

    def cached(self, subscription: Subscription, kind: str) -> dict | None:
        loop = self._loops.get((subscription.conn_id, subscription.namespace, kind))
        if loop is None:
            return None
        obj = loop.objects.get(subscription.name if kind == RAYJOB else subscription.uid)
        if obj is not None and kind == RAYJOB and obj["metadata"].get("uid") != subscription.uid:
            return None
        return obj

    async def refresh(self, subscription: Subscription, *, rayjob: bool, workload: bool) -> None:
        """Read the subscription's objects from the API server and offer them to the cache."""
        from kueue_ray.hook import AsyncRayJobHook

        hook = AsyncRayJobHook(kubernetes_conn_id=subscription.conn_id)
        scope = (subscription.conn_id, subscription.namespace)
        # Reuse the watch loop's connection (no TLS setup per trigger); a fresh one only if it cannot connect.
        client = await subscription.connected_api_client(self.settings.connect_wait_seconds)
        if rayjob:
            obj = await hook.get_rayjob(subscription.name, subscription.namespace, api_client=client)
            loop = self._loops.get((*scope, RAYJOB))
            if loop is not None:
                if obj is None:
                    self.offer_deleted(loop, subscription.name)
                else:
                    self.offer(loop, subscription.name, obj)
        if workload:
            obj = await hook.find_workload(subscription.uid, subscription.namespace, api_client=client)
            loop = self._loops.get((*scope, WORKLOAD))
            if loop is not None and obj is not None:
                self.offer(loop, subscription.uid, obj)

    def offer(self, loop: _WatchLoop, key: str, obj: dict) -> None:
        """A newer version of ``key`` may have arrived: cache it and tell its subscribers."""
        if not self._is_subscribed(loop, key) or not resource_version_newer(obj, loop.objects.get(key)):
            return
        loop.objects[key] = obj
        self._deliver(loop, key, obj)

    def offer_deleted(self, loop: _WatchLoop, key: str, obj: dict | None = None) -> None:
        """``key`` is gone: ``obj`` is its last state from a DELETED event, None when a GET or relist found
        nothing under that key."""
        deleted_uid = (obj.get("metadata") or {}).get("uid") if obj is not None else None
        cached = loop.objects.get(key)
        if cached is not None and deleted_uid is not None and cached["metadata"].get("uid") != deleted_uid:
            return  # an older object of the same name went away; the cached one is newer
        loop.objects.pop(key, None)
        self._deliver(loop, key, None, deleted_uid=deleted_uid)

    def _deliver(self, loop: _WatchLoop, key: str, obj: dict | None, deleted_uid: str | None = None) -> None:
        for subscription in self._subscriptions.get((loop.conn_id, loop.namespace), ()):
            if loop.resource.kind == RAYJOB and subscription.name == key:
                if obj is None and deleted_uid not in (None, subscription.uid):
                    continue  # a predecessor with this name was deleted, not the subscribed RayJob
                mine = obj if obj is not None and obj["metadata"].get("uid") == subscription.uid else None
                subscription.updates.put_nowait(Update(RAYJOB, mine))
            elif loop.resource.kind == WORKLOAD and subscription.uid == key:
                subscription.updates.put_nowait(Update(WORKLOAD, obj))

    def _is_subscribed(self, loop: _WatchLoop, key: str) -> bool:
        subscribers = self._subscriptions.get((loop.conn_id, loop.namespace), ())
        if loop.resource.kind == RAYJOB:
            return any(s.name == key for s in subscribers)
        return any(s.uid == key for s in subscribers)

    def _forget_unwatched(self, scope: tuple[str, str]) -> None:
        for kind in (RAYJOB, WORKLOAD):
            loop = self._loops.get((*scope, kind))
            if loop is not None:
                for key in [k for k in loop.objects if not self._is_subscribed(loop, k)]:
                    del loop.objects[key]

    def _adopt_event_loop(self) -> None:
        """Forget loops bound to an event loop that is gone (a new triggerer loop, or a new test)."""
        running = asyncio.get_running_loop()
        if self._event_loop is not running:
            self._event_loop = running
            self._loops.clear()
            self._subscriptions.clear()


HUB = WatchHub()
