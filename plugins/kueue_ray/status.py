"""What a RayJob and its Kueue Workload mean, as one phase a DAG author can act on.

KubeRay and Kueue each tell half of the story: the RayJob's ``jobDeploymentStatus`` says what KubeRay is
doing, the Workload's conditions say why Kueue holds it back. ``observe`` combines both into a
:class:`~kueue_ray.phases.Phase`, keeping the controllers' own reason and message so that logs quote
Kueue and KubeRay verbatim instead of paraphrasing them.

The order of the checks matters and follows the behaviour of Kueue v0.19 / KubeRay v1.7:

1. KubeRay terminal states first (Complete, Failed, ValidationFailed): they are final whatever Kueue says.
2. Workload ``Finished`` before ``QuotaReserved``: finished Workloads keep ``QuotaReserved=True``.
3. Deactivation (``spec.active=false``, ``Evicted`` reason ``Deactivated*``): it will not run again.
   A ``Rejected`` admission check counts as deactivation: Kueue deactivates the Workload for it.
4. KubeRay ``Retrying`` (or ``New`` after a failed attempt): the Workload stays admitted during retries.
5. An eviction whose RayJob is still stopping, as what it is: PREEMPTED (``Preempted``), PODS_NOT_READY
   (``PodsReadyTimeout``: waitForPodsReady, on by default in Kueue v0.19) or EVICTED (anything else, e.g. an
   admission check asking for a retry, a stopped queue), until KubeRay reaches ``Suspended``.
6. Quota reserved: AWAITING_CHECKS until ``Admitted=True`` (admission checks, e.g. a ProvisioningRequest,
   must all be Ready; the RayJob stays suspended), then ADMITTED while the cluster starts and while the Ray
   job it submitted is still PENDING (reason ``Starting``), RUNNING once Ray runs the job.
7. Otherwise the ``QuotaReserved=False`` reason/message: INADMISSIBLE for configuration problems and
   requests above the ClusterQueue's maximum capacity, QUEUED for everything that resolves by waiting
   (including the backoff after a PodsReadyTimeout eviction).

On a MultiKueue manager (``kueue_ray.multikueue``) the RayJob's status is mirrored from the worker cluster
that runs it, and the same rules apply, with three differences: the MultiKueue check Pending means waiting
for a worker to admit it, and once Ready its words ("The workload was admitted on "worker1"") join the
ADMITTED message and ``worker_cluster`` names the worker; a Rejected check fails as any rejected check does;
and an eviction (e.g. the check's Retry after the worker was lost) is EVICTED only while the manager still
holds the quota, since no KubeRay tears anything down on the manager: once the quota is released it is
QUEUED, and the queue clock runs until Kueue dispatches it again. Kueue releases the quota only once the
mirrored status stops saying the job is active (``jobframework`` reconciler, step 6, ``RayJob.IsActive``),
which a lost worker's copy cannot say until the worker is back: the EVICTED line says so, and the
watchdog keeps the run clock running (``kueue_ray.waiting.Watchdog``).

Both Kueue's default reasons (``Pending`` / ``Inadmissible``) and the granular ones of
``UnadmittedWorkloadsObservability`` (``WaitingForQuota``, ``ExceedsMaxQuota``, ``Misconfigured``, ...)
are understood.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kueue_ray import multikueue
from kueue_ray import workload as wl
from kueue_ray.phases import (
    TERMINAL_PHASES,
    Phase,
)
from kueue_ray.quantity import add_resources, format_resources, parse_resources
from kueue_ray.workload import PODS_READY_TIMEOUT

PODS_NOT_READY_HINT = "check taints, tolerations, image pulls"
MSG_ADMITTED = "The workload is admitted"
MK_EVICTED_HINT = (
    " (MultiKueue manager: Kueue releases the quota once this RayJob's status, mirrored from its worker "
    "cluster, says it stopped; a worker out of reach says nothing until it is reachable again, so the "
    "run_timeout clock keeps running meanwhile)"
)
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
    admitted_at: str | None = None
    """When Kueue admitted it (``Admitted=True``'s ``lastTransitionTime``): after the reservation when
    admission checks had to pass first."""
    admission_checks: list[dict[str, str]] = field(default_factory=list)
    """The Workload's admission checks: ``[{"name", "state", "message"}]``."""
    pods_ready_evictions: int = 0
    """How often Kueue evicted it because its pods were not ready in time (``PodsReadyTimeout``)."""
    pods_ready_timeout: float | None = None
    """Seconds between the admission and a ``PodsReadyTimeout`` eviction (Kueue's waitForPodsReady
    timeout), when both times are on the Workload."""
    ray_job_started_at: str | None = None
    ray_job_finished_at: str | None = None
    """When the current attempt's Ray job started and ended, as KubeRay copies them from the Ray dashboard
    (``status.rayJobInfo``; cleared on suspension and retry), so a late waiter knows how long it ran."""
    multikueue: bool = False
    """The RayJob is a MultiKueue manager's copy (``spec.managedBy``): its status is mirrored from a worker."""
    worker_cluster: str | None = None
    """The MultiKueue worker cluster that runs it (``kueue_ray.multikueue.worker_cluster``); None on a
    cluster without MultiKueue and before dispatch."""

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


NOT_STARTED_JOB_STATUSES = frozenset({"", "PENDING"})
"""Ray job statuses (``status.jobStatus``, from the Ray dashboard) of a submitted job that is not running
yet: unknown so far, or PENDING (its runtime environment or resources are being set up)."""
MSG_STARTING = "The Ray job is submitted and has not started yet."


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
    conditions = wl.conditions(workload)
    admission = wl_status.get("admission") or {}
    assignments = admission.get("podSetAssignments") or []
    cluster_queue: str | None = admission.get("clusterQueue") or None
    admission_checks = wl.admission_checks(workload)
    managed = multikueue.managed_by_multikueue(rayjob)
    dispatcher = multikueue.multikueue_check(admission_checks, managed)
    pods_ready_timeout = wl.pods_ready_timeout(workload)

    # Observation's fields every rule's result shares (checked by the dataclass at run time: the rules
    # below read the typed locals above, not this dict)
    common: dict[str, Any] = {
        "preemptions": wl.count_preemptions(workload),
        "cluster_queue": cluster_queue,
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
        "last_preemption": wl.last_preemption(workload),
        "quota_reserved_at": wl.quota_reserved_since(workload),
        "admitted_at": wl.admitted_since(workload),
        "admission_checks": admission_checks,
        "pods_ready_evictions": wl.count_pods_ready_evictions(workload),
        "pods_ready_timeout": pods_ready_timeout,
        "ray_job_started_at": (status.get("rayJobInfo") or {}).get("startTime") or None,
        "ray_job_finished_at": (status.get("rayJobInfo") or {}).get("endTime") or None,
        "worker_cluster": multikueue.worker_cluster(workload),
        "multikueue": managed,
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

    quota = conditions.get(wl.QUOTA_RESERVED) or {}
    evicted = conditions.get(wl.EVICTED) or {}

    # 2. Kueue says the job finished (the RayJob we hold may be a step behind).
    finished = conditions.get(wl.FINISHED) or {}
    if finished.get("status") == "True":
        reason = finished.get("reason") or ""
        message = finished.get("message") or rj_message
        if reason == wl.FINISHED_SUCCEEDED:
            return result(Phase.SUCCEEDED, reason, message)
        return result(Phase.FAILED, reason or "Failed", message)
    if quota.get("status") == "False" and quota.get("reason") == wl.ON_HOLD:
        # Kueue holds a RayJob that KubeRay marked ValidationFailed: it will never start.
        return result(Phase.FAILED, "ValidationFailed", rj_message or quota.get("message") or "")

    # 3. Deactivation is final for us; a rejected admission check is Kueue's reason to deactivate.
    rejected = [c for c in admission_checks if c["state"] == wl.ADMISSION_CHECK_REJECTED]
    if rejected:
        return result(Phase.DEACTIVATED, "AdmissionCheckRejected", describe_rejection(rejected))
    target = conditions.get(wl.DEACTIVATION_TARGET) or {}
    if workload is not None and (workload.get("spec") or {}).get("active") is False:
        deactivated_by = evicted if wl.is_deactivation(evicted.get("reason")) else target
        return result(
            Phase.DEACTIVATED,
            deactivated_by.get("reason") or wl.DEACTIVATED,
            deactivated_by.get("message") or "The workload is deactivated",
        )
    if evicted.get("status") == "True" and wl.is_deactivation(evicted.get("reason")):
        return result(Phase.DEACTIVATED, evicted["reason"], evicted.get("message") or "")
    if target.get("status") == "True":
        return result(Phase.DEACTIVATED, target.get("reason") or wl.DEACTIVATED, target.get("message") or "")

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
    # on a MultiKueue manager the deployment status is the worker's, mirrored: nothing tears down here
    tearing_down = deployment in ACTIVE_DEPLOYMENT_STATUSES and not managed
    if evicted.get("status") == "True" and (quota_reserved or tearing_down):
        reason = evicted.get("reason") or wl.EVICTED
        message = evicted.get("message") or ""
        if reason == PODS_READY_TIMEOUT:
            return result(
                Phase.PODS_NOT_READY,
                reason,
                f"{pods_not_ready_hint(pods_ready_timeout)} ({message})",
            )
        if managed and deployment in ACTIVE_DEPLOYMENT_STATUSES:
            message += MK_EVICTED_HINT
        return result(
            Phase.PREEMPTED if reason == wl.EVICTED_BY_PREEMPTION else Phase.EVICTED, reason, message
        )

    # 6. Quota reserved: admitted once every admission check is Ready (Admitted=True).
    if quota_reserved:
        if deployment == "Running" and not suspended:
            if job_status in NOT_STARTED_JOB_STATUSES:
                # KubeRay has submitted the Ray job, which has not started (runtime env, resources):
                # still the admitted cluster starting, in one phase word, until Ray runs it.
                return result(Phase.ADMITTED, "Starting", rj_message or MSG_STARTING)
            return result(Phase.RUNNING, job_status, rj_message)
        admitted = conditions.get(wl.ADMITTED) or {}
        if admitted.get("status") != "True":
            # Kueue writes Admitted only when it flips: absent for a Workload never admitted, and the
            # Admitted=False of an earlier release (NoReservation, NoReservationUnsatisfiedChecks) stays.
            stale = not admitted.get("reason") or admitted["reason"] in wl.STALE_ADMITTED_REASONS
            return result(
                Phase.AWAITING_CHECKS,
                wl.QUOTA_RESERVED if stale else admitted["reason"],
                describe_waiting_for_checks(cluster_queue, admission_checks, dispatcher),
            )
        reserved = quota.get("message") or f"Quota reserved in ClusterQueue {cluster_queue}"
        message = f"{reserved}; {admitted.get('message') or MSG_ADMITTED}"
        if dispatcher is not None and dispatcher["message"]:
            message += f"; {dispatcher['name']}: {dispatcher['message']}"
        return result(Phase.ADMITTED, wl.ADMITTED, message)

    # 7. Not admitted: inadmissible or simply waiting.
    reason = quota.get("reason") or ""
    message = quota.get("message") or ""
    if is_inadmissible(reason, message):
        return result(Phase.INADMISSIBLE, reason or "Inadmissible", message)
    requeue_at = (wl_status.get("requeueState") or {}).get("requeueAt")
    backing_off = evicted.get("status") == "True" and evicted.get("reason") == PODS_READY_TIMEOUT
    if backing_off and message in ("", evicted.get("message")):  # nothing newer from the scheduler yet
        backoff = f" once its backoff ends at {requeue_at}" if requeue_at else ""
        hint = pods_not_ready_hint(pods_ready_timeout)
        detail = f"{hint}; Kueue requeues it{backoff} ({evicted.get('message') or ''})"
        return result(Phase.QUEUED, PODS_READY_TIMEOUT, detail)
    if evicted.get("status") == "True":
        detail = evicted.get("message") or ""
        if requeue_at:
            detail = f"Backing off until {requeue_at} after: {detail}"
        return result(Phase.QUEUED, reason or evicted.get("reason") or wl.REQUEUED, message or detail)
    return result(Phase.QUEUED, reason or "Pending", message or "Waiting for the Kueue scheduler.")


def is_inadmissible(reason: str, message: str) -> bool:
    """True when a ``QuotaReserved=False`` reason / message says waiting cannot help: a configuration
    problem (queue missing, stopped, inactive) or a request no quota can ever hold."""
    return reason in _INADMISSIBLE_REASONS or _names_queue_problem(message) or is_never_fits(message)


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


def describe_waiting_for_checks(
    cluster_queue: str | None, checks: list[dict[str, str]], dispatcher: dict[str, str] | None = None
) -> str:
    """``quota reserved in ClusterQueue cq, waiting for admission checks: gpu (Pending: Waiting for nodes)``;
    MultiKueue's check (``dispatcher``) Pending says what it waits for:
    ``multikueue (Pending; waiting for a worker cluster to admit it)``."""
    where = f" in ClusterQueue {cluster_queue}" if cluster_queue else ""
    if not checks:
        return f"quota reserved{where}, not admitted yet"

    def told(c: dict[str, str]) -> str:
        state = c["state"]
        if c is dispatcher and state == "Pending":
            state += "; waiting for a worker cluster to admit it"
        return f"{c['name']} ({state}: {c['message']})" if c["message"] else f"{c['name']} ({state})"

    return f"quota reserved{where}, waiting for admission checks: {', '.join(told(c) for c in checks)}"


def describe_rejection(rejected: list[dict[str, str]]) -> str:
    """Why a rejected admission check ends the wait, naming the check and its message."""
    parts = [f"{c['name']}: {c['message']}" if c["message"] else c["name"] for c in rejected]
    noun = "admission checks" if len(rejected) > 1 else "admission check"
    return f"{noun} rejected the RayJob ({'; '.join(parts)}); Kueue deactivates its Workload"


def format_duration(seconds: float) -> str:
    """``1800`` -> ``30m``, ``5400`` -> ``1h30m``, ``90`` -> ``1m30s``: how Kueue's config spells them."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


def pods_not_ready_hint(timeout: float | None) -> str:
    """``pods not ready within 30m: check taints, tolerations, image pulls``."""
    within = format_duration(timeout) if timeout else "Kueue's waitForPodsReady timeout"
    return f"pods not ready within {within}: {PODS_NOT_READY_HINT}"
