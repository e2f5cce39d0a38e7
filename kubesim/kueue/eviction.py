"""Eviction: deactivated Workloads, stopped queues, and the evictions other parts ask for.

Step 2 of a Kueue controller pass (``kubesim.kueue.controller``): Kueue's workload controller deactivates a
Workload whose ``spec.active`` went false and drains a ``HoldAndDrain`` queue. The admission cycle
(preemption), the admission checks and waitForPodsReady evict through ``Eviction.evict`` too. Once the job
stopped, the job reconcile (``job_sync``) releases the quota.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubesim.kueue import admission_checks
from kubesim.kueue.conditions import (
    ADMISSION_COMPONENT,
    BACKOFF_REQUEUE_REASONS,
    MSG_BACKOFF_FINISHED,
    MSG_CQ_STOPPED,
    MSG_DEACTIVATED,
    MSG_LQ_STOPPED,
    admission_of,
    condition_true,
    find_condition,
    holds_quota,
    is_evicting,
    is_finished,
    requeue_at,
    set_condition,
)
from kubesim.kueue.job_actions import JobActions
from kubesim.kueue.jobs import WORKLOAD_KEY
from kubesim.kueue.queue_status import stop_policy
from kubesim.kueue.world import World
from kubesim.kueue.writer import Writer

if TYPE_CHECKING:
    from kubesim.kueue.cache import ClusterView


@dataclass(eq=False)
class Eviction:
    """Step 2 of a pass: evict what must go among the Workloads that changed."""

    writer: Writer
    view: ClusterView
    actions: JobActions

    def set_deactivation_target(self, wl: dict, reason: str, message: str) -> None:
        """``SetDeactivationTarget``: the workload controller then deactivates and evicts it."""
        self.writer.mutate(
            WORKLOAD_KEY,
            wl,
            lambda obj: set_condition(
                obj, "DeactivationTarget", "True", reason, message, self.writer.clock.timestamp()
            ),
            status=True,
        )

    # -------------------------------------------------------------------------------- evictions

    def evict(
        self,
        wl: dict,
        reason: str,
        message: str,
        *,
        preempted_reason: str | None = None,
        underlying_cause: str = "",
        prepare: Callable[[dict], None] | None = None,
    ) -> None:
        """Set Evicted (and Preempted) and count it; the job reconcile then stops the job and, once it is
        inactive, releases the quota (and writes ``Requeued``). ``prepare`` edits the Workload first (Kueue's ``WithCustomPrepare``,
        e.g. the requeue state of a PodsReady timeout); every admission check goes back to Pending.

        ``status.schedulingStats.evictions`` counts evictions per (reason, underlyingCause). Kueue gives an
        underlying cause only where the reason alone is too coarse (a PodsReady timeout: ``WaitForStart``
        or ``WaitForRecovery``; a deactivation: its DeactivationTarget reason); a preemption's cause is
        empty, its kind (InClusterQueue, ...) is only in the ``Preempted`` condition.
        """
        now = self.writer.clock.timestamp()
        # A deactivation names its cause in the condition (DeactivatedDueToAdmissionCheck); the
        # eviction stats keep reason and cause apart.
        condition_reason = reason
        if reason == "Deactivated" and underlying_cause:
            condition_reason = f"DeactivatedDueTo{underlying_cause}"

        def change(obj: dict) -> None:
            if prepare is not None:
                prepare(obj)
            admission_checks.reset_on_eviction(obj, now)
            # resetClusterNomination: a MultiKueue Workload is dispatched afresh after any eviction.
            obj["status"].pop("clusterName", None)
            obj["status"].pop("nominatedClusterNames", None)
            set_condition(obj, "Evicted", "True", condition_reason, message, now)
            if preempted_reason:
                set_condition(obj, "Preempted", "True", preempted_reason, message, now)
            # No Requeued here: Kueue writes it when the job stopped and the quota is released.
            stats = obj["status"].setdefault("schedulingStats", {}).setdefault("evictions", [])
            for entry in stats:
                if entry.get("reason") == reason and entry.get("underlyingCause", "") == underlying_cause:
                    entry["count"] = int(entry.get("count", 0)) + 1
                    break
            else:
                stats.append({"reason": reason, "underlyingCause": underlying_cause, "count": 1})

        if self.writer.mutate(WORKLOAD_KEY, wl, change, status=True) is None:
            return
        self.writer.event(wl, "Normal", f"EvictedDueTo{condition_reason}", message, ADMISSION_COMPONENT)
        if preempted_reason:
            self.writer.event(wl, "Normal", "Preempted", message, ADMISSION_COMPONENT)
        self.actions.stop_owner(wl, message)

    def deactivate(self, wl: dict) -> None:
        """Evict an inactive Workload: ``Deactivated``, or ``DeactivatedDueTo<cause>`` with the message of
        the ``DeactivationTarget`` that asked for it (which goes), and no requeue state."""
        target = find_condition(wl, "DeactivationTarget") or {}
        cause, message = "", MSG_DEACTIVATED
        if target.get("status") == "True":
            cause = target.get("reason", "")
            message = f"{MSG_DEACTIVATED} due to {target.get('message', '')}"

        def prepare(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status["conditions"] = [
                c for c in status.get("conditions") or [] if c["type"] != "DeactivationTarget"
            ]
            status.pop("requeueState", None)

        self.evict(wl, "Deactivated", message, underlying_cause=cause, prepare=prepare)

    def reconcile(self, world: World, dirty: set[tuple[str, str]], full: bool) -> None:
        """Deactivation and ``HoldAndDrain`` evict admitted workloads; restarts mark them requeued. Over the
        Workloads in ``dirty`` (namespace, name), or every Workload on a ``full`` pass."""
        now = self.writer.clock.timestamp()
        if full:
            workloads = self.view.items(WORKLOAD_KEY)
        else:
            found = (self.view.get(WORKLOAD_KEY, *ident) for ident in sorted(dirty))
            workloads = [wl for wl in found if wl is not None]
        for wl in workloads:
            if is_finished(wl):
                continue
            if condition_true(wl, "DeactivationTarget") and (wl.get("spec") or {}).get("active", True):
                # A rejected admission check or an exhausted requeuing limit: Kueue deactivates it.
                self.writer.mutate(
                    WORKLOAD_KEY, wl, lambda obj: obj["spec"].update(active=False), status=False
                )
                continue
            lq = world.local_queue_of(wl)
            if holds_quota(wl) and not is_evicting(wl):
                cq = world.cluster_queues.get(admission_of(wl)["clusterQueue"])
                if not (wl.get("spec") or {}).get("active", True):
                    self.deactivate(wl)
                elif cq is not None and stop_policy(cq) == "HoldAndDrain":
                    self.evict(wl, "ClusterQueueStopped", MSG_CQ_STOPPED)
                elif lq is not None and stop_policy(lq) == "HoldAndDrain":
                    self.evict(wl, "LocalQueueStopped", MSG_LQ_STOPPED)
                continue
            requeued = find_condition(wl, "Requeued") or {}
            if admission_of(wl) is None and requeued.get("status") == "False":
                restart = self._restart_reason(requeued.get("reason"), wl, lq, world)
                if restart:
                    reason, message = restart
                    self.writer.mutate(
                        WORKLOAD_KEY,
                        wl,
                        lambda obj, r=reason, m=message: set_condition(obj, "Requeued", "True", r, m, now),
                        status=True,
                    )

    @staticmethod
    def _restart_reason(
        reason: str | None, wl: dict, lq: dict | None, world: World
    ) -> tuple[str, str] | None:
        if reason == "ClusterQueueStopped" and lq is not None:
            cq = world.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue", ""))
            if cq is not None and stop_policy(cq) == "None":
                return "ClusterQueueRestarted", "The ClusterQueue was restarted after being stopped"
        if reason == "LocalQueueStopped" and lq is not None and stop_policy(lq) == "None":
            return "LocalQueueRestarted", "The LocalQueue was restarted after being stopped"
        if reason == "Deactivated" and (wl.get("spec") or {}).get("active", True):
            # Only the plain reason: Kueue's switch leaves Requeued=False/DeactivatedDueTo<cause> (a
            # rejected check, an exceeded requeuing limit) as it is when the Workload is reactivated.
            return "Reactivated", "The workload was reactivated"
        if reason in BACKOFF_REQUEUE_REASONS and requeue_at(wl) is None:
            # An admission check's Retry sets no backoff (unless the check asks for one): over at once.
            # One with a requeueAt is waited out by ``PodsReady``, which clears it as it flips this.
            return "BackoffFinished", MSG_BACKOFF_FINISHED
        return None
