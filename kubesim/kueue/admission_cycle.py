"""Admission cycles: a snapshot in, the pure scheduler's decisions out, applied as Workload writes.

Step 3 of a Kueue controller pass (``kubesim.kueue.controller``). ``kubesim.kueue.scheduler`` decides, this
module only applies: it writes through the ``Writer``, evicts preemption victims through ``Eviction`` and
starts an admitted Workload's job through ``JobActions``. It keeps the model and snapshot caches.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kubesim.kueue import admission_checks, model, scheduler
from kubesim.kueue.conditions import (
    ADMISSION_COMPONENT,
    MSG_ADMITTED,
    MSG_PODS_NOT_READY,
    admission_of,
    backing_off,
    condition_true,
    find_condition,
    is_evicting,
    set_condition,
    timestamp_seconds,
)
from kubesim.kueue.convert import (
    admission_dict,
    model_cluster_queue,
    model_cohort,
    model_flavor,
    model_workload,
    resource_requests,
)
from kubesim.kueue.equivalence import scheduling_shape
from kubesim.kueue.eviction import Eviction
from kubesim.kueue.job_actions import JobActions
from kubesim.kueue.jobs import WORKLOAD_KEY
from kubesim.kueue.pending_queues import WAITING, Examined, PendingQueues
from kubesim.kueue.queue_status import queue_blocker
from kubesim.kueue.world import World, int_or_zero
from kubesim.kueue.writer import Writer

if TYPE_CHECKING:
    from kubesim.kueue.cache import ClusterView
    from kubesim.kueue.equivalence import Parked

# Admission cycles per pass; each admits or parks at least one workload, so this only bounds a pass.
MAX_CYCLES_PER_PASS = 50


@dataclass(eq=False)
class AdmissionCycle:
    """Step 3 of a pass: run the scheduler and apply what it decided.

    ``seq`` (uid -> creation order) and ``parked`` are the controller's, shared with the job sync.
    """

    writer: Writer
    view: ClusterView
    actions: JobActions
    eviction: Eviction
    seq: dict[str, int]
    parked: Parked
    # uid -> (what the model was built from, model.Workload): building one parses every quantity.
    _models: dict[str, tuple[tuple, model.Workload]] = field(default_factory=dict, init=False)
    _shapes: dict[str, tuple[str | None, str]] = field(default_factory=dict, init=False)
    """uid -> (resourceVersion, scheduling shape)."""
    # The admitted part of the scheduler's snapshot, and what it was built from.
    _snapshot_cache: tuple[World, tuple[int, int], model.Snapshot] | None = field(default=None, init=False)
    _reservations: int = field(default=0, init=False)
    pending: PendingQueues = field(default_factory=PendingQueues, init=False)
    """Each ClusterQueue's candidates, kept between passes."""

    def forget(self, uid: str) -> None:
        """A Workload was deleted: drop what is cached about it."""
        self._models.pop(uid, None)
        self._shapes.pop(uid, None)

    def _snapshot(self, world: World) -> model.Snapshot:
        """The scheduler's input, rebuilt only when the configuration or a quota holder changed (the
        scheduler never mutates it); admitted workloads in list order, as a fresh read would give."""
        index = self.view.index
        inputs = (index.holders_version, self._reservations)
        cached = self._snapshot_cache
        if cached is not None and cached[0] is world and cached[1] == inputs:
            return cached[2]
        snapshot = model.Snapshot(
            flavors={name: model_flavor(obj) for name, obj in world.flavors.items()},
            cluster_queues={
                name: model_cluster_queue(obj, world.flavors) for name, obj in world.cluster_queues.items()
            },
            cohorts={name: model_cohort(obj) for name, obj in world.cohorts.items()},
            namespace_labels=dict(world.namespace_labels),
        )
        holders = sorted((ident, cq, wl) for cq, held in index.holders.items() for ident, wl in held.items())
        for _, cq, wl in holders:
            snapshot.admitted.setdefault(cq, []).append(self._model(wl, cq))
        self._snapshot_cache = (world, inputs, snapshot)
        return snapshot

    def _model(self, wl: dict, cluster_queue: str, *, inadmissible: bool = False) -> model.Workload:
        """``model_workload`` of ``wl``, rebuilt only when the object or what else it depends on changed."""
        uid = wl["metadata"]["uid"]
        inputs = (
            wl["metadata"].get("resourceVersion"),
            cluster_queue,
            self._seq(wl),
            self.writer.reserved_at.get(uid),
        )
        cached = self._models.get(uid)
        if cached is None or cached[0] != inputs:
            built = model_workload(wl, cluster_queue, seq=inputs[2], reserved_at=inputs[3])
            cached = self._models[uid] = (inputs, built)
        return replace(cached[1], inadmissible=True) if inadmissible else cached[1]

    def _shape(self, wl: dict) -> str:
        """``scheduling_shape`` of ``wl``, recomputed only when the Workload changed."""
        uid, version = wl["metadata"]["uid"], wl["metadata"].get("resourceVersion")
        cached = self._shapes.get(uid)
        if cached is None or cached[0] != version:
            cached = self._shapes[uid] = (version, scheduling_shape(wl))
        return cached[1]

    def _seq(self, wl: dict) -> int:
        return self.seq.get(wl["metadata"]["uid"], int_or_zero(wl["metadata"].get("resourceVersion")))

    def schedule_pass(self, world: World) -> None:
        """Admission cycles until one makes no progress (nothing admitted or parked), at most
        ``MAX_CYCLES_PER_PASS``.

        The queues are kept sorted between passes (``PendingQueues``, as upstream's queue manager keeps
        them as heaps) and brought up to date at the start of each: within a pass only this controller
        writes, and what its cycles change in the queues is known (admitted workloads leave, parked heads
        are skipped), so a cycle hands the pure scheduler only each queue's head and costs O(queues), not
        O(pending). ``schedule_cycle`` picks each queue's first non-parked workload in queue order, so its
        decisions are the same as over whole queues. ``world`` is the configuration (queues, flavors, ...)
        as the pass read it.
        """
        admitted: set[str] = set()
        clears = self.parked.clears
        self._refresh(world)
        for _ in range(MAX_CYCLES_PER_PASS):
            if self.parked.clears != clears:  # a write of this pass requeued the parked workloads
                clears = self.parked.clears
                self._refresh(world)
            heads = {}
            for name, queue in self.pending.queues.items():
                head = next((w for _, w in queue if w.uid not in admitted and w.uid not in self.parked), None)
                if head is not None:
                    heads[name] = [head]
            if not heads or not self._schedule_cycle(
                world, heads, self.pending.where, admitted, self.pending.shapes
            ):
                return

    def _refresh(self, world: World) -> None:
        """``PendingQueues.refresh`` with what changed in the index since; a Workload of a blocked
        LocalQueue is said to be inadmissible instead of queued."""
        now = self.writer.clock.timestamp()
        clock_now = self.writer.clock.now()
        # What blocks a LocalQueue follows from it and the world alone: judged once per queue and pass, not
        # once per pending workload (10,000 pending workloads made it most of a pass).
        blockers: dict[tuple[str, str], tuple[str | None, str | None]] = {}

        def examine(wl: dict) -> Examined:
            if backing_off(wl, clock_now):
                return WAITING  # requeued only once its backoff (requeueState.requeueAt) is over
            local_queue = (wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", ""))
            if local_queue not in blockers:
                blockers[local_queue] = queue_blocker(wl, world)
            cq_name, blocked = blockers[local_queue]
            if blocked or cq_name is None:
                self._set_pending(wl, "Inadmissible", blocked or "", now)
                return None
            return cq_name, (cq_name, self._shape(wl)), self._model(wl, cq_name)

        index = self.view.index
        self.pending.refresh(
            self.view.config_generation, self.parked, index.queued, index.take_queued_changes(), examine
        )

    def _schedule_cycle(
        self,
        world: World,
        heads: dict[str, list[model.Workload]],
        where: dict[str, tuple[str, str]],
        admitted: set[str],
        shapes: dict[str, tuple[str, str]],
    ) -> bool:
        """One admission cycle; True when it admitted or parked something (worth another cycle)."""
        now = self.writer.clock.timestamp()
        progressed = False
        for decision in scheduler.schedule_cycle(self._snapshot(world), heads):
            uid = decision.workload.uid
            wl = self._current(where.get(uid))
            if wl is None:
                continue
            if isinstance(decision, model.Admit):
                self._admit(wl, decision.admission, world)
                admitted.add(uid)
                progressed = True
            elif isinstance(decision, model.Preempt):
                self._preempt(wl, decision, now)
            else:
                self._set_pending(wl, decision.reason, decision.message, now)
                if decision.inadmissible and uid not in self.parked:
                    self.parked.add(uid)
                    progressed = True
                if decision.inadmissible and decision.no_fit and uid in shapes:
                    self.parked.shapes.add(shapes[uid])
                    self.parked.update(other for other, shape in shapes.items() if shape == shapes[uid])
        return progressed

    def _current(self, ident: tuple[str, str] | None) -> dict | None:
        """The Workload as it is now (an earlier decision of the pass may have written it)."""
        if ident is None:
            return None
        return self.view.get(WORKLOAD_KEY, *ident)

    def _set_pending(self, wl: dict, reason: str, message: str, now: str) -> None:
        before = find_condition(wl, "QuotaReserved") or {}

        def change(obj: dict) -> None:
            set_condition(obj, "QuotaReserved", "False", reason, message, now)
            obj["status"]["resourceRequests"] = resource_requests(obj)

        self.writer.mutate(WORKLOAD_KEY, wl, change, status=True)
        if (before.get("reason"), before.get("message")) != (reason, message):
            self.writer.event(wl, "Warning", "Pending", message, ADMISSION_COMPONENT)

    def _admit(self, wl: dict, admission: model.Admission, world: World) -> None:
        now = self.writer.clock.timestamp()
        cq = admission.cluster_queue

        def change(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status["admission"] = admission_dict(admission)
            status.pop("resourceRequests", None)
            set_condition(
                obj, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", now
            )
            # With admission checks, reserving quota is only the first step: Admitted waits for them.
            if admission_checks.ready_to_admit(obj, world.cluster_queues.get(cq)):
                set_condition(obj, "Admitted", "True", "Admitted", MSG_ADMITTED, now)
                set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)
            for type_ in ("Evicted", "Preempted"):
                previous = find_condition(obj, type_)
                if previous and previous.get("status") == "True":
                    set_condition(
                        obj,
                        type_,
                        "False",
                        "QuotaReserved",
                        f"Previously: {previous.get('message', '')}",
                        now,
                    )

        admitted = self.writer.mutate(WORKLOAD_KEY, wl, change, status=True)
        if admitted is None:
            return
        self.writer.note_reserved(admitted)
        self._reservations += 1
        waited = max(
            0,
            int(
                self.writer.clock.now().timestamp()
                - timestamp_seconds(wl["metadata"].get("creationTimestamp"))
            ),
        )
        self.writer.event(
            admitted,
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}, wait time since queued was {waited}s",
            ADMISSION_COMPONENT,
        )
        self.parked.discard(wl["metadata"]["uid"])
        if condition_true(admitted, "Admitted"):
            self._on_admitted(admitted, world, waited_for_checks=0)

    def admit_after_checks(self, wl: dict, world: World) -> None:
        """Every admission check of a Workload holding quota is Ready: admit it and start its job."""
        now = self.writer.clock.timestamp()

        def change(obj: dict) -> None:
            set_condition(obj, "Admitted", "True", "Admitted", MSG_ADMITTED, now)
            set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)

        admitted = self.writer.mutate(WORKLOAD_KEY, wl, change, status=True)
        if admitted is not None:
            waited = self.writer.clock.now() - self.writer.reserved_moment(admitted)
            self._on_admitted(admitted, world, waited_for_checks=max(0, int(waited.total_seconds())))

    def _on_admitted(self, admitted: dict, world: World, *, waited_for_checks: int) -> None:
        """The Admitted event, and the job started (unsuspended with the admission's pod set infos)."""
        self.writer.note_admitted(admitted)
        cq = admission_of(admitted)["clusterQueue"]
        self.writer.event(
            admitted,
            "Normal",
            "Admitted",
            f"Admitted by ClusterQueue {cq}, wait time since reservation was {waited_for_checks}s",
            ADMISSION_COMPONENT,
        )
        self.actions.start_owner(admitted, world)

    def _preempt(self, wl: dict, decision: model.Preempt, now: str) -> None:
        by_uid = self.view.index.by_uid
        for victim in decision.victims:
            target = by_uid.get(victim.workload.uid)
            if target is None or victim.workload.evicted or is_evicting(target):
                continue
            self.eviction.evict(target, "Preempted", victim.message, preempted_reason=victim.reason)
            self.writer.event(
                wl,
                "Normal",
                "PreemptedWorkload",
                f"Preempted workload {victim.workload.key}",
                ADMISSION_COMPONENT,
            )
        self._set_pending(wl, "Pending", decision.pending_message, now)
