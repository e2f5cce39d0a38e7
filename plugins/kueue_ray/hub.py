"""The triggerer's watch hub: one list+watch per (connection, namespace, resource), shared by all triggers.

A triggerer runs up to a thousand deferred tasks in one asyncio loop. If every RayJobTrigger polled or
watched on its own, the API server would see one request stream per waiting task and the triggerer would
spend its loop on TLS handshakes (anchors §1.4, apache/airflow#71349). Instead, every trigger of a process
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

Robustness: watches resume from the last resourceVersion (bookmarks keep it fresh), relist on 410 Gone,
and back off with jitter on errors and dropped streams; a relist notices deletions that happened while
disconnected. A watch answered with anything but 200 is an error, whatever the client library makes of
it: 401 loads the credentials again, 429 waits for ``Retry-After``, and a 403 to the watch alone (a Role
granting ``list`` but not ``watch``) turns the loop into one list per ``degraded_list_interval``, which
every waiting task is told in its log, with the ``kubectl auth can-i`` check that shows what is missing
(``_WatchLoop``). A subscriber's reads retry transient failures (5xx, 429, dropped connections, timeouts)
with backoff until they succeed, so an API server having a bad minute delays a trigger but never ends
it. The (connection, namespace) has one ApiClient (``SharedApiClient``), lent to its watch loops and to
every read and closed only once nobody holds it: closing a client under a running request is what turned
a reconnect into "Session is closed" for the triggers reading through it. Objects only replace cached ones with a higher resourceVersion, so a slow GET cannot roll
state back. The loops for a (connection, namespace) start with its first subscription and stop with its
last, so an idle triggerer holds no connection open.

Module-level ``HUB`` is the process-wide instance (triggers of one triggerer share class and module state;
airflow-3.3 reference §2). It is a cache only: the truth stays in the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from kueue_ray.api_errors import api_error, can_i, describe_error, retry_after_seconds
from kueue_ray.naming import JOB_UID_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE

log = logging.getLogger(__name__)

RAYJOB = "rayjob"
WORKLOAD = "workload"
NOTICE = "notice"
"""An ``Update`` that is news about waiting itself (the API server refuses to watch), for the task log."""
DEFAULT_RESYNC_SECONDS = 300.0
SERVER_TIMEOUT_GRACE_SECONDS = 15.0
"""How long past its ``timeoutSeconds`` a watch may stay open before the hub ends it itself, so a server
or proxy that never closes a silent stream cannot postpone the relist forever."""


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

    @property
    def qualified(self) -> str:
        """``plural.group``, as RBAC and ``kubectl auth can-i`` name it."""
        return f"{self.plural}.{self.group}"


RAYJOBS = WatchedResource(
    kind=RAYJOB,
    group="ray.io",
    version="v1",
    plural="rayjobs",
    label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
    key_of=lambda obj: (obj.get("metadata") or {}).get("name"),
    selects=lambda obj: _labels(obj).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE,
)
# Kueue copies no labels of ours onto Workloads, only the owner's uid: select on that label existing and
# key the Workloads by it.
WORKLOADS = WatchedResource(
    kind=WORKLOAD,
    group="kueue.x-k8s.io",
    version="v1beta2",
    plural="workloads",
    label_selector=JOB_UID_LABEL,
    key_of=lambda obj: _labels(obj).get(JOB_UID_LABEL),
    selects=lambda obj: JOB_UID_LABEL in _labels(obj),
)


@dataclass(frozen=True)
class Update:
    """A change of one subscribed object. ``object`` None means it no longer exists (for this uid).

    ``kind`` NOTICE carries no object but a ``message`` for the task log (how waiting works right now)."""

    kind: str
    object: dict | None
    message: str = ""


class WatchGone(Exception):
    """The watch's resourceVersion is older than the server's history (410): relist."""


@dataclass
class HubSettings:
    """Tunables; tests shorten them, production keeps the defaults."""

    watch_timeout_seconds: int = 600
    """Longest single watch request; a relist due earlier ends it sooner."""
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    min_healthy_stream_seconds: float = 1.0
    connect_wait_seconds: float = 5.0
    pending_workloads_ttl_seconds: float = 5.0
    """How long one visibility read of a LocalQueue answers every trigger asking for a queue position."""
    degraded_list_interval: float = 10.0
    """While the API server refuses to watch a resource (403) but lets it be listed: seconds between the
    loop's requests, each a list, so a change reaches the waiting tasks at most this late (the polling
    triggers of the cncf provider wait 10 s too, but each makes its own request)."""
    degraded_watch_retry_every: int = 30
    """While polling: every this many requests is an attempt to watch again instead of a list (with the
    defaults, once every 5 minutes)."""


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


@dataclass
class _OpenClient:
    client: Any
    exit_stack: contextlib.AsyncExitStack
    users: int = 0
    retired: bool = False


class SharedApiClient:
    """The one ApiClient of a (connection, namespace), owned here and only lent out.

    Both watch loops and every one-off read of the scope ``lease`` it, so there is one connection pool and
    no TLS setup per request. It is closed only when it is retired (credentials refused, or the scope
    ended) *and* its last lease is returned; a lease taken after retirement opens a fresh client.
    """

    def __init__(self, factory: Callable[[str], contextlib.AbstractAsyncContextManager[Any]], conn_id: str):
        self._factory = factory
        self._conn_id = conn_id
        self._current: _OpenClient | None = None
        self._opening = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Any]:
        opened = await self._open()
        opened.users += 1
        try:
            yield opened.client
        finally:
            opened.users -= 1
            if opened.retired and opened.users == 0:
                await opened.exit_stack.aclose()

    async def _open(self) -> _OpenClient:
        async with self._opening:
            if self._current is None:
                exit_stack = contextlib.AsyncExitStack()
                client = await exit_stack.enter_async_context(self._factory(self._conn_id))
                self._current = _OpenClient(client, exit_stack)
            return self._current

    async def retire(self, client: Any = None) -> None:
        """Stop lending ``client`` (the current one when None): the next lease opens a new client, and this
        one closes as soon as its last user returns it."""
        opened = self._current
        if opened is None or (client is not None and opened.client is not client):
            return
        self._current = None
        opened.retired = True
        if opened.users == 0:
            await opened.exit_stack.aclose()


class Subscription:
    """One trigger's interest in one RayJob (name + uid) and its Workload."""

    def __init__(
        self, hub: WatchHub, conn_id: str, namespace: str, name: str, uid: str, resync_interval: float
    ) -> None:
        self.hub = hub
        self.conn_id = conn_id
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.resync_interval = resync_interval
        self.updates: asyncio.Queue[Update] = asyncio.Queue()

    @property
    def scope(self) -> tuple[str, str]:
        return (self.conn_id, self.namespace)

    async def next_update(self, timeout: float | None) -> Update | None:
        """The next change, or None when ``timeout`` seconds pass without one (None waits for ever)."""
        try:
            return await asyncio.wait_for(self.updates.get(), timeout)
        except TimeoutError:
            return None

    async def current(self, *, reread_rayjob: bool = False) -> tuple[dict | None, dict | None]:
        """(RayJob, Workload) as known now: from the hub's cache, or read from the API server.

        A read that fails (API errors, dropped connections, timeouts, beyond what the hook's own retries
        absorb) is retried with backoff until it succeeds: a trigger waits through an unhealthy API server
        instead of dying with it.
        """
        settings = self.hub.settings
        backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        while True:
            try:
                return await self._read_current(reread_rayjob)
            except Exception as exc:  # noqa: BLE001 - whatever the API did, waiting goes on
                delay = max(backoff.next_delay(), retry_after_seconds(exc) or 0.0)
                hint = ""
                if getattr(exc, "status", None) == 403:
                    hint = f" (check: {can_i('get', 'rayjobs.ray.io', self.namespace)})"
                log.warning(
                    "Reading RayJob %s/%s failed (%s)%s; retrying in %.1fs",
                    self.namespace,
                    self.name,
                    describe_error(exc),
                    hint,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _read_current(self, reread_rayjob: bool) -> tuple[dict | None, dict | None]:
        """One attempt of ``current``.

        A subscription waits for its loops' first list (a burst of triggers starting together costs one
        LIST per resource, not a GET each). After that the cache is authoritative up to the watch's
        position: a missing Workload simply does not exist yet (its ADDED event will come), and only a
        missing RayJob is read (just created, or outside the watch's label selector). ``reread_rayjob``
        reads the RayJob anyway, for a RayJob the watch does not cover. Whatever is read goes through
        the hub, so every subscriber of it benefits.
        """
        listed = {kind: await self._wait_for_list(kind) for kind in (RAYJOB, WORKLOAD)}
        rayjob = self.hub.cached(self, RAYJOB)
        workload = self.hub.cached(self, WORKLOAD)
        read_rayjob = reread_rayjob or rayjob is None
        read_workload = workload is None and not listed[WORKLOAD]
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

    async def pending_workloads(self, queue: str) -> dict | None:
        """The visibility summary of LocalQueue ``queue`` (shared, a few seconds old at most); None when
        the visibility API is not served, not allowed or failing."""
        return await self.hub.pending_workloads(self, queue)

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


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


class Refused(Exception):
    """The API server answered a list or watch with an error status (HTTP, a watch's ERROR event, or a
    Status line where an event belongs).

    Kept apart from the client's ApiException because a watch is opened with ``_preload_content=False``,
    where kubernetes_asyncio returns any answer, 200 or not, as a stream: the hub must look at the status
    itself, and then needs to know which verb was refused to say what to grant.
    """

    def __init__(
        self, verb: str, status: int | None, reason: str, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.verb = verb
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def from_api_exception(cls, verb: str, exc: Any) -> Refused:
        status, reason, message = api_error(exc)
        return cls(verb, status, reason, message, retry_after_seconds(exc))

    @classmethod
    def from_status(cls, verb: str, status: dict) -> Refused:
        return cls(verb, status.get("code"), status.get("reason") or "", status.get("message") or "")


class _WatchLoop:
    """One list+watch of one resource in one namespace through one connection, with its cache.

    What it does when the API server says no (``_refused``): 410 relists; 401 makes the next request load
    the credentials again (once at once, then with backoff); 429 waits at least ``Retry-After``; 5xx and
    dropped connections back off with jitter; 403 backs off and says what to grant. A 403 to the *watch*
    while lists are allowed (a Role granting ``list`` but not ``watch``) degrades the loop to polling:
    one request per ``degraded_list_interval``, a list, so every subscriber still sees every change, only
    later; every ``degraded_watch_retry_every``-th of those requests tries the watch again instead, from the
    last list's resourceVersion, so that fixing the Role ends the polling without losing a change.
    """

    def __init__(self, hub: WatchHub, scope: _Scope, resource: WatchedResource) -> None:
        self.hub = hub
        self.scope = scope
        self.conn_id, self.namespace = scope.key
        self.resource = resource
        self.key = (self.conn_id, self.namespace, resource.kind)
        self.objects: dict[str, dict] = {}
        self.resource_version: str | None = None
        self.next_relist = 0.0
        """Monotonic time of the next safety-net relist."""
        self.task: asyncio.Task | None = None
        self.listed = asyncio.Event()
        """Set once the first list is in the cache."""
        self.polling_because: Refused | None = hub.remembered_watch_refusal(self.key)
        """The watch refusal (403) that made the loop list every interval instead; None while it watches.
        A loop that replaces one refused less than a watch retry ago starts listing: asking again at once
        would make every restart of a namespace's loops (its last waiting task ended, a new one came) a
        refused request."""
        self._polls = 0
        self._credentials_reloaded = False
        """The credentials were loaded again after a 401 and nothing succeeded since."""
        self._expired_in_a_row = 0

    def start(self) -> None:
        # A context of its own: the loop serves every trigger of the scope, so its log lines belong to the
        # triggerer's log, not to the task log of whichever trigger happened to start it.
        self.task = asyncio.create_task(
            self._run(),
            name=f"kueue-ray-watch/{self.conn_id}/{self.namespace}/{self.resource.plural}",
            context=contextvars.Context(),
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
                # The scope's shared ApiClient: no TLS setup per request or per reconnect. It is only
                # replaced when the credentials are refused (e.g. an expired exec-plugin token).
                async with self.scope.client.lease() as api_client:
                    try:
                        await self._stream(CustomObjectsApi(api_client), backoff)
                    except Refused:  # _stream raises only 401: load the credentials again
                        await self.scope.client.retire(api_client)
                        raise
            except Refused as refused:
                if not self._credentials_reloaded:
                    self._credentials_reloaded = True
                    log.warning(
                        "The API server refused the credentials of connection %s for %s %s in %s (%s); "
                        "loading them again",
                        self.conn_id,
                        refused.verb,
                        self.resource.plural,
                        self.namespace,
                        refused,
                    )
                    continue
                delay = max(backoff.next_delay(), refused.retry_after or 0.0)
                log.warning(
                    "The API server still refuses the credentials of connection %s (%s); loading them "
                    "again in %.1fs",
                    self.conn_id,
                    refused,
                    delay,
                )
                await asyncio.sleep(delay)
            except Exception as exc:  # noqa: BLE001 - a broken config: reconnect later
                delay = backoff.next_delay()
                log.warning(
                    "Connection for the %s watch in namespace %s failed (%s); reconnecting in %.1fs",
                    self.resource.plural,
                    self.namespace,
                    describe_error(exc),
                    delay,
                )
                await asyncio.sleep(delay)

    async def _stream(self, api: Any, backoff: Backoff) -> None:
        """List, then watch from the list's resourceVersion until the next relist is due, forever (or poll
        while watching is refused); raises only on refused credentials (401)."""
        from aiohttp import ClientError

        settings = self.hub.settings
        while True:
            try:
                if self.polling_because is not None:
                    await self._poll(api)
                    continue
                if self.resource_version is None or time.monotonic() >= self.next_relist:
                    await self._list(api)
                started = time.monotonic()
                received = await self._watch(api, self._watch_timeout())
                if received:
                    backoff.reset()
                    self._expired_in_a_row = 0
                elif time.monotonic() - started < settings.min_healthy_stream_seconds:
                    # The server closed an empty stream at once: treat it as a dropped stream.
                    await asyncio.sleep(backoff.next_delay())
            except WatchGone:
                await self._relist_after_expiry(backoff)
            except Refused as refused:
                if refused.status == 401:
                    raise
                if refused.status == 410:
                    await self._relist_after_expiry(backoff)
                else:
                    await self._refused(refused, backoff)
            # A dropped stream, a cut-off JSON line, a timeout: retry from where we were.
            except (ClientError, OSError, ValueError, TimeoutError) as exc:
                await self._back_off(backoff, exc)

    async def _relist_after_expiry(self, backoff: Backoff) -> None:
        """410 Gone: the watch's resourceVersion is older than the server's history. Relist at once; only
        when that keeps happening without a healthy watch in between, relist with backoff."""
        log.info("Watch of %s in %s expired (410 Gone); relisting", self.resource.plural, self.namespace)
        self.resource_version = None
        if self._expired_in_a_row:
            await asyncio.sleep(backoff.next_delay())
        self._expired_in_a_row += 1

    async def _refused(self, refused: Refused, backoff: Backoff) -> None:
        """Any refusal but 401 and 410 (those are handled by the caller)."""
        if refused.status == 403 and refused.verb == "watch" and self.polling_because is None:
            self._start_polling(refused)
            return
        delay = max(backoff.next_delay(), refused.retry_after or 0.0)
        if refused.status == 403:
            log.warning(
                "The API server refuses to %s %s in namespace %s (%s); retrying in %.1fs. Grant it to the "
                "user of connection %s (check: %s)",
                refused.verb,
                self.resource.plural,
                self.namespace,
                refused,
                delay,
                self.conn_id,
                can_i(refused.verb, self.resource.qualified, self.namespace),
            )
        else:
            log.warning(
                "%s of %s in namespace %s failed (%s); retrying in %.1fs from resourceVersion %s",
                refused.verb.capitalize(),
                self.resource.plural,
                self.namespace,
                refused,
                delay,
                self.resource_version,
            )
        await asyncio.sleep(delay)

    def _start_polling(self, refused: Refused) -> None:
        interval = self.hub.settings.degraded_list_interval
        self.polling_because = refused
        self._polls = 0
        self.hub.watch_refusals[self.key] = (refused, time.monotonic())
        log.warning(
            "The API server refuses to watch %s in namespace %s (%s); listing them every %gs instead (check: %s)",
            self.resource.plural,
            self.namespace,
            refused,
            interval,
            can_i("watch", self.resource.qualified, self.namespace),
        )
        self.hub.notify(self.scope, self.polling_notice())

    def polling_notice(self) -> str:
        """What each waiting task's log says while this loop polls instead of watching."""
        interval = self.hub.settings.degraded_list_interval
        return (
            f"The API server refuses to watch {self.resource.plural} in namespace {self.namespace} "
            f"({self.polling_because}). Following them by listing every {interval:g}s instead: changes "
            f"reach this task up to {interval:g}s late, none is lost. To watch again, grant 'watch' on "
            f"{self.resource.qualified} to the user of connection {self.conn_id} "
            f"(check: {can_i('watch', self.resource.qualified, self.namespace)})"
        )

    def _watching_again(self) -> None:
        if self.polling_because is None:
            return
        self.polling_because = None
        self.hub.watch_refusals.pop(self.key, None)
        message = (
            f"The API server lets connection {self.conn_id} watch {self.resource.plural} in namespace "
            f"{self.namespace} again: changes reach this task as they happen"
        )
        log.warning(message)
        self.hub.notify(self.scope, message)

    async def _poll(self, api: Any) -> None:
        """One interval of polling: wait, then one request (a list; every Nth time a watch instead, which
        ends the polling if the API server allows it again)."""
        settings = self.hub.settings
        await asyncio.sleep(settings.degraded_list_interval)
        self._polls += 1
        if self._polls % settings.degraded_watch_retry_every or self.resource_version is None:
            await self._list(api)
            return
        try:
            await self._watch(api, self._watch_timeout())
        except Refused as refused:
            if refused.status != 403:
                raise

    def _watch_timeout(self) -> int:
        """Seconds the next watch may last: until the relist is due, at most the configured maximum."""
        remaining = self.next_relist - time.monotonic()
        return max(1, min(self.hub.settings.watch_timeout_seconds, math.ceil(remaining)))

    async def _back_off(self, backoff: Backoff, exc: BaseException) -> None:
        delay = backoff.next_delay()
        log.warning(
            "Watch of %s in namespace %s failed (%s); retrying in %.1fs from resourceVersion %s",
            self.resource.plural,
            self.namespace,
            describe_error(exc),
            delay,
            self.resource_version,
        )
        await asyncio.sleep(delay)

    def _succeeded(self) -> None:
        """A request was answered 200: refused credentials, if any, work again."""
        self._credentials_reloaded = False

    async def _list(self, api: Any) -> None:
        """Replace the cache with a fresh list; deliver what changed or disappeared since the last one."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            result = await api.list_namespaced_custom_object(
                self.resource.group,
                self.resource.version,
                self.namespace,
                self.resource.plural,
                label_selector=self.resource.label_selector,
            )
        except ApiException as exc:
            raise Refused.from_api_exception("list", exc) from exc
        self._succeeded()
        seen: set[str] = set()
        for obj in result.get("items") or ():
            key = self.resource.key_of(obj)
            if key is not None:
                seen.add(key)
                self.hub.offer(self, key, obj)
        # A cached object the list would have returned but did not was deleted while we were not watching.
        gone = [k for k, obj in self.objects.items() if k not in seen and self.resource.selects(obj)]
        for key in gone:
            self.hub.offer_deleted(self, key)
        self.resource_version = (result.get("metadata") or {}).get("resourceVersion")
        # Jitter, so that the triggerers of a fleet do not relist in lockstep.
        self.next_relist = time.monotonic() + self.scope.resync_interval() * random.uniform(0.9, 1.0)
        self.listed.set()

    async def _watch(self, api: Any, timeout: int) -> bool:
        """Stream events until the server ends the watch (or ``timeout`` plus a grace passes); True if any
        event (one with a ``type``) arrived. Raises ``Refused`` when the server answers anything but 200."""
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
                timeout_seconds=timeout,
                # The cncf provider's ApiClient gives every request a 60 s total client timeout unless
                # told otherwise (``timeout_seconds`` only reaches the server): without this, each watch
                # would be cut after a minute and re-opened, two requests a minute for nothing.
                _request_timeout=timeout + 2 * SERVER_TIMEOUT_GRACE_SECONDS,
                _preload_content=False,
            )
        except ApiException as exc:
            raise Refused.from_api_exception("watch", exc) from exc
        received = False
        try:
            if response.status != 200:
                # Without preloading, the client hands over a 403 or 429 as if it were a stream of events.
                raise Refused.from_api_exception("watch", await _as_api_exception(response))
            self._succeeded()
            self._watching_again()
            async with asyncio.timeout(timeout + SERVER_TIMEOUT_GRACE_SECONDS):
                while True:
                    line = await response.content.readline()
                    if not line:
                        return received
                    if line.strip() and self._handle(json.loads(line)):
                        received = True
        except TimeoutError:
            return received
        finally:
            response.release()

    def _handle(self, event: dict) -> bool:
        """Apply one line of the stream; True for an event (it has a ``type``), False for anything else."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind is None:
            if event.get("kind") == "Status":  # a refusal where an event belongs
                raise Refused.from_status("watch", event)
            return False
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchGone()
            raise Refused.from_status("watch", obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if kind == "BOOKMARK":
            return True
        key = self.resource.key_of(obj)
        if key is None:
            return True
        if kind == "DELETED":
            self.hub.offer_deleted(self, key, obj)
        else:
            self.hub.offer(self, key, obj)
        return True


async def _as_api_exception(response: Any) -> Any:
    """The ApiException kubernetes_asyncio would have raised for this answer had it been preloaded."""
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.client.rest import RESTResponse

    return ApiException(http_resp=RESTResponse(response, await response.read()))


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
    loops: dict[str, _WatchLoop] = field(default_factory=dict)
    pending_reads: dict[str, _PendingRead] = field(default_factory=dict)
    workload_changes: int = 0
    """Workload changes cached so far (``Subscription.workloads_version``)."""

    def add(self, subscription: Subscription) -> None:
        self.by_name.setdefault(subscription.name, []).append(subscription)
        self.by_uid.setdefault(subscription.uid, []).append(subscription)

    def remove(self, subscription: Subscription) -> None:
        for index, key in ((self.by_name, subscription.name), (self.by_uid, subscription.uid)):
            index[key].remove(subscription)
            if not index[key]:
                del index[key]

    def empty(self) -> bool:
        return not self.by_name

    def subscribers_of(self, kind: str, key: str) -> list[Subscription]:
        return (self.by_name if kind == RAYJOB else self.by_uid).get(key, [])

    def resync_interval(self) -> float:
        """The shortest safety-net interval any subscriber asked for."""
        intervals = [s.resync_interval for group in self.by_name.values() for s in group]
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
        self.watch_refusals: dict[tuple[str, str, str], tuple[Refused, float]] = {}
        """(connection, namespace, kind) → the last 403 to a watch and when: outlives the loops."""
        self._event_loop: asyncio.AbstractEventLoop | None = None

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
        scope = self._scopes.get(subscription.scope)
        if scope is None:
            scope = self._scopes[subscription.scope] = _Scope(
                subscription.scope, SharedApiClient(self.connection_factory, conn_id)
            )
            for resource in (RAYJOBS, WORKLOADS):
                loop = scope.loops[resource.kind] = _WatchLoop(self, scope, resource)
                loop.start()
        scope.add(subscription)
        for loop in scope.loops.values():
            if loop.polling_because is not None:
                subscription.updates.put_nowait(Update(NOTICE, None, loop.polling_notice()))
        try:
            yield subscription
        finally:
            scope.remove(subscription)
            if not scope.empty():
                self._forget_unwatched(scope, subscription.name)
            elif self._scopes.get(subscription.scope) is scope:
                del self._scopes[subscription.scope]
                for read in scope.pending_reads.values():
                    read.task.cancel()
                for loop in scope.loops.values():
                    await loop.stop()
                await scope.client.retire()

    def remembered_watch_refusal(self, key: tuple[str, str, str]) -> Refused | None:
        """The 403 an earlier loop of ``key`` met, while its watch retry is not yet due."""
        remembered = self.watch_refusals.get(key)
        if remembered is None:
            return None
        refused, at = remembered
        retry_after = self.settings.degraded_list_interval * self.settings.degraded_watch_retry_every
        return refused if time.monotonic() - at < retry_after else None

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
        obj = loop.objects.get(subscription.name if kind == RAYJOB else subscription.uid)
        if obj is not None and kind == RAYJOB and obj["metadata"].get("uid") != subscription.uid:
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
                scope = self._scopes.get(subscription.scope)
                if getattr(exc, "status", None) == 401 and scope is not None and client is not None:
                    await scope.client.retire(client)  # the next read loads the credentials again
                raise

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

    def _lease(self, subscription: Subscription) -> contextlib.AbstractAsyncContextManager[Any]:
        """The subscription's scope's shared ApiClient; None (the hook opens its own) outside a scope."""
        scope = self._scopes.get(subscription.scope)
        return scope.client.lease() if scope is not None else contextlib.nullcontext()

    async def pending_workloads(self, subscription: Subscription, queue: str) -> dict | None:
        """One visibility read of LocalQueue ``queue`` shared by every subscriber of the namespace.

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

    async def _read_pending(self, subscription: Subscription, queue: str) -> dict | None:
        from kueue_ray.hook import AsyncRayJobHook

        try:
            async with self._lease(subscription) as client:
                return await AsyncRayJobHook(kubernetes_conn_id=subscription.conn_id).pending_workloads(
                    subscription.namespace, queue, api_client=client
                )
        except Exception as exc:  # noqa: BLE001 - a position is a nicety; never fail a wait for it
            log.debug(
                "Pending workloads of LocalQueue %s/%s unavailable: %s", subscription.namespace, queue, exc
            )
            return None

    def notify(self, scope: _Scope, message: str) -> None:
        """Tell every subscriber of ``scope`` something about waiting itself (their task logs show it)."""
        for group in scope.by_name.values():
            for subscription in group:
                subscription.updates.put_nowait(Update(NOTICE, None, message))

    def offer(self, loop: _WatchLoop, key: str, obj: dict) -> None:
        """A version of ``key`` arrived: cache it if it is newer and tell its subscribers."""
        if not resource_version_newer(obj, loop.objects.get(key)):
            return
        loop.objects[key] = obj
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
        self._deliver(loop, key, None, deleted_uid=deleted_uid)

    @staticmethod
    def _count_change(loop: _WatchLoop) -> None:
        if loop.resource.kind == WORKLOAD:
            loop.scope.workload_changes += 1

    def _deliver(self, loop: _WatchLoop, key: str, obj: dict | None, deleted_uid: str | None = None) -> None:
        for subscription in loop.scope.subscribers_of(loop.resource.kind, key):
            if loop.resource.kind == WORKLOAD:
                subscription.updates.put_nowait(Update(WORKLOAD, obj))
                continue
            if obj is None and deleted_uid not in (None, subscription.uid):
                continue  # a predecessor with this name was deleted, not the subscribed RayJob
            mine = obj if obj is not None and obj["metadata"].get("uid") == subscription.uid else None
            subscription.updates.put_nowait(Update(RAYJOB, mine))

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


HUB = WatchHub()
