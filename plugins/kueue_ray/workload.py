"""What a Kueue Workload (kueue.x-k8s.io/v1beta2, Kueue v0.19) says, in one place.

The condition types and the reasons the plugin acts on are spelled here and nowhere else in the plugin
(``tests/unit/kueue_ray/test_layout.py`` checks it), and so are the readers of a Workload's status: when it
was admitted, when quota was reserved, its last preemption, its admission checks, how often it was
preempted or evicted for pods not ready, and its priority. The status models (``kueue_ray.status`` for a
RayJob, ``kueue_ray.rayservice.status`` for a RayService) decide phases from these; the waiting code, the
quota and queue explanations and the UI read Workloads through them too.

Pure: every function takes the Workload as the API server returns it (or ``None`` before Kueue created
one) and never raises on a missing field.

>>> wl = {"status": {"conditions": [
...     {"type": QUOTA_RESERVED, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
...     {"type": ADMITTED, "status": "False", "reason": "NoReservation"}]}}
>>> quota_reserved_since(wl), admitted_since(wl), is_true(wl, QUOTA_RESERVED), condition(wl, FINISHED)
('2026-01-01T00:00:00Z', None, True, {})
"""

from __future__ import annotations

from collections.abc import Mapping

from kueue_ray.kube.api import parse_time

# Condition types (Kueue's pkg/apis: WorkloadQuotaReserved, WorkloadAdmitted, ...).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
FINISHED = "Finished"
DEACTIVATION_TARGET = "DeactivationTarget"
CONDITION_TYPES = frozenset(
    {QUOTA_RESERVED, ADMITTED, EVICTED, PREEMPTED, REQUEUED, PODS_READY, FINISHED, DEACTIVATION_TARGET}
)

# Reasons the plugin tells apart.
EVICTED_BY_PREEMPTION = "Preempted"
"""``Evicted`` reason of a preemption (the ``Preempted`` condition then says which kind)."""
PODS_READY_TIMEOUT = "PodsReadyTimeout"
"""``Evicted`` reason when the pods were not ready within waitForPodsReady's timeout."""
DEACTIVATED = "Deactivated"
"""Prefix of the ``Evicted`` reasons of a deactivation (``Deactivated``, ``DeactivatedDueTo...``)."""
OWNER_NOT_FOUND = "OwnerNotFound"
"""``Finished`` reason when the Workload's job no longer exists."""
FINISHED_SUCCEEDED = "Succeeded"
"""``Finished`` reason of a job that succeeded."""
ON_HOLD = "OnHold"
"""``QuotaReserved=False`` reason of a job its integration holds back (a RayJob KubeRay refused)."""
NO_RESERVATION = "NoReservation"
"""``Admitted=False`` reason Kueue writes when an admitted Workload's quota is released and every admission
check is Ready (or it has none); left in place afterwards: stale, not a pending check."""
NO_RESERVATION_UNSATISFIED_CHECKS = "NoReservationUnsatisfiedChecks"
"""The same when its checks are not all Ready (an eviction resets them to Pending): also stale once the
Workload holds quota again, its checks then say what it waits for."""
STALE_ADMITTED_REASONS = frozenset({NO_RESERVATION, NO_RESERVATION_UNSATISFIED_CHECKS})
"""``Admitted=False`` reasons written when the quota went, which Kueue (``UnadmittedWorkloadsObservability``
off, its default) does not rewrite when quota is reserved again."""
PREVIOUSLY = "Previously: "
"""Prefix Kueue puts before a ``Preempted`` condition's message once the Workload is admitted again."""
ADMISSION_CHECK_REJECTED = "Rejected"
"""An admission check's state that makes Kueue deactivate the Workload."""


def condition(workload: Mapping | None, type_: str) -> dict:
    """The condition of ``type_`` in the Workload's status; {} when there is none."""
    for found in ((workload or {}).get("status") or {}).get("conditions") or ():
        if found.get("type") == type_:
            return found
    return {}


def conditions(workload: Mapping | None) -> dict[str, dict]:
    """Every condition of the Workload by type."""
    return {c.get("type"): c for c in ((workload or {}).get("status") or {}).get("conditions") or ()}


def is_true(workload: Mapping | None, type_: str) -> bool:
    """Whether the condition of ``type_`` is there with status True."""
    return condition(workload, type_).get("status") == "True"


def is_finished(workload: Mapping | None) -> bool:
    """``Finished=True``: the job ended (finished Workloads keep ``QuotaReserved`` and ``Admitted``)."""
    return is_true(workload, FINISHED)


def holds_quota(workload: Mapping | None) -> bool:
    """Quota reserved and not finished (one pass over the conditions: the Kueue pages ask it of every
    Workload in the cluster, finished ones included).

    >>> holds_quota({"status": {"conditions": [{"type": QUOTA_RESERVED, "status": "True"}]}})
    True
    >>> holds_quota({"status": {"conditions": [
    ...     {"type": QUOTA_RESERVED, "status": "True"}, {"type": FINISHED, "status": "True"}]}})
    False
    """
    reserved = finished = False
    for found in ((workload or {}).get("status") or {}).get("conditions") or ():
        kind = found.get("type")
        if kind == QUOTA_RESERVED:
            reserved = found.get("status") == "True"
        elif kind == FINISHED:
            finished = found.get("status") == "True"
    return reserved and not finished


def is_deactivation(reason: str | None) -> bool:
    """Whether an ``Evicted`` reason is one of Kueue's deactivation reasons."""
    return str(reason or "").startswith(DEACTIVATED)


def owner_deleted(workload: Mapping | None) -> bool:
    """Whether Kueue finished ``workload`` because its job no longer exists: the job was deleted, even when
    the job's own deletion has not reached the waiter yet (real Kueue writes this within milliseconds, often
    before the job's DELETED event arrives).

    >>> finished = {"type": FINISHED, "status": "True", "reason": OWNER_NOT_FOUND}
    >>> owner_deleted({"status": {"conditions": [finished]}}), owner_deleted(None)
    (True, False)
    """
    finished = condition(workload, FINISHED)
    return finished.get("status") == "True" and finished.get("reason") == OWNER_NOT_FOUND


def _since(workload: Mapping | None, type_: str) -> str | None:
    found = condition(workload, type_)
    return (found.get("lastTransitionTime") or None) if found.get("status") == "True" else None


def admitted_since(workload: Mapping | None) -> str | None:
    """``lastTransitionTime`` of a True ``Admitted`` condition (finished Workloads keep it)."""
    return _since(workload, ADMITTED)


def quota_reserved_since(workload: Mapping | None) -> str | None:
    """``lastTransitionTime`` of a True ``QuotaReserved`` condition (finished Workloads keep it)."""
    return _since(workload, QUOTA_RESERVED)


def quota_lost_since(workload: Mapping | None) -> str | None:
    """``lastTransitionTime`` of a ``QuotaReserved`` condition that is not True: when the Workload lost
    (or was first refused) its quota; None while it holds quota or before Kueue said anything."""
    found = condition(workload, QUOTA_RESERVED)
    return (found.get("lastTransitionTime") or None) if found.get("status") != "True" else None


def last_preemption(workload: Mapping | None) -> dict[str, str] | None:
    """The ``Preempted`` condition's reason and message, current or historical ("Previously: ...")."""
    found = condition(workload, PREEMPTED)
    message = str(found.get("message") or "")
    if found.get("status") == "True":
        return {"reason": str(found.get("reason") or EVICTED_BY_PREEMPTION), "message": message}
    if message.startswith(PREVIOUSLY):
        return {"reason": EVICTED_BY_PREEMPTION, "message": message.removeprefix(PREVIOUSLY)}
    return None


def admission_checks(workload: Mapping | None) -> list[dict[str, str]]:
    """The Workload's ``status.admissionChecks`` as ``[{"name", "state", "message"}]``."""
    return [
        {
            "name": str(c.get("name") or ""),
            "state": str(c.get("state") or ""),
            "message": str(c.get("message") or ""),
        }
        for c in ((workload or {}).get("status") or {}).get("admissionChecks") or []
    ]


def _evictions(workload: Mapping | None, reason: str) -> int:
    stats = ((workload or {}).get("status") or {}).get("schedulingStats") or {}
    return sum(int(e.get("count") or 0) for e in stats.get("evictions") or () if e.get("reason") == reason)


def count_pods_ready_evictions(workload: Mapping | None) -> int:
    """How often waitForPodsReady evicted it: ``schedulingStats.evictions`` of reason ``PodsReadyTimeout``,
    or ``requeueState.count`` (Kueue counts those requeues there) when that is ahead."""
    requeues = int((((workload or {}).get("status") or {}).get("requeueState") or {}).get("count") or 0)
    return max(_evictions(workload, PODS_READY_TIMEOUT), requeues)


def count_preemptions(workload: Mapping | None) -> int:
    """How often Kueue preempted this Workload.

    ``status.schedulingStats.evictions`` counts evictions per reason; without it (older Kueue or a
    first eviction not yet accounted) a ``Preempted`` condition, current (True) or historical
    (False / "Previously: ..."), proves at least one.
    """
    counted = _evictions(workload, EVICTED_BY_PREEMPTION)
    if counted:
        return counted
    preempted = condition(workload, PREEMPTED)
    said_before = str(preempted.get("message", "")).startswith(PREVIOUSLY.rstrip())
    return 1 if preempted.get("status") == "True" or said_before else 0


def pods_ready_timeout(workload: Mapping | None) -> float | None:
    """Seconds from the admission to the ``PodsReadyTimeout`` eviction (Kueue's waitForPodsReady timeout),
    while both conditions still say so (Kueue rewrites ``Admitted`` once the quota is released)."""
    evicted, admitted = condition(workload, EVICTED), condition(workload, ADMITTED)
    if evicted.get("reason") != PODS_READY_TIMEOUT or admitted.get("status") != "True":
        return None
    start = parse_time(admitted.get("lastTransitionTime"))
    end = parse_time(evicted.get("lastTransitionTime"))
    if start is None or end is None:
        return None
    seconds = (end - start).total_seconds()
    return seconds if seconds > 0 else None


def workload_priority(workload: Mapping | None) -> tuple[str | None, int] | None:
    """(priority class, priority value) Kueue gave the Workload; None before it has one.

    >>> workload_priority({"spec": {"priorityClassRef": {"name": "prod-priority"}, "priority": 1000}})
    ('prod-priority', 1000)
    """
    spec = (workload or {}).get("spec") or {}
    if "priority" not in spec:
        return None
    return (spec.get("priorityClassRef") or {}).get("name"), spec["priority"]


def controller_owner(workload: Mapping) -> tuple[str, str, str]:
    """(kind, name, uid) of the object the Workload is for (its controller owner reference); empty strings
    when it has none."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref.get("kind", ""), ref.get("name", ""), ref.get("uid", "")
    return "", "", ""


SERVICE_OWNERS = frozenset({"RayService", "RayCluster"})
"""The controllers of the Workloads ``related_workload`` may relate to a RayService."""


def related_workload(service: Mapping, workload: Mapping) -> bool:
    """Whether ``workload`` is the RayService's or one of its current clusters' (for a watch filter)."""
    kind, name, uid = controller_owner(workload)
    if kind == "RayService":
        return uid == (service.get("metadata") or {}).get("uid")
    if kind != "RayCluster":
        return False
    status = service.get("status") or {}
    return name in {
        (status.get(role) or {}).get("rayClusterName")
        for role in ("activeServiceStatus", "pendingServiceStatus")
    }
