"""A trigger's side of the hub: its ``Subscription`` (one RayJob) or ``ServiceSubscription`` (one
RayService), the ``Mailbox`` the hub drops ``Update``s into, and the reads a trigger makes through the
hub's cache.

Apart from ``kueue_ray.hub.watchhub.WatchHub`` because this is what a trigger holds and calls
(``kueue_ray.trigger``, ``kueue_ray.rayservice.trigger``), while the hub's registry, cache and deliveries
are what every subscription shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kueue_ray.holdings import Holding
from kueue_ray.hub.reads import JOB_WORKLOADS, READ, LoopState, plan_read, wait_for
from kueue_ray.hub.resources import RAYJOB, RAYJOBS, RAYSERVICE, RAYSERVICES, WORKLOAD
from kueue_ray.hub.settings import HubSettings
from kueue_ray.kube.errors import (
    can_i,
    describe_error,
    read_of,
    refusal_message,
    retry_after_seconds,
)
from kueue_ray.kube.refusals import (
    ApiNotServed,
    Backoff,
    Denial,
    RefusalWindow,
    RefusedTooLong,
    refusal_timeout,
)


class HubView(Protocol):
    """What a subscription asks of the hub (``kueue_ray.hub.watchhub.WatchHub``), and no more."""

    settings: HubSettings

    def lease(self, subscription: Subscription) -> contextlib.AbstractAsyncContextManager[Any]: ...

    def identity(self, subscription: Subscription) -> str | None: ...

    def workload_changes(self, subscription: Subscription) -> int: ...

    def holdings(self, subscription: Subscription) -> Iterable[Holding]: ...

    def service_workloads(self, subscription: Subscription) -> list[dict]: ...

    def why_queued(
        self, subscription: Subscription, cluster_queue: Mapping | None, own: Mapping | None, queues: list
    ) -> list[str]: ...

    def rayjob_by_uid(self, subscription: Subscription, uid: str) -> dict | None: ...

    def loop_of(self, subscription: Subscription, kind: str) -> Any: ...

    def cached(self, subscription: Subscription, kind: str) -> dict | None: ...

    async def read(self, subscription: Subscription, what: str) -> None: ...

    async def pending_positions(self, subscription: Subscription, queue: str) -> dict[str, Any] | None: ...


log = logging.getLogger(__name__)

NOTICE = "notice"
"""An ``Update`` that is news about waiting itself (the API server refuses to watch), for the task log."""


@dataclass(frozen=True)
class Update:
    """A change of one subscribed object. ``object`` None means it no longer exists (for this uid).

    ``kind`` NOTICE carries no object but a ``message`` for the task log (how waiting works right now)."""

    kind: str
    object: dict | None
    message: str = ""


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

    async def get(self, timeout: float | None) -> Update | None:
        """The next update; None when ``timeout`` seconds pass without one (None: no limit).

        One future and one timer per wait, not ``asyncio.wait_for`` (its coroutine, a second future and a
        callback): thousands of queued triggers wait here at once, each with a timeout."""
        if self._items is None:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(timeout, _wake, waiter) if timeout is not None else None
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
            if self._items is None:
                return None
        return self.get_nowait()


def _wake(waiter: asyncio.Future) -> None:
    """A mailbox wait's timeout: end the wait (the mailbox then reads as empty)."""
    if not waiter.done():
        waiter.set_result(None)


QUEUED, ADMITTED = "queued", "admitted"
"""A subscriber's ``stage`` for the ``kueue_ray.tasks_waiting`` gauge: waiting for admission, or not."""


class Subscription:
    """One trigger's interest in one RayJob (name + uid) and its Workload.

    ``queue`` and ``stage`` are what the trigger last told about it (LocalQueue, ``QUEUED`` / ``ADMITTED``),
    counted by the hub's ``kueue_ray.tasks_waiting`` gauge. Slotted: a triggerer holds thousands.
    """

    __slots__ = (
        "hub",
        "reader",
        "conn_id",
        "namespace",
        "deployment",
        "name",
        "uid",
        "resync_interval",
        "updates",
        "queue",
        "stage",
    )

    noun = "RayJob"
    resource = RAYJOBS
    kinds = (RAYJOB, WORKLOAD)
    """The watch loops this wait reads through."""

    def __init__(
        self,
        hub: HubView,
        conn_id: str,
        namespace: str,
        name: str,
        uid: str,
        resync_interval: float,
        deployment: str = "",
        reader: Any = None,
    ) -> None:
        self.hub = hub
        # What reads this wait's own objects when the hub's cache cannot answer, handed in by the waiting
        # trigger (its async hook: get_rayjob, find_workload, pending_positions, and for a RayService
        # get_rayservice, list_job_workloads), so that the hub imports no hook.
        self.reader = reader
        self.conn_id = conn_id
        self.namespace = namespace
        self.deployment = deployment
        self.name = name
        self.uid = uid
        self.resync_interval = resync_interval
        self.updates = Mailbox()
        self.queue: str | None = None
        self.stage = QUEUED

    @property
    def scope(self) -> tuple[str, str, str]:
        """(connection, namespace, Airflow deployment): the waits that share watch loops."""
        return (self.conn_id, self.namespace, self.deployment)

    def next_update(self, timeout: float | None) -> Coroutine[Any, Any, Update | None]:
        """The next change, or None when ``timeout`` seconds pass without one (None waits for ever).

        The mailbox's own coroutine, not one wrapping it: one frame less for each waiting trigger."""
        return self.updates.get(timeout)

    def api_client(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The scope's shared ApiClient for a one-off read (e.g. the driver log at the end)."""
        return self.hub.lease(self)

    async def current(
        self, *, reread_rayjob: bool = False, reread_workload: bool = False
    ) -> tuple[dict | None, dict | None]:
        """(RayJob, Workload) as known now: from the hub's cache, or read from the API server.

        A read that fails (API errors, dropped connections, timeouts, beyond what the hook's own retries
        absorb) is retried until it succeeds: a trigger waits through an unhealthy API server instead of
        dying with it. While the scope's loop is failing too, the retry waits on the loop's (one backoff
        per scope and resource); otherwise on this read's own backoff.
        """
        settings = self.hub.settings
        backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        window = RefusalWindow(settings.refusal_timeout or refusal_timeout())
        while True:
            ended = self.access()
            if ended is not None:
                raise ended
            try:
                return await self._read_current(reread_rayjob, reread_workload)
            except (ApiNotServed, RefusedTooLong, asyncio.CancelledError):
                raise
            except Exception as exc:  # noqa: BLE001 - whatever the API did, waiting goes on
                read = (read_of(exc) or ("get", self.resource.qualified))[:2]
                denial = Denial.of(*read, self.namespace, exc)
                if denial is not None:
                    window.refused(denial, time.monotonic())
                    if window.expired():
                        raise self._refused_too_long(denial, window.timeout) from exc
                delay = max(backoff.next_delay(), retry_after_seconds(exc) or 0.0)
                if denial is not None:
                    delay = window.pace(delay, time.monotonic())
                hint = ""
                if getattr(exc, "status", None) == 403:
                    hint = f" (check: {can_i(read[0], read[1], self.namespace, self._identity())})"
                shared = self.failing()  # the next attempt waits on the failing loop's retries instead
                # The read that failed, which is not always the waited-for object's own (the Workload list).
                log.warning(
                    "Reading %s for %s %s/%s failed (%s)%s; %s",
                    f"{read[1]} ({read[0]})",
                    self.noun,
                    self.namespace,
                    self.name,
                    describe_error(exc),
                    hint,
                    "waiting for the shared watch to answer again" if shared else f"retrying in {delay:.1f}s",
                )
                if not shared:
                    await asyncio.sleep(delay)

    def _refused_too_long(self, denial: Denial, seconds: float) -> RefusedTooLong:
        message = refusal_message(
            denial.verb,
            denial.resource,
            denial.namespace,
            status=denial.status,
            said=denial.message,
            identity=self.hub.identity(self),
            conn_id=self.conn_id,
            seconds=seconds,
        )
        return RefusedTooLong(denial, seconds, message)

    def access(self) -> RefusedTooLong | ApiNotServed | None:
        """Why the reads this wait needs no longer work, or None: one of its scope's watch loops refused
        (401/403) for ``refusal_timeout`` in a row, or an API group the cluster does not serve. The loops
        tell every subscriber when that happens (an ``Update``), so a trigger asks after each one."""
        for kind in self.kinds:
            loop = self.hub.loop_of(self, kind)
            if loop is None:
                continue
            if loop.not_served is not None:
                return loop.not_served
            if loop.window.last is not None and loop.window.expired():
                return self._refused_too_long(loop.window.last, loop.window.timeout)
        return None

    async def _read_current(
        self, reread_rayjob: bool, reread_workload: bool
    ) -> tuple[dict | None, dict | None]:
        """One attempt of ``current``.

        Each of the RayJob and its Workload is answered from the scope's cache, waited for on the scope's
        loop, or read, as ``kueue_ray.hub.reads.plan_read`` decides: a burst of triggers starting together
        waits for the loops' first list (one LIST per resource, not a GET each); after it the cache is
        authoritative up to the watch's position, so a missing Workload does not exist yet (its ADDED
        event will come) and only a missing RayJob is read (just created, or outside the watch's label
        selector). ``reread_rayjob`` reads the RayJob anyway, for a RayJob the watch does not cover; with
        ``reread_workload`` too, both are what the API server says now (the cache may be an event, or a
        polling interval, behind). While a loop fails, nothing is read: the loop's retries are everyone's.
        Whatever is read goes through the hub, so every subscriber of it benefits.
        """
        await self._settle_reads({RAYJOB: (reread_rayjob, False), WORKLOAD: (reread_workload, True)})
        return self.hub.cached(self, RAYJOB), self.hub.cached(self, WORKLOAD)

    async def _settle_reads(self, wanted: dict[str, tuple[bool, bool]]) -> None:
        """Wait on the scope's loops until none is waited for, then make the reads still needed (each
        shared by the scope). ``wanted``: kind -> (reread, absent_is_answer), see ``plan_read``."""
        started = time.monotonic()
        while True:
            steps = {}
            for kind, (reread, absent_is_answer) in wanted.items():
                steps[kind] = plan_read(
                    self._loop_state(kind, started),
                    cached=self._holds(kind),
                    reread=reread,
                    absent_is_answer=absent_is_answer,
                    first_list_budget=self.hub.settings.first_list_budget_seconds,
                )
            waited_on = wait_for(steps)
            if waited_on is None:
                break
            ended = self.access()
            if ended is not None:
                raise ended
            await self._wait_on_loop(waited_on)
        for kind, step in steps.items():
            if step == READ:
                await self.hub.read(self, self._what(kind))

    def _what(self, kind: str) -> str:
        return kind

    def _holds(self, kind: str) -> bool:
        """The cache answers this read: it holds the object, and not only from its loop's first list, still
        arriving (``_WatchLoop.partial``)."""
        loop = self.hub.loop_of(self, kind)
        key = self.uid if kind == WORKLOAD else self.name
        return self.hub.cached(self, kind) is not None and not (loop is not None and loop.partial(key))

    def _loop_state(self, kind: str, started: float) -> LoopState | None:
        loop = self.hub.loop_of(self, kind)
        if loop is None:
            return None
        return LoopState(loop.listed.is_set(), loop.failing, time.monotonic() - started)

    async def _wait_on_loop(self, kind: str) -> None:
        """Until the scope's ``kind`` loop's next outcome (at most the first-list budget, then judge again)."""
        loop = self.hub.loop_of(self, kind)
        if loop is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loop.outcome().wait(), self.hub.settings.first_list_budget_seconds)

    def failing(self) -> bool:
        """Whether a loop this wait reads through is failing: its retries pace everyone's, so a failed read
        of this wait's own waits on them instead of retrying on its own."""
        return any((loop := self.hub.loop_of(self, kind)) is not None and loop.failing for kind in self.kinds)

    def rayjob_by_uid(self, uid: str) -> dict | None:
        """A RayJob of this namespace the hub's watch holds, found by uid (e.g. the preemptor that Kueue's
        eviction message names only by its JobUID); None when the watch does not have it."""
        return self.hub.rayjob_by_uid(self, uid)

    def workload(self) -> dict | None:
        """This RayJob's Workload as the hub's watch holds it (trimmed: ``kueue_ray.kube.essential``)."""
        return self.hub.cached(self, WORKLOAD)

    def holdings(self) -> Iterable[Holding]:
        """What the admitted Workloads of this namespace hold, as the hub's watch holds them: who holds the
        quota a queued job needs, without a read of its own, nor a pass over every Workload."""
        return self.hub.holdings(self)

    def why_queued(self, cluster_queue: Mapping | None, own: Mapping | None, queues: list) -> list[str]:
        """The "why still queued" sentences for pending Workload ``own``
        (``why_queued_log.why_queued_sentences`` from this namespace's holdings), shared by every queued task
        of the same shape and queues until a holder changes."""
        return self.hub.why_queued(self, cluster_queue, own, queues)

    async def pending_positions(self, queue: str) -> dict[str, Any] | None:
        """The positions of LocalQueue ``queue``'s pending Workloads by name (``kueue_ray.hook.QueuePosition``,
        shared, a few seconds old at most); None when the visibility API is not served, not allowed or
        failing."""
        return await self.hub.pending_positions(self, queue)

    def workloads_version(self) -> int:
        """How many Workload changes of this namespace the hub has seen; a queue position (in a LocalQueue,
        hence in this namespace) can only move when this moves, so an unchanged number needs no new read."""
        return self.hub.workload_changes(self)


class ServiceSubscription(Subscription):
    """One trigger's interest in one RayService (name + uid) and the Workloads that admit it.

    Every change of the RayService or of one of its Workloads is an ``Update`` that only says "look again";
    ``snapshot`` then reads the current pair from the cache, so the order in which the two watches deliver
    does not matter.
    """

    noun = "RayService"
    resource = RAYSERVICES
    kinds = (RAYSERVICE, WORKLOAD)

    async def current(  # type: ignore[override]
        self, *, reread_rayjob: bool = False, reread_workload: bool = False
    ) -> tuple[dict | None, list[dict]]:
        """(RayService, its Workloads) as known now; reads what the cache cannot answer (retrying), or
        with ``reread_rayjob`` / ``reread_workload`` the RayService / its Workloads anyway."""
        return await super().current(reread_rayjob=reread_rayjob, reread_workload=reread_workload)

    async def _read_current(  # type: ignore[override]
        self, reread_rayjob: bool, reread_workload: bool
    ) -> tuple[dict | None, list[dict]]:
        # The namespace's job Workloads (never "cached" alone): the Workload loop's list answers them.
        await self._settle_reads({RAYSERVICE: (reread_rayjob, False), WORKLOAD: (reread_workload, True)})
        return self.snapshot()

    def _what(self, kind: str) -> str:
        return JOB_WORKLOADS if kind == WORKLOAD else kind

    def _holds(self, kind: str) -> bool:
        return kind == RAYSERVICE and super()._holds(kind)

    def snapshot(self) -> tuple[dict | None, list[dict]]:
        """(RayService, its Workloads) from the cache alone."""
        from kueue_ray.workload import related_workload

        service = self.hub.cached(self, RAYSERVICE)
        if service is None:
            return None, []
        return service, [w for w in self.hub.service_workloads(self) if related_workload(service, w)]

    def cares_about(self, workload: dict) -> bool:
        """Whether a Workload change may concern this RayService: its own, or a RayCluster's named after it
        (KubeRay names a RayService's clusters ``<service>-<5 random>``)."""
        for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
            if ref.get("kind") == "RayService" and ref.get("uid") == self.uid:
                return True
            if ref.get("kind") == "RayCluster" and str(ref.get("name", "")).startswith(f"{self.name}-"):
                return True
        return False
