"""Kueue's controllers in kubesim: job integration, Workload lifecycle, scheduling loop, queue status.

Like the real Kueue manager, this is a client of the API server (here: the store). It reacts to watch
events (debounced) and a periodic tick, and each pass is level-triggered: it reads the objects it decides
over, then

1. reconciles each managed Ray job whose object or Workload changed with that Workload (create it, finish
   it, start or stop the job, and release an evicted Workload's quota once KubeRay finished suspending
   the job),
2. evicts what must go among the Workloads that changed (deactivated Workloads, ClusterQueue/LocalQueue
   ``HoldAndDrain``); a configuration change makes steps 1 and 2 go over everything,
3. runs admission cycles of the pure scheduler (`kubesim.kueue.scheduler`) over a snapshot built from the
   objects, applying its decisions (admit, preempt, no fit) as Workload conditions and events,
4. writes ClusterQueue and LocalQueue status (only when it changed).

Every write re-reads the object first and mutates the fresh copy, so a pass never clobbers a concurrent
change by KubeRay or a user (the store is synchronous, so read+write is atomic on the event loop).

What a pass reads comes from a `ClusterView` (``kubesim.kueue.cache``), the equivalent of Kueue's
informer caches. Steps 1 to 3 are the mixins ``job_sync.JobSync``, ``eviction.Eviction`` and
``admission_cycle.AdmissionCycle``; this class holds the state they share and runs the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime

from kubesim.clock import parse_time
from kubesim.errors import ApiError
from kubesim.events import record_event
from kubesim.jsoncopy import fast_copy
from kubesim.kueue import admission_checks, jobs, model, pods_ready, visibility
from kubesim.kueue.admission_cycle import AdmissionCycle
from kubesim.kueue.cache import (
    CONFIG_KEYS,
    CQ_KEY,
    LQ_KEY,
    NAMESPACE_KEY,
    WATCHED_KEYS,
    WPC_KEY,
    ClusterView,
    World,
    int_or_zero,
)
from kubesim.kueue.conditions import find_condition, set_condition
from kubesim.kueue.config import KueueConfig
from kubesim.kueue.equivalence import Parked
from kubesim.kueue.eviction import Eviction
from kubesim.kueue.job_sync import JobSync
from kubesim.kueue.jobs import JOB_KINDS, WORKLOAD_KEY
from kubesim.kueue.queue_status import (
    cluster_queue_active,
    cluster_queue_status,
    local_queue_active,
    local_queue_status,
)
from kubesim.kueue.webhook import make_admission_hook

# Real seconds: how long to let a burst of watch events settle, and the resync period.
DEBOUNCE_SECONDS = 0.01
FULL_PASS_SECONDS = 10.0
TICK_SECONDS = 1.0


class KueueController(JobSync, Eviction, AdmissionCycle):
    """Holds what Kueue keeps in memory between passes: the parked (inadmissible) set, creation order."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.clock = cluster.clock
        self.wake = asyncio.Event()
        self.parked = Parked()
        self.seq: dict[str, int] = {}
        self.config_versions: dict[tuple[str, str], object] = {}
        self.warned: set[tuple[str, str]] = set()
        # Precise quota-reservation times: conditions only keep seconds, but preemption prefers the most
        # recently admitted candidate, so two admissions within one second must stay ordered.
        self.reserved_at: dict[str, float] = {}
        # uid -> (what the model was built from, model.Workload): building one parses every quantity.
        self._models: dict[str, tuple[tuple, model.Workload]] = {}
        self._shapes: dict[str, tuple[str | None, str]] = {}  # uid -> (resourceVersion, scheduling shape)
        self.view: ClusterView | None = None
        # What changed since a phase last looked: jobs as (key, namespace, name), Workloads as (namespace,
        # name). A pass reconciles only those, unless the configuration changed (``_full``): then every
        # decision may differ, so it goes over everything, as Kueue requeues all on a queue change.
        self._dirty_jobs: set[tuple[str, str, str]] = set()
        self._dirty_workloads: set[tuple[str, str]] = set()
        # WorkloadPriorityClasses created or changed: their value is to reach the Workloads naming them.
        self._dirty_priority_classes: set[str] = set()
        self._full = True
        self._last_full = 0.0
        # The admitted part of the scheduler's snapshot, and what it was built from.
        self._snapshot_cache: tuple[World, tuple[int, int], model.Snapshot] | None = None
        self._reservations = 0
        self.config: KueueConfig = getattr(cluster, "kueue_config", None) or KueueConfig()
        # Precise admission times (the Admitted condition keeps whole seconds), for waitForPodsReady.
        self.admitted_at: dict[str, datetime] = {}
        self.checks = admission_checks.AdmissionChecks(self)
        self.pods_ready = pods_ready.PodsReady(self, self.config)
        self._wake_handles: dict[int, asyncio.TimerHandle] = {}

    # -------------------------------------------------------------------------------- loop

    def install(self) -> None:
        """What must exist before any object is accepted: the admission webhooks, the visibility API."""
        self.store.add_admission_hook(make_admission_hook(self.store, self.config.frameworks))
        handler = visibility.make_handler(self.current_world, self.seq)
        self.cluster.register_api(visibility.GROUP, visibility.VERSION, visibility.RESOURCES, handler)

    def current_world(self) -> World:
        """The current objects: from the view while the controller runs (as Kueue's visibility server
        answers from its in-memory queues), else a fresh read of the store."""
        if self.view is not None:
            return self.view.world()
        return World.read(self.store)

    async def run(self) -> None:
        self.view = ClusterView(self.store, WATCHED_KEYS, self._changed)
        try:
            while True:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that
                # arrives as the wake-up does, and the loop then outlives Cluster.stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TICK_SECONDS):
                        await self.wake.wait()
                await asyncio.sleep(DEBOUNCE_SECONDS)
                self.wake.clear()
                self.reconcile()
        finally:
            self.view.close()
            self.view = None

    def _changed(self, key: str, type_: str, obj: dict) -> None:
        self.observe(key, type_, obj)
        self._mark_dirty(key, obj)
        self.wake.set()

    def _mark_dirty(self, key: str, obj: dict) -> None:
        """A job is reconciled again when it or its Workload changed; a Workload when it changed."""
        meta = obj["metadata"]
        namespace = meta.get("namespace", "")
        if key in JOB_KINDS:
            self._dirty_jobs.add((key, namespace, meta["name"]))
        elif key == WORKLOAD_KEY:
            self._dirty_workloads.add((namespace, meta["name"]))
            for ref in meta.get("ownerReferences") or []:
                kind = jobs.JOB_KINDS_BY_KIND.get(ref.get("kind"))
                if kind is not None and ref.get("controller"):
                    self._dirty_jobs.add((kind.key, namespace, ref["name"]))

    def _world(self) -> World:
        """The configuration a decision reads (queues, flavors, priority classes, namespace labels)."""
        return self.view.config()

    def observe(self, key: str, type_: str, obj: dict) -> None:
        """Note creation order, and retry parked workloads after the cluster changed (BestEffortFIFO)."""
        meta = obj.get("metadata") or {}
        if type_ == "ADDED" and key in (WORKLOAD_KEY, *JOB_KINDS):
            self.seq.setdefault(meta.get("uid", ""), int_or_zero(meta.get("resourceVersion")))
        if key == WORKLOAD_KEY and type_ == "DELETED":
            self.parked.clear()
            self._models.pop(meta.get("uid", ""), None)
            self._shapes.pop(meta.get("uid", ""), None)
        if key in CONFIG_KEYS:
            ident = (key, f"{meta.get('namespace', '')}/{meta.get('name', '')}")
            version = (
                (meta.get("labels") or {}) if key == NAMESPACE_KEY else (obj.get("spec"), obj.get("value"))
            )
            if type_ == "DELETED" or self.config_versions.get(ident) != version:
                self.parked.clear()
                self._full = True
                if key == WPC_KEY and type_ != "DELETED":
                    self._dirty_priority_classes.add(meta.get("name", ""))
            if type_ == "DELETED":
                self.config_versions.pop(ident, None)
            else:
                self.config_versions[ident] = version

    def reconcile(self) -> None:
        """One level-triggered pass over what changed since the last (see the module docstring).

        Each phase takes the changes marked until it starts, so it also sees what an earlier phase of the
        same pass wrote; what a phase writes is marked for the next pass, which its writes wake.
        """
        full, self._full = self._full, False
        # Safety net: every FULL_PASS_SECONDS a pass goes over everything anyway, so that a change the
        # dirty marks missed (or a decision that only time changes) waits seconds, never forever.
        now = time.monotonic()
        if now - self._last_full >= FULL_PASS_SECONDS:
            full = True
        if full:
            self._last_full = now
        self._sync_priority_classes(self._world())
        self._reconcile_jobs(self._world(), full)
        self._reconcile_evictions(self._world(), full)
        self.checks.reconcile(self._world())
        self.pods_ready.reconcile(full)
        self._schedule_pass()
        self._write_queue_statuses(self._world())

    # -------------------------------------------------------------------------------- writes

    def _mutate(self, key: str, obj: dict, change: Callable[[dict], None], *, status: bool) -> dict | None:
        """Re-read ``obj``, apply ``change`` to the fresh copy, write it if it changed."""
        meta = obj["metadata"]
        try:
            fresh = self.store.get(key, meta["name"], namespace=meta.get("namespace"))
        except ApiError:
            return None
        updated = fast_copy(fresh)
        change(updated)
        if updated == fresh:
            return fresh
        try:
            return self.store.update(key, updated, subresource="status" if status else None)
        except ApiError as err:
            if err.code in (404, 409):
                self.wake.set()
                return None
            raise

    def _event(self, obj: dict, type_: str, reason: str, message: str, component: str) -> None:
        record_event(self.store, obj, type_, reason, message, component)

    def wake_after(self, simulated_seconds: float) -> None:
        """Run a pass once ``simulated_seconds`` have passed (a timeout or a backoff falls due then, with
        no object changing to wake the controller). One timer per real second is enough."""
        delay = max(0.0, self.clock.real_seconds(simulated_seconds)) + 0.01
        loop = asyncio.get_running_loop()
        slot = int(loop.time() + delay)
        if slot not in self._wake_handles:
            self._wake_handles[slot] = loop.call_later(delay, self._wake_from_timer, slot)

    def _wake_from_timer(self, slot: int) -> None:
        self._wake_handles.pop(slot, None)
        self.wake.set()

    def reserved_moment(self, wl: dict) -> datetime:
        """When the current quota reservation was made, as precisely as known."""
        at = self.reserved_at.get(wl["metadata"]["uid"])
        if at is not None:
            return datetime.fromtimestamp(at, UTC)
        condition = find_condition(wl, "QuotaReserved") or {}
        return (
            parse_time(condition["lastTransitionTime"])
            if condition.get("lastTransitionTime")
            else self.clock.now()
        )

    def admitted_moment(self, wl: dict) -> datetime:
        """When the Workload was last admitted (``Admitted=True``), as precisely as known."""
        condition = find_condition(wl, "Admitted") or {}
        at = self.admitted_at.get(wl["metadata"]["uid"])
        stamp = condition.get("lastTransitionTime")
        if at is not None and (not stamp or abs((at - parse_time(stamp)).total_seconds()) < 2):
            return at
        return parse_time(stamp) if stamp else self.clock.now()

    def _write_queue_statuses(self, world: World) -> None:
        """Every queue's status from the index's running sums: O(queues), whatever the Workload count."""
        now = self.clock.timestamp()
        index = self.view.index
        cq_pending: dict[str, int] = {}
        for key, lq in world.local_queues.items():
            cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
            cq_pending[cq_name] = cq_pending.get(cq_name, 0) + index.queued_count.get(key, 0)
        for name, cq in world.cluster_queues.items():
            active, reason, message = cluster_queue_active(cq, world.flavors, world.admission_checks)
            status = cluster_queue_status(cq, index.cluster_queue_tally.get(name), cq_pending.get(name, 0))

            def change(obj: dict, status=status, active=active, reason=reason, message=message) -> None:
                obj["status"] = copy.deepcopy(status)
                set_condition(obj, "Active", "True" if active else "False", reason, message, now)

            self._mutate(CQ_KEY, cq, change, status=True)
        for key, lq in world.local_queues.items():
            state = local_queue_active(lq, world)
            cq = world.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue", ""))
            status = local_queue_status(
                lq, cq, index.local_queue_tally.get(key), index.queued_count.get(key, 0)
            )

            def change(obj: dict, status=status, state=state) -> None:
                obj["status"] = copy.deepcopy(status)
                set_condition(obj, "Active", *state, now)

            self._mutate(LQ_KEY, lq, change, status=True)
