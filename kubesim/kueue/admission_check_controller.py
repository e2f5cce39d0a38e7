"""The admission checks applied each pass: Kueue's workload controller half, and kubesim's check controller.

Run by the Kueue controller (``kubesim.kueue.controller``) after eviction, over the Workloads of
ClusterQueues that have checks; the rules (and the annotations the simulated check controller reads) are in
``kubesim.kueue.admission_checks``. It writes through the ``Writer``, deactivates or evicts through
``Eviction`` and admits through the ``AdmissionCycle``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from kubesim.kueue.admission_checks import (
    ADMISSION_CHECK_KEY,
    MSG_ACTIVE,
    PENDING,
    PENDING_MESSAGE,
    REASON_ADMISSION_CHECK,
    REJECTED,
    RETRY,
    SIMULATED_CONTROLLER,
    checks_for,
    describe,
    in_state,
    is_active,
    ready_to_admit,
    set_state,
    simulated_decision,
    simulated_delay,
    states,
    strategy,
    sync_states,
)
from kubesim.kueue.conditions import condition_true, is_evicting, is_finished, set_condition
from kubesim.kueue.jobs import WORKLOAD_KEY
from kubesim.kueue.world import World
from kubesim.kueue.writer import Writer

if TYPE_CHECKING:
    from kubesim.kueue.admission_cycle import AdmissionCycle
    from kubesim.kueue.cache import ClusterView
    from kubesim.kueue.eviction import Eviction


@dataclass(eq=False)
class AdmissionChecks:
    """The admission-check half of Kueue's workload controller, plus kubesim's simulated check controller,
    run once per pass of the Kueue controller over the Workloads of ClusterQueues that have checks."""

    writer: Writer
    view: ClusterView
    eviction: Eviction
    admission: AdmissionCycle

    def reconcile(self, world: World) -> None:
        checked = {name: cq for name, cq in world.cluster_queues.items() if strategy(cq)}
        self._activate_simulated_checks(world)
        if not checked and not self._anyone_has_checks():
            return
        index = self.view.index
        for wl in list(index.queued.values()):
            lq = world.local_queue_of(wl)
            cq = checked.get(((lq or {}).get("spec") or {}).get("clusterQueue", ""))
            if cq is not None or states(wl):
                self._sync(wl, cq)
        for cq_name, held in list(index.holders.items()):
            for ident in list(held):
                wl = self.view.get(WORKLOAD_KEY, *ident)
                if wl is not None:
                    self._reconcile_holder(wl, world.cluster_queues.get(cq_name), world)

    def _anyone_has_checks(self) -> bool:
        index = self.view.index
        return any(states(wl) for held in index.holders.values() for wl in held.values())

    def _sync(self, wl: dict, cq: dict | None) -> dict | None:
        wanted = checks_for(wl, cq)
        if {check.get("name") for check in states(wl)} == wanted:
            return wl
        now = self.writer.clock.timestamp()
        return self.writer.mutate(WORKLOAD_KEY, wl, lambda obj: sync_states(obj, wanted, now), status=True)

    def _reconcile_holder(self, wl: dict, cq: dict | None, world: World) -> None:
        if is_finished(wl) or is_evicting(wl) or not (wl.get("spec") or {}).get("active", True):
            return
        wl = self._sync(wl, cq)
        if wl is None or not states(wl):
            return
        wl = self._decide_simulated(wl, world)
        if wl is None:
            return
        rejected = in_state(wl, REJECTED)
        if rejected:
            if not condition_true(wl, "DeactivationTarget"):
                message = describe(rejected, REJECTED)
                self.eviction.set_deactivation_target(wl, REASON_ADMISSION_CHECK, message)
                self.writer.event(
                    wl, "Warning", "AdmissionCheckRejected", f"Deactivated due to {message}", "kueue-workload"
                )
            return
        retry = in_state(wl, RETRY)
        if retry:
            self.eviction.evict(wl, REASON_ADMISSION_CHECK, f"Evicted due to {describe(retry, RETRY)}")
            return
        if not condition_true(wl, "Admitted") and ready_to_admit(wl, cq):
            self.admission.admit_after_checks(wl, world)

    def _decide_simulated(self, wl: dict, world: World) -> dict | None:
        """The simulated check controller: decide each of its Pending checks once it is due."""
        writer, clock = self.writer, self.writer.clock
        reserved = writer.reserved_moment(wl)
        now = clock.now()
        changes: list[tuple[str, str, str]] = []
        for state in states(wl):
            check = world.admission_checks.get(state.get("name", ""))
            if check is None or (check.get("spec") or {}).get("controllerName") != SIMULATED_CONTROLLER:
                continue
            if state.get("state") != PENDING:
                continue
            due = reserved + timedelta(seconds=clock.real_seconds(simulated_delay(check)))
            if now >= due:
                changes.append((state["name"], *simulated_decision(check, state)))
                continue
            writer.wake_after((due - now).total_seconds() * clock.time_scale)
            waiting = ((check.get("metadata") or {}).get("annotations") or {}).get(PENDING_MESSAGE)
            if waiting and state.get("message") != waiting:
                changes.append((state["name"], PENDING, waiting))
        if not changes:
            return wl
        stamp = clock.timestamp()

        def change(obj: dict) -> None:
            for name, state, message in changes:
                set_state(obj, name, state, message, stamp)

        return writer.mutate(WORKLOAD_KEY, wl, change, status=True)

    def _activate_simulated_checks(self, world: World) -> None:
        for check in world.admission_checks.values():
            if (check.get("spec") or {}).get("controllerName") != SIMULATED_CONTROLLER or is_active(check):
                continue
            now = self.writer.clock.timestamp()
            self.writer.mutate(
                ADMISSION_CHECK_KEY,
                check,
                lambda obj, now=now: set_condition(obj, "Active", "True", "Active", MSG_ACTIVE, now),
                status=True,
            )
