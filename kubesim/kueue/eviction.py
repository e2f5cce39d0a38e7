"""Eviction: deactivated Workloads, stopped queues, waitForPodsReady, and the quota an eviction releases.

A mixin of ``KueueController`` (``kubesim.kueue.controller``), which holds the state it uses.
"""

from __future__ import annotations

from collections.abc import Callable

from kubesim.errors import ApiError
from kubesim.kueue import admission_checks, jobs
from kubesim.kueue.cache import World
from kubesim.kueue.conditions import (
    ADMISSION_COMPONENT,
    MSG_CQ_STOPPED,
    MSG_DEACTIVATED,
    MSG_LQ_STOPPED,
    MSG_NO_RESERVATION,
    MSG_ON_HOLD,
    MSG_PODS_NOT_READY,
    MSG_PODS_READY,
    MSG_PODS_RECOVERY,
    admission_of,
    condition_true,
    find_condition,
    holds_quota,
    is_evicting,
    is_finished,
    set_condition,
)
from kubesim.kueue.convert import resource_requests
from kubesim.kueue.jobs import WORKLOAD_KEY, JobKind
from kubesim.kueue.queue_status import stop_policy


class Eviction:
    """Step 2 of a pass: evict what must go among the Workloads that changed."""

    def set_deactivation_target(self, wl: dict, reason: str, message: str) -> None:
        """``SetDeactivationTarget``: the workload controller then deactivates and evicts it."""
        self._mutate(
            WORKLOAD_KEY,
            wl,
            lambda obj: set_condition(
                obj, "DeactivationTarget", "True", reason, message, self.clock.timestamp()
            ),
            status=True,
        )

    # -------------------------------------------------------------------------------- jobs

    def _hold(self, wl: dict) -> None:
        now = self.clock.timestamp()

        def change(obj: dict) -> None:
            had_admission = obj.get("status", {}).pop("admission", None) is not None
            set_condition(obj, "QuotaReserved", "False", "OnHold", MSG_ON_HOLD, now)
            if had_admission or find_condition(obj, "Admitted"):
                set_condition(obj, "Admitted", "False", "NoReservation", MSG_NO_RESERVATION, now)

        self._mutate(WORKLOAD_KEY, wl, change, status=True)
        self.parked.clear()

    def _release(self, wl: dict) -> None:
        """The evicted job stopped: clear the reservation and put the Workload back in its queue."""
        now = self.clock.timestamp()
        evicted = find_condition(wl, "Evicted") or {}
        reason, message = evicted.get("reason", ""), evicted.get("message", "")

        def change(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status.pop("admission", None)
            set_condition(obj, "QuotaReserved", "False", "Pending", message, now)
            set_condition(obj, "Admitted", "False", "NoReservation", MSG_NO_RESERVATION, now)
            requeued = "True" if reason in ("Preempted", "NodeFailures") else "False"
            set_condition(obj, "Requeued", requeued, reason, message, now)
            if condition_true(obj, "PodsReady"):
                set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)
            status["resourceRequests"] = resource_requests(obj)

        self._mutate(WORKLOAD_KEY, wl, change, status=True)
        self.parked.clear()

    def _sync_pods_ready(self, kind: JobKind, job: dict, wl: dict) -> None:
        now = self.clock.timestamp()
        ready = jobs.pods_ready(kind, job)
        previous = find_condition(wl, "PodsReady")

        def change(obj: dict) -> None:
            if ready:
                set_condition(obj, "PodsReady", "True", "Started", MSG_PODS_READY, now)
            elif previous and previous.get("status") == "True":
                set_condition(obj, "PodsReady", "False", "WaitForRecovery", MSG_PODS_RECOVERY, now)
            elif not previous or previous.get("reason") != "WaitForRecovery":
                set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)

        self._mutate(WORKLOAD_KEY, wl, change, status=True)

    # -------------------------------------------------------------------------------- evictions

    def _evict(
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
        inactive, releases the quota. ``prepare`` edits the Workload first (Kueue's ``WithCustomPrepare``,
        e.g. the requeue state of a PodsReady timeout); every admission check goes back to Pending.

        ``status.schedulingStats.evictions`` counts evictions per (reason, underlyingCause). Kueue gives an
        underlying cause only where the reason alone is too coarse (a PodsReady timeout: ``WaitForStart``
        or ``WaitForRecovery``; a deactivation: its DeactivationTarget reason); a preemption's cause is
        empty, its kind (InClusterQueue, ...) is only in the ``Preempted`` condition.
        """
        now = self.clock.timestamp()
        # A deactivation names its cause in the condition (DeactivatedDueToAdmissionCheck); the
        # eviction stats keep reason and cause apart.
        condition_reason = reason
        if reason == "Deactivated" and underlying_cause:
            condition_reason = f"DeactivatedDueTo{underlying_cause}"

        def change(obj: dict) -> None:
            if prepare is not None:
                prepare(obj)
            admission_checks.reset_on_eviction(obj, now)
            set_condition(obj, "Evicted", "True", condition_reason, message, now)
            if preempted_reason:
                set_condition(obj, "Preempted", "True", preempted_reason, message, now)
            if reason != "Preempted":
                set_condition(obj, "Requeued", "False", condition_reason, message, now)
            stats = obj["status"].setdefault("schedulingStats", {}).setdefault("evictions", [])
            for entry in stats:
                if entry.get("reason") == reason and entry.get("underlyingCause", "") == underlying_cause:
                    entry["count"] = int(entry.get("count", 0)) + 1
                    break
            else:
                stats.append({"reason": reason, "underlyingCause": underlying_cause, "count": 1})

        if self._mutate(WORKLOAD_KEY, wl, change, status=True) is None:
            return
        self._event(wl, "Normal", f"EvictedDueTo{condition_reason}", message, ADMISSION_COMPONENT)
        if preempted_reason:
            self._event(wl, "Normal", "Preempted", message, ADMISSION_COMPONENT)
        self._stop_owner(wl, message)

    def _deactivate(self, wl: dict) -> None:
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

        self._evict(wl, "Deactivated", message, underlying_cause=cause, prepare=prepare)

    def _stop_owner(self, wl: dict, message: str) -> None:
        for ref in wl["metadata"].get("ownerReferences") or []:
            kind = jobs.JOB_KINDS_BY_KIND.get(ref.get("kind"))
            if kind is None or not ref.get("controller"):
                continue
            try:
                job = self.store.get(kind.key, ref["name"], namespace=wl["metadata"]["namespace"])
            except ApiError:
                return
            fresh = self.store.get(
                WORKLOAD_KEY, wl["metadata"]["name"], namespace=wl["metadata"]["namespace"]
            )
            if not jobs.is_suspended(kind, job):
                self._stop_job(kind, job, fresh, message)

    def _reconcile_evictions(self, world: World, full: bool) -> None:
        """Deactivation and ``HoldAndDrain`` evict admitted workloads; restarts mark them requeued."""
        now = self.clock.timestamp()
        dirty, self._dirty_workloads = self._dirty_workloads, set()
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
                self._mutate(WORKLOAD_KEY, wl, lambda obj: obj["spec"].update(active=False), status=False)
                continue
            lq = world.local_queue_of(wl)
            if holds_quota(wl) and not is_evicting(wl):
                cq = world.cluster_queues.get(admission_of(wl)["clusterQueue"])
                if not (wl.get("spec") or {}).get("active", True):
                    self._deactivate(wl)
                elif cq is not None and stop_policy(cq) == "HoldAndDrain":
                    self._evict(wl, "ClusterQueueStopped", MSG_CQ_STOPPED)
                elif lq is not None and stop_policy(lq) == "HoldAndDrain":
                    self._evict(wl, "LocalQueueStopped", MSG_LQ_STOPPED)
                continue
            requeued = find_condition(wl, "Requeued") or {}
            if admission_of(wl) is None and requeued.get("status") == "False":
                restart = self._restart_reason(requeued.get("reason"), wl, lq, world)
                if restart:
                    reason, message = restart
                    self._mutate(
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
        if reason and reason.startswith("Deactivated") and (wl.get("spec") or {}).get("active", True):
            return "Reactivated", "The workload was reactivated"
        return None

    # -------------------------------------------------------------------------------- scheduling
