"""Kueue's controllers in kubesim: job integration, Workload lifecycle, scheduling loop, queue status.

Like the real Kueue manager, this is a client of the API server (here: the store). It reacts to watch
events (debounced) and a periodic tick, and each pass is level-triggered: it reads the objects it decides
over, then

1. reconciles each managed job whose object or Workload changed with that Workload (create it, finish
   it, start or stop the job, and release an evicted Workload's quota once the job stopped):
   ``job_sync.JobSync``,
2. evicts what must go among the Workloads that changed (deactivated Workloads, ClusterQueue/LocalQueue
   ``HoldAndDrain``): ``eviction.Eviction``; a configuration change makes steps 1 and 2 go over
   everything; then the admission checks (``admission_check_controller.AdmissionChecks``) and
   waitForPodsReady (``pods_ready.PodsReady``) decide and evict,
3. runs admission cycles of the pure scheduler (`kubesim.kueue.scheduler`) over a snapshot built from the
   objects, applying its decisions (admit, preempt, no fit) as Workload conditions and events:
   ``admission_cycle.AdmissionCycle``,
4. writes ClusterQueue and LocalQueue status (only when it changed): ``queue_status_writer``.

Each step is a plain object this class builds and calls in order, handed what it uses: the one ``Writer``
(every write re-reads the object first and mutates the fresh copy, so a pass never clobbers a concurrent
change by KubeRay or a user; the store is synchronous, so read+write is atomic on the event loop), the
``ClusterView`` it reads (``kubesim.kueue.cache``, the equivalent of Kueue's informer caches), and the
steps it acts through (``JobActions`` starts and stops jobs; the admission checks evict through
``Eviction``), as Kueue's Preemptor is given its client and recorder. This class keeps what the steps
share between passes (creation order, the parked set) and what changed since the last pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from kubesim.kueue import jobs, visibility
from kubesim.kueue.admission_check_controller import AdmissionChecks
from kubesim.kueue.admission_cycle import AdmissionCycle
from kubesim.kueue.cache import ClusterView
from kubesim.kueue.conditions import holds_quota
from kubesim.kueue.config import KueueConfig
from kubesim.kueue.equivalence import Parked
from kubesim.kueue.eviction import Eviction
from kubesim.kueue.job_actions import JobActions
from kubesim.kueue.job_sync import JobSync
from kubesim.kueue.jobs import JOB_KINDS, WORKLOAD_KEY
from kubesim.kueue.pods_ready import PodsReady
from kubesim.kueue.queue_status_writer import QueueStatusWriter
from kubesim.kueue.webhook import make_admission_hook
from kubesim.kueue.world import CONFIG_KEYS, NAMESPACE_KEY, WATCHED_KEYS, WPC_KEY, World, int_or_zero
from kubesim.kueue.writer import Writer

# Real seconds: how long to let a burst of watch events settle, and the resync period.
DEBOUNCE_SECONDS = 0.01
FULL_PASS_SECONDS = 10.0
TICK_SECONDS = 1.0


class KueueController:
    """Runs the loop, builds the steps, and holds what Kueue keeps in memory between passes: the parked
    (inadmissible) set, creation order, configuration versions, what changed since the last pass."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.clock = cluster.clock
        self.wake = asyncio.Event()
        self.parked = Parked()
        self.seq: dict[str, int] = {}
        # Workloads last seen holding quota: one that stops (finished, or its admission removed) by
        # whichever writer, e.g. MultiKueue finishing a manager's Workload as its worker's copy finished.
        self.holding: set[str] = set()
        self.config_versions: dict[tuple[str, str], object] = {}
        self.config: KueueConfig = getattr(cluster, "kueue_config", None) or KueueConfig()
        # The informer cache: opened when the loop starts (the steps are handed it now).
        self.view = ClusterView(self.store, WATCHED_KEYS, self._changed)
        # What changed since a phase last looked: jobs as (key, namespace, name), Workloads as (namespace,
        # name). A pass reconciles only those, unless the configuration changed (``_full``): then every
        # decision may differ, so it goes over everything, as Kueue requeues all on a queue change.
        self._dirty_jobs: set[tuple[str, str, str]] = set()
        self._dirty_workloads: set[tuple[str, str]] = set()
        # WorkloadPriorityClasses created or changed: their value is to reach the Workloads naming them.
        self._dirty_priority_classes: set[str] = set()
        self._full = True
        self._last_full = 0.0
        # The steps of a pass, each handed what it uses.
        writer = self.writer = Writer(self.store, self.clock, self.wake)
        actions = JobActions(writer)
        self.job_sync = JobSync(
            writer,
            self.view,
            actions,
            seq=self.seq,
            parked=self.parked,
            frameworks=self.config.frameworks,
            namespace_selector=self.config.managed_jobs_namespace_selector,
        )
        self.eviction = Eviction(writer, self.view, actions)
        self.admission = AdmissionCycle(
            writer, self.view, actions, self.eviction, seq=self.seq, parked=self.parked
        )
        self.checks = AdmissionChecks(writer, self.view, self.eviction, self.admission)
        self.pods_ready = PodsReady(writer, self.view, self.eviction, self.config)
        self.queue_status = QueueStatusWriter(writer, self.view)

    # -------------------------------------------------------------------------------- loop

    def install(self) -> None:
        """What must exist before any object is accepted: the admission webhooks, the visibility API."""
        self.store.add_admission_hook(
            make_admission_hook(
                self.store, self.config.frameworks, self.config.managed_jobs_namespace_selector
            )
        )
        handler = visibility.make_handler(self.current_world, self.seq)
        self.cluster.register_api(visibility.GROUP, visibility.VERSION, visibility.RESOURCES, handler)

    def current_world(self) -> World:
        """The current objects: from the view while the controller runs (as Kueue's visibility server
        answers from its in-memory queues), else a fresh read of the store."""
        if self.view.is_open:
            return self.view.world()
        return World.read(self.store)

    async def run(self) -> None:
        self.view.open()
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
            self.admission.forget(meta.get("uid", ""))
            self.holding.discard(meta.get("uid", ""))
        elif key == WORKLOAD_KEY:
            # workload_controller.go Update: a Workload that finished or went back to pending frees its
            # quota, and the inadmissible Workloads of its queues are requeued
            # (QueueAssociatedInadmissibleWorkloadsAfter), whoever wrote the change.
            uid = meta.get("uid", "")
            if holds_quota(obj):
                self.holding.add(uid)
            elif uid in self.holding:
                self.holding.discard(uid)
                self.parked.clear()
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
        dirty_classes, self._dirty_priority_classes = self._dirty_priority_classes, set()
        self.job_sync.sync_priority_classes(self._world(), dirty_classes)
        dirty_jobs, self._dirty_jobs = self._dirty_jobs, set()
        self.job_sync.reconcile(self._world(), dirty_jobs, full)
        dirty_workloads, self._dirty_workloads = self._dirty_workloads, set()
        self.eviction.reconcile(self._world(), dirty_workloads, full)
        self.checks.reconcile(self._world())
        self.pods_ready.reconcile(full)
        self.admission.schedule_pass(self._world())
        self.queue_status.write(self._world())
