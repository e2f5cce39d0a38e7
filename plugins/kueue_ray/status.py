"""What a RayJob and its Kueue Workload mean, as one phase a DAG author can act on.

KubeRay and Kueue each tell half of the story: the RayJob's ``jobDeploymentStatus`` says what KubeRay is
doing, the Workload's conditions say why Kueue holds it back. ``observe`` combines both into a
:class:`Phase`, keeping the controllers' own reason and message so that logs quote Kueue and KubeRay
verbatim instead of paraphrasing them.

The order of the checks matters and follows the behaviour of Kueue v0.19 / KubeRay v1.7:

1. KubeRay terminal states first (Complete, Failed, ValidationFailed): they are final whatever Kueue says.
2. Workload ``Finished`` before ``QuotaReserved``: finished Workloads keep ``QuotaReserved=True``.
3. Deactivation (``spec.active=false``, ``Evicted`` reason ``Deactivated*``): it will not run again.
4. KubeRay ``Retrying`` (or ``New`` after a failed attempt): the Workload stays admitted during retries.
5. An eviction whose RayJob is still stopping: PREEMPTED until KubeRay reaches ``Suspended``.
6. Quota reserved: ADMITTED while the cluster starts, RUNNING once KubeRay runs the job.
7. Otherwise the ``QuotaReserved=False`` reason/message: INADMISSIBLE for configuration problems and
   requests above the ClusterQueue's maximum capacity, QUEUED for everything that resolves by waiting.

Both Kueue's default reasons (``Pending`` / ``Inadmissible``) and the granular ones of
``UnadmittedWorkloadsObservability`` (``WaitingForQuota``, ``ExceedsMaxQuota``, ``Misconfigured``, ...)
are understood.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from kueue_ray.quantity import add_resources, format_resources, parse_resources


class Phase(StrEnum):
    SUBMITTED = "SUBMITTED"
    """The RayJob exists; Kueue has not created its Workload yet."""
    QUEUED = "QUEUED"
    """Suspended and waiting for quota (also after a preemption or a PodsReady-timeout backoff)."""
    INADMISSIBLE = "INADMISSIBLE"
    """Waiting cannot help: queue missing or stopped, or the request exceeds the maximum capacity."""
    ADMITTED = "ADMITTED"
    """Quota reserved; KubeRay is starting the Ray cluster."""
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    """An attempt failed and KubeRay starts another one (within ``spec.backoffLimit``)."""
    PREEMPTED = "PREEMPTED"
    """Evicted by Kueue; KubeRay is still tearing the Ray cluster down. Requeued afterwards."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    """The Ray job was stopped (Complete with jobStatus STOPPED): finished, but not a success."""
    DEACTIVATED = "DEACTIVATED"
    """Kueue deactivated the Workload; it will not run again unless reactivated."""


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.DEACTIVATED})
ACTIVE_DEPLOYMENT_STATUSES = frozenset({"Initializing", "Running", "Waiting", "Suspending", "Retrying"})

_INADMISSIBLE_REASONS = frozenset({"Inadmissible", "Misconfigured", "Suspended", "ExceedsMaxQuota"})
_QUEUE_PROBLEMS = (
    "doesn't exist",
    "is inactive",
    "not found",
    "is stopped",
    "is terminating or missing",
)
_NEVER_FITS = (
    "> maximum capacity",
    "unavailable in ClusterQueue",
    "untolerated taint",
    "doesn't match node affinity",
    "couldn't find matching flavor",
)
_WILL_FIT_LATER = ("insufficient unused quota", "more needed")


@dataclass(frozen=True)
class Observation:
    """One moment of a RayJob's life, as the sensor / trigger sees it."""

    phase: Phase
    terminal: bool
    reason: str
    message: str
    preemptions: int = 0
    cluster_queue: str | None = None
    failed_attempts: int = 0
    job_id: str | None = None
    ray_cluster: str | None = None
    dashboard_url: str | None = None
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    """Pod set name -> {resource: ResourceFlavor} of the current admission."""
    resource_usage: dict[str, str] = field(default_factory=dict)
    """Sum over pod sets of the admitted ``resourceUsage`` (quantity strings)."""
    workload_name: str | None = None
    job_deployment_status: str = ""
    job_status: str = ""
    last_preemption: dict[str, str] | None = None
    """Kueue's words for the latest preemption, ``{"reason": "InClusterQueue", "message": "Preempted to
    accommodate ..."}``, kept after re-admission (Kueue then prefixes it with "Previously: "), so a log
    or timeline written after the fact still quotes why the job was stopped."""
    quota_reserved_at: str | None = None
    """When Kueue reserved quota for the current admission (the ``QuotaReserved=True`` condition's
    ``lastTransitionTime``), so a waiter that starts late still knows how long the job queued."""
    ray_job_started_at: str | None = None
    ray_job_finished_at: str | None = None
    """When the current attempt's Ray job started and ended, as KubeRay copies them from the Ray dashboard
    (``status.rayJobInfo``; cleared on suspension and retry), so a late waiter knows how long it ran."""

    @property
    def succeeded(self) -> bool:
        return self.phase is Phase.SUCCEEDED

    def describe(self) -> str:
        """One log line: ``QUEUED (Pending): couldn't assign flavors ...``."""
        text = f"{self.phase.value} ({self.reason})" if self.reason else self.phase.value
        return f"{text}: {self.message}" if self.message else text

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["phase"] = self.phase.value
        return data


def observe(rayjob: dict, workload: dict | None) -> Observation:
    """Interpret a RayJob and its Workload (None if Kueue has not created one yet)."""
    status = rayjob.get("status") or {}
    deployment = status.get("jobDeploymentStatus") or ""
    job_status = status.get("jobStatus") or ""
    rj_reason = status.get("reason") or ""
    rj_message = status.get("message") or ""
    failed = int(status.get("failed") or 0)
    suspended = bool((rayjob.get("spec") or {}).get("suspend"))
    wl_status = (workload or {}).get("status") or {}
    conditions = {c.get("type"): c for c in wl_status.get("conditions") or []}
    admission = wl_status.get("admission") or {}
    assignments = admission.get("podSetAssignments") or []

    common = {
        "preemptions": count_preemptions(workload),
        "cluster_queue": admission.get("clusterQueue") or None,
        "failed_attempts": failed,
        "job_id": status.get("jobId") or None,
        "ray_cluster": status.get("rayClusterName") or None,
        "dashboard_url": status.get("dashboardURL") or None,
        "flavors": {a.get("name", ""): dict(a.get("flavors") or {}) for a in assignments},
        "resource_usage": format_resources(
            add_resources(*(parse_resources(a.get("resourceUsage")) for a in assignments)),
            order=("cpu", "memory"),
        ),
        "workload_name": ((workload or {}).get("metadata") or {}).get("name"),
        "job_deployment_status": deployment,
        "job_status": job_status,
        "last_preemption": last_preemption(workload),
        "quota_reserved_at": quota_reserved_since(workload),
        "ray_job_started_at": (status.get("rayJobInfo") or {}).get("startTime") or None,
        "ray_job_finished_at": (status.get("rayJobInfo") or {}).get("endTime") or None,
    }

    def result(phase: Phase, reason: str, message: str) -> Observation:
        return Observation(
            phase=phase, terminal=phase in TERMINAL_PHASES, reason=reason, message=message, **common
        )

    # 1. KubeRay's terminal states.
    if deployment == "Complete":
        if job_status == "SUCCEEDED":
            return result(Phase.SUCCEEDED, "Succeeded", rj_message)
        if job_status == "STOPPED":
            return result(Phase.STOPPED, "Stopped", rj_message or "The Ray job was stopped.")
        return result(Phase.FAILED, rj_reason or f"JobStatus{job_status.title() or 'Unknown'}", rj_message)
    if deployment in ("Failed", "ValidationFailed"):
        return result(Phase.FAILED, rj_reason or deployment, rj_message)

    quota = conditions.get("QuotaReserved") or {}
    evicted = conditions.get("Evicted") or {}

    # 2. Kueue says the job finished (the RayJob we hold may be a step behind).
    finished = conditions.get("Finished") or {}
    if finished.get("status") == "True":
        reason = finished.get("reason") or ""
        message = finished.get("message") or rj_message
        if reason == "Succeeded":
            return result(Phase.SUCCEEDED, reason, message)
        return result(Phase.FAILED, reason or "Failed", message)
    if quota.get("status") == "False" and quota.get("reason") == "OnHold":
        # Kueue holds a RayJob that KubeRay marked ValidationFailed: it will never start.
        return result(Phase.FAILED, "ValidationFailed", rj_message or quota.get("message") or "")

    # 3. Deactivation is final for us.
    target = conditions.get("DeactivationTarget") or {}
    if workload is not None and (workload.get("spec") or {}).get("active") is False:
        deactivated_by = evicted if str(evicted.get("reason", "")).startswith("Deactivated") else target
        return result(
            Phase.DEACTIVATED,
            deactivated_by.get("reason") or "Deactivated",
            deactivated_by.get("message") or "The workload is deactivated",
        )
    if evicted.get("status") == "True" and str(evicted.get("reason", "")).startswith("Deactivated"):
        return result(Phase.DEACTIVATED, evicted["reason"], evicted.get("message") or "")
    if target.get("status") == "True":
        return result(Phase.DEACTIVATED, target.get("reason") or "Deactivated", target.get("message") or "")

    # 4. KubeRay retries a failed attempt; the Workload stays admitted meanwhile.
    if deployment == "Retrying" or (deployment == "" and failed > 0 and not suspended):
        return result(
            Phase.RETRYING,
            rj_reason or "Retrying",
            rj_message or f"Attempt {failed} failed; KubeRay is starting attempt {failed + 1}.",
        )

    if workload is None:
        if not suspended and deployment == "Running":
            return result(Phase.RUNNING, "Running", rj_message or "Running without a Kueue Workload.")
        return result(Phase.SUBMITTED, "WorkloadPending", "Waiting for Kueue to create the Workload.")

    # 5. Evicted while the Ray cluster is still being torn down.
    quota_reserved = quota.get("status") == "True"
    if evicted.get("status") == "True" and (quota_reserved or deployment in ACTIVE_DEPLOYMENT_STATUSES):
        return result(Phase.PREEMPTED, evicted.get("reason") or "Evicted", evicted.get("message") or "")

    # 6. Admitted.
    if quota_reserved:
        if deployment == "Running" and not suspended:
            return result(Phase.RUNNING, job_status or "Running", rj_message)
        return result(
            Phase.ADMITTED,
            "QuotaReserved",
            quota.get("message") or f"Quota reserved in ClusterQueue {common['cluster_queue']}",
        )

    # 7. Not admitted: inadmissible or simply waiting.
    reason = quota.get("reason") or ""
    message = quota.get("message") or ""
    if reason in _INADMISSIBLE_REASONS or _names_queue_problem(message) or is_never_fits(message):
        return result(Phase.INADMISSIBLE, reason or "Inadmissible", message)
    requeue_at = (wl_status.get("requeueState") or {}).get("requeueAt")
    if evicted.get("status") == "True":
        detail = evicted.get("message") or ""
        if requeue_at:
            detail = f"Backing off until {requeue_at} after: {detail}"
        return result(Phase.QUEUED, reason or evicted.get("reason") or "Requeued", message or detail)
    return result(Phase.QUEUED, reason or "Pending", message or "Waiting for the Kueue scheduler.")


def _names_queue_problem(message: str) -> bool:
    return ("LocalQueue " in message or "ClusterQueue " in message) and any(
        problem in message for problem in _QUEUE_PROBLEMS
    )


def is_never_fits(message: str) -> bool:
    """True if Kueue's no-fit message says the request can never be admitted with the current quotas.

    Kueue joins one "couldn't assign flavors to pod set <ps>: <reasons>" clause per pod set with "; ".
    A pod set whose reasons are all permanent (above maximum capacity, resource not covered, taints,
    affinity) never fits; one temporary shortage ("insufficient unused quota ... N more needed") in any
    of its flavors means it may fit once other workloads finish. A pending preemption means it will fit.
    """
    if not message or "Pending the preemption" in message:
        return False
    for clause in message.split("; "):
        permanent = any(marker in clause for marker in _NEVER_FITS)
        temporary = any(marker in clause for marker in _WILL_FIT_LATER)
        if permanent and not temporary:
            return True
    return False


def last_preemption(workload: dict | None) -> dict[str, str] | None:
    """The ``Preempted`` condition's reason and message, current or historical ("Previously: ...")."""
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") != "Preempted":
            continue
        message = str(condition.get("message") or "")
        if condition.get("status") == "True":
            return {"reason": str(condition.get("reason") or "Preempted"), "message": message}
        if message.startswith("Previously: "):
            return {"reason": "Preempted", "message": message.removeprefix("Previously: ")}
    return None


def quota_reserved_since(workload: dict | None) -> str | None:
    """``lastTransitionTime`` of a True ``QuotaReserved`` condition (finished Workloads keep it)."""
    for condition in ((workload or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "QuotaReserved" and condition.get("status") == "True":
            return condition.get("lastTransitionTime") or None
    return None


def count_preemptions(workload: dict | None) -> int:
    """How often Kueue preempted this Workload.

    ``status.schedulingStats.evictions`` counts evictions per reason; without it (older Kueue or a
    first eviction not yet accounted) a ``Preempted`` condition, current (True) or historical
    (False / "Previously: ..."), proves at least one.
    """
    status = (workload or {}).get("status") or {}
    evictions = (status.get("schedulingStats") or {}).get("evictions") or []
    counted = sum(int(e.get("count") or 0) for e in evictions if e.get("reason") == "Preempted")
    if counted:
        return counted
    for condition in status.get("conditions") or []:
        if condition.get("type") != "Preempted":
            continue
        if condition.get("status") == "True" or str(condition.get("message", "")).startswith("Previously:"):
            return 1
    return 0
