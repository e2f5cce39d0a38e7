"""Workload conditions and the Workload states read from them, and the words Kueue writes into both.

Every part of the Kueue controller (job sync, eviction, admission, queue status) and its helpers
(``admission_checks``, ``pods_ready``) reads and writes conditions the same way, so they live apart from
any one of them. So do the requeue rules the scheduler's model reads (a PodsReady or admission-check
eviction waits out ``requeueState.requeueAt`` and queues by its eviction time).
"""

from __future__ import annotations

from datetime import datetime

from kubesim.clock import parse_time
from kubesim.kueue import admission_checks, jobs

# The component that reports an Event (``reportingController``/``source.component``).
ADMISSION_COMPONENT = "kueue-admission"
JOB_COMPONENT = "kueue-job-controller"

MSG_ADMITTED = "The workload is admitted"
MSG_NO_RESERVATION = "The workload has no reservation"
MSG_NO_RESERVATION_UNSATISFIED_CHECKS = "The workload has no reservation and not all checks ready"
MSG_UNSATISFIED_CHECKS = "The workload has not all checks ready"
MSG_ON_HOLD = "Job is on hold"
MSG_PODS_READY = "All pods reached readiness and the workload is running"
MSG_PODS_NOT_READY = "Not all pods are ready or succeeded"
MSG_PODS_RECOVERY = "At least one pod has failed, waiting for recovery"
MSG_DEACTIVATED = "The workload is deactivated"
MSG_CQ_STOPPED = "The ClusterQueue is stopped"
MSG_LQ_STOPPED = "The LocalQueue is stopped"
MSG_BACKOFF_FINISHED = "The workload backoff was finished"

BACKOFF_REQUEUE_REASONS = ("PodsReadyTimeout", "AdmissionCheck")
"""Evictions whose Workload waits out ``requeueState.requeueAt`` and is then ordered by eviction time."""


def find_condition(obj: dict, type_: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def condition_true(obj: dict, type_: str) -> bool:
    cond = find_condition(obj, type_)
    return bool(cond) and cond.get("status") == "True"


def set_condition(obj: dict, type_: str, status: str, reason: str, message: str, now: str) -> None:
    """``meta.SetStatusCondition``: lastTransitionTime moves only when the status flips."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    new = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        "observedGeneration": obj.get("metadata", {}).get("generation", 1),
    }
    for index, cond in enumerate(conditions):
        if cond.get("type") == type_:
            if cond.get("status") == status:
                new["lastTransitionTime"] = cond.get("lastTransitionTime", now)
            conditions[index] = new
            return
    conditions.append(new)


def sync_admitted(obj: dict, now: str) -> None:
    """``SyncAdmittedCondition`` as Kueue v0.19 runs it with ``UnadmittedWorkloadsObservability`` off (its
    default): ``Admitted`` is written only when it flips, i.e. when "quota reserved and every admission
    check Ready" differs from ``Admitted=True``. So a Workload that was never admitted gets no ``Admitted``
    condition when its quota goes, and one that was admitted gets ``False`` with
    ``NoReservationUnsatisfiedChecks`` when its checks are not all Ready (an eviction resets them to
    Pending), ``NoReservation`` only when every check is Ready or there are none, ``UnsatisfiedChecks``
    when it keeps its quota. Leaving ``Admitted=True`` adds the admitted time to
    ``accumulatedPastExecutionTimeSeconds``."""
    reserved = condition_true(obj, "QuotaReserved")
    checks_ready = admission_checks.all_ready(obj)
    previous = find_condition(obj, "Admitted")
    admitted = bool(previous) and previous.get("status") == "True"
    if admitted == (reserved and checks_ready):
        return
    if reserved and checks_ready:
        set_condition(obj, "Admitted", "True", "Admitted", MSG_ADMITTED, now)
        return
    if not reserved and not checks_ready:
        reason, message = "NoReservationUnsatisfiedChecks", MSG_NO_RESERVATION_UNSATISFIED_CHECKS
    elif not reserved:
        reason, message = "NoReservation", MSG_NO_RESERVATION
    else:
        reason, message = "UnsatisfiedChecks", MSG_UNSATISFIED_CHECKS
    if previous and previous.get("lastTransitionTime"):
        ran = int(timestamp_seconds(now) - timestamp_seconds(previous["lastTransitionTime"]))
        status = obj["status"]
        status["accumulatedPastExecutionTimeSeconds"] = (
            int(status.get("accumulatedPastExecutionTimeSeconds") or 0) + ran
        )
    set_condition(obj, "Admitted", "False", reason, message, now)


# ----------------------------------------------------------------------------------------------- workload state


def admission_of(wl: dict) -> dict | None:
    return (wl.get("status") or {}).get("admission")


def is_finished(wl: dict) -> bool:
    return condition_true(wl, "Finished")


def is_evicting(wl: dict) -> bool:
    return admission_of(wl) is not None and condition_true(wl, "Evicted")


def is_on_hold(wl: dict) -> bool:
    cond = find_condition(wl, "QuotaReserved")
    return bool(cond) and cond.get("status") == "False" and cond.get("reason") == "OnHold"


def is_queued(wl: dict) -> bool:
    """Waiting in a queue: no quota, active, not finished, not on hold, not being deleted."""
    return (
        admission_of(wl) is None
        and (wl.get("spec") or {}).get("active", True)
        and not is_finished(wl)
        and not is_on_hold(wl)
        and not wl["metadata"].get("deletionTimestamp")
    )


def holds_quota(wl: dict) -> bool:
    return admission_of(wl) is not None and not is_finished(wl)


def owner_uid(wl: dict) -> str | None:
    for ref in wl["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def is_workload_priority_class(ref: dict) -> bool:
    """Whether a Workload's ``spec.priorityClassRef`` names a WorkloadPriorityClass (not a pod PriorityClass)."""
    return ref.get("group") == jobs.KUEUE_GROUP and ref.get("kind") == "WorkloadPriorityClass"


def workload_priority_class_ref(name: str) -> dict:
    return {"group": jobs.KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": name}


def timestamp_seconds(value: str | None) -> float:
    return parse_time(value).timestamp() if value else 0.0


def requeue_at(wl: dict) -> datetime | None:
    value = ((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt")
    return parse_time(value) if value else None


def backing_off(wl: dict, now: datetime) -> bool:
    """The Workload waits out a requeue backoff: the scheduler must not consider it yet."""
    at = requeue_at(wl)
    return at is not None and at > now


def queue_order_timestamp(wl: dict) -> str | None:
    """Kueue's queue-order time (``requeuingStrategy.timestamp: Eviction``): a Workload evicted for its pods
    or an admission check queues by the eviction's time, everything else by its creation."""
    evicted = find_condition(wl, "Evicted") or {}
    if evicted.get("status") == "True" and evicted.get("reason") in BACKOFF_REQUEUE_REASONS:
        return evicted.get("lastTransitionTime")
    return wl["metadata"].get("creationTimestamp")
