"""The status model on RayJob + Workload objects shaped like KubeRay v1.7 / Kueue v0.19 write them."""

import pytest
from kueue_ray.kube.essential import essential_rayjob, essential_workload
from kueue_ray.quantity import parse_quantity
from kueue_ray.status import (
    Phase,
    format_duration,
    is_never_fits,
    observe,
)
from kueue_ray.workload import count_pods_ready_evictions, count_preemptions

NEVER_FITS = (
    "couldn't assign flavors to pod set submitter: insufficient quota for cpu in flavor default-flavor, "
    "previously considered podsets requests (2) + current podset request (500m) > maximum capacity (2)"
)
MORE_NEEDED = (
    "couldn't assign flavors to pod set head: insufficient unused quota for nvidia.com/gpu in flavor "
    "default-flavor, 1 more needed"
)
PREEMPTED_MSG = (
    "Preempted to accommodate a workload (UID: 1c2d, JobUID: 9f8e) due to prioritization in the "
    "ClusterQueue; preemptor path: /cluster-queue; preemptee path: /cluster-queue"
)


def rayjob(deployment="", job_status="", *, suspend=True, failed=0, reason="", message="", **status):
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "train-42", "namespace": "default", "uid": "6f1c2d3e"},
        "spec": {"suspend": suspend, "shutdownAfterJobFinishes": True},
        "status": {
            "jobDeploymentStatus": deployment,
            "jobStatus": job_status,
            "failed": failed,
            "succeeded": 0,
            "reason": reason,
            "message": message,
            **status,
        },
    }


def cond(type_, status, reason, message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message}


ADMISSION = {
    "clusterQueue": "cluster-queue",
    "podSetAssignments": [
        {
            "name": "head",
            "count": 1,
            "flavors": {"cpu": "default-flavor", "memory": "default-flavor", "nvidia.com/gpu": "gpu-a100"},
            "resourceUsage": {"cpu": "2", "memory": "8G", "nvidia.com/gpu": "1"},
        },
        {
            "name": "submitter",
            "count": 1,
            "flavors": {"cpu": "default-flavor", "memory": "default-flavor"},
            "resourceUsage": {"cpu": "500m", "memory": "200Mi"},
        },
    ],
}


def workload(*conditions, admission=None, active=True, evictions=None, requeue_at=None, checks=None):
    status = {"conditions": list(conditions)}
    if checks:
        status["admissionChecks"] = [
            {"name": n, "state": st, "message": m, "lastTransitionTime": "2026-12-02T10:00:00Z"}
            for n, st, m in checks
        ]
    if admission:
        status["admission"] = admission
    if evictions:
        status["schedulingStats"] = {"evictions": evictions}
    if requeue_at:
        status["requeueState"] = {"count": 1, "requeueAt": requeue_at}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "rayjob-train-42-123ec", "namespace": "default"},
        "spec": {"active": active, "queueName": "user-queue"},
        "status": status,
    }


RESERVED = cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cluster-queue")
ADMITTED = cond("Admitted", "True", "Admitted", "The workload is admitted")


def test_rayjob_without_workload_is_submitted():
    obs = observe(rayjob("Suspended"), None)
    assert obs.phase is Phase.SUBMITTED
    assert not obs.terminal


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("Pending", MORE_NEEDED),
        ("WaitingForQuota", MORE_NEEDED),
        ("Pending", MORE_NEEDED + ". Pending the preemption of 1 workload(s)"),
        ("WaitingForPreemptedWorkloads", MORE_NEEDED + ". Pending the preemption of 1 workload(s)"),
        ("PendingEvaluation", "Workload is pending evaluation in the scheduling queue"),
    ],
)
def test_waiting_for_quota_is_queued_with_kueues_words(reason, message):
    obs = observe(rayjob("Suspended"), workload(cond("QuotaReserved", "False", reason, message)))
    assert obs.phase is Phase.QUEUED
    assert (obs.reason, obs.message) == (reason, message)
    assert obs.cluster_queue is None


def test_workload_without_conditions_is_queued():
    """StrictFIFO: workloads behind a blocked head get no conditions at all."""
    assert observe(rayjob("Suspended"), workload()).phase is Phase.QUEUED


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("Inadmissible", "LocalQueue missing-queue doesn't exist"),
        ("Inadmissible", "ClusterQueue cluster-queue is inactive"),
        ("Misconfigured", "LocalQueue missing-queue doesn't exist"),
        ("Suspended", "ClusterQueue cluster-queue is stopped"),
        ("Pending", "ClusterQueue cluster-queue not found"),
        ("Pending", NEVER_FITS),
        ("ExceedsMaxQuota", NEVER_FITS),
        ("Pending", "couldn't assign flavors to pod set head: request > maximum capacity (24 > 16)"),
    ],
)
def test_configuration_problems_and_never_fits_are_inadmissible(reason, message):
    obs = observe(rayjob("Suspended"), workload(cond("QuotaReserved", "False", reason, message)))
    assert obs.phase is Phase.INADMISSIBLE
    assert obs.message == message
    assert not obs.terminal


def test_never_fits_needs_every_flavor_of_a_pod_set_to_be_permanent():
    mixed = (
        "couldn't assign flavors to pod set head: insufficient quota for cpu in flavor small, previously "
        "considered podsets requests (0) + current podset request (4) > maximum capacity (2), "
        "insufficient unused quota for cpu in flavor large, 2 more needed"
    )
    assert not is_never_fits(mixed)
    assert is_never_fits(f"{MORE_NEEDED}; {NEVER_FITS}")
    assert is_never_fits(
        "couldn't assign flavors to pod set head: resource nvidia.com/gpu unavailable in ClusterQueue"
    )
    assert not is_never_fits(NEVER_FITS + ". Pending the preemption of 2 workload(s)")
    assert not is_never_fits("")


def test_quota_reserved_while_cluster_starts_is_admitted_with_flavors_and_usage():
    obs = observe(rayjob("Initializing", suspend=False), workload(RESERVED, ADMITTED, admission=ADMISSION))
    assert obs.phase is Phase.ADMITTED
    assert obs.cluster_queue == "cluster-queue"
    assert obs.flavors["head"]["nvidia.com/gpu"] == "gpu-a100"
    assert obs.resource_usage["cpu"] == "2500m"
    assert obs.resource_usage["nvidia.com/gpu"] == "1"
    assert parse_quantity(obs.resource_usage["memory"]) == 8_000_000_000 + 200 * 2**20
    assert obs.workload_name == "rayjob-train-42-123ec"


@pytest.mark.parametrize("job_status", ["", "PENDING"])
def test_a_submitted_ray_job_that_has_not_started_is_still_admitted_and_starting(job_status):
    """KubeRay says Running as soon as it has submitted the Ray job; until Ray runs it (runtime env set-up,
    resources), the log and the Kueue tab say one phase word: admitted, starting, not RUNNING (PENDING)."""
    message = "Job has not started yet. It may be waiting for the runtime environment to be set up."
    obs = observe(
        rayjob("Running", job_status, suspend=False, message=message, jobId="j-1"),
        workload(RESERVED, ADMITTED, admission=ADMISSION),
    )
    assert (obs.phase, obs.reason, obs.message) == (Phase.ADMITTED, "Starting", message)
    assert obs.describe() == f"ADMITTED (Starting): {message}"
    assert obs.job_id == "j-1"
    running = observe(
        rayjob("Running", "RUNNING", suspend=False), workload(RESERVED, ADMITTED, admission=ADMISSION)
    )
    assert running.phase is Phase.RUNNING


def test_running_carries_kuberay_identifiers():
    rj = rayjob(
        "Running",
        "RUNNING",
        suspend=False,
        jobId="train-42-x7k2p",
        rayClusterName="train-42-hj2rs",
        dashboardURL="train-42-hj2rs-head-svc.default.svc.cluster.local:8265",
    )
    obs = observe(rj, workload(RESERVED, ADMITTED, admission=ADMISSION))
    assert obs.phase is Phase.RUNNING
    assert (obs.job_id, obs.ray_cluster) == ("train-42-x7k2p", "train-42-hj2rs")
    assert obs.dashboard_url.endswith(":8265")


def test_finished_is_checked_before_quota_reserved():
    """Kueue v0.19 keeps QuotaReserved=True on finished Workloads."""
    finished = cond("Finished", "True", "Succeeded", "Job finished successfully.")
    obs = observe(
        rayjob("Running", "RUNNING", suspend=False),
        workload(RESERVED, ADMITTED, finished, admission=ADMISSION),
    )
    assert obs.phase is Phase.SUCCEEDED
    assert obs.terminal
    failed = cond("Finished", "True", "Failed", "Job failed")
    assert observe(rayjob("Running", suspend=False), workload(RESERVED, failed)).phase is Phase.FAILED


def test_complete_succeeded_and_stopped():
    done = workload(RESERVED, ADMITTED, cond("Finished", "True", "Succeeded", ""), admission=ADMISSION)
    obs = observe(rayjob("Complete", "SUCCEEDED", suspend=False, message="Job finished successfully."), done)
    assert (obs.phase, obs.terminal, obs.message) == (Phase.SUCCEEDED, True, "Job finished successfully.")
    stopped = observe(rayjob("Complete", "STOPPED", suspend=False), done)
    assert stopped.phase is Phase.STOPPED
    assert stopped.terminal and not stopped.succeeded


@pytest.mark.parametrize(
    ("deployment", "reason", "message"),
    [
        ("Failed", "AppFailed", "Job entrypoint command failed with exit code 1"),
        ("Failed", "SubmissionFailed", "Job submission has failed. Reason: BackoffLimitExceeded. Message: x"),
        ("Failed", "DeadlineExceeded", "The RayJob has passed the activeDeadlineSeconds."),
        ("ValidationFailed", "ValidationFailed", "The RayJob spec is invalid: entrypoint is required"),
    ],
)
def test_failures_are_terminal_with_kuberays_reason(deployment, reason, message):
    obs = observe(rayjob(deployment, "FAILED", suspend=False, failed=3, reason=reason, message=message), None)
    assert (obs.phase, obs.terminal, obs.reason, obs.message) == (Phase.FAILED, True, reason, message)
    assert obs.failed_attempts == 3


def test_on_hold_workload_means_validation_failed():
    held = workload(cond("QuotaReserved", "False", "OnHold", "Job is on hold"))
    obs = observe(rayjob("Suspended"), held)
    assert (obs.phase, obs.reason, obs.terminal) == (Phase.FAILED, "ValidationFailed", True)


def test_retrying_and_new_after_retrying():
    wl = workload(RESERVED, ADMITTED, admission=ADMISSION)
    retrying = observe(rayjob("Retrying", "FAILED", suspend=False, failed=1, reason="AppFailed"), wl)
    assert (retrying.phase, retrying.failed_attempts, retrying.terminal) == (Phase.RETRYING, 1, False)
    assert observe(rayjob("", suspend=False, failed=1), wl).phase is Phase.RETRYING
    assert observe(rayjob("Initializing", suspend=False, failed=1), wl).phase is Phase.ADMITTED


def test_preempted_while_cluster_is_torn_down_then_queued_again():
    evicted = cond("Evicted", "True", "Preempted", PREEMPTED_MSG)
    preempted = cond("Preempted", "True", "InClusterQueue", PREEMPTED_MSG)
    stopping = observe(
        rayjob("Suspending", suspend=True), workload(RESERVED, evicted, preempted, admission=ADMISSION)
    )
    assert (stopping.phase, stopping.reason, stopping.message) == (
        Phase.PREEMPTED,
        "Preempted",
        PREEMPTED_MSG,
    )
    assert stopping.preemptions == 1

    requeued = workload(
        cond("QuotaReserved", "False", "Pending", PREEMPTED_MSG),
        evicted,
        preempted,
        cond("Requeued", "True", "Preempted", PREEMPTED_MSG),
        evictions=[{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 2}],
    )
    obs = observe(rayjob("Suspended"), requeued)
    assert (obs.phase, obs.preemptions, obs.terminal) == (Phase.QUEUED, 2, False)
    assert obs.last_preemption == {"reason": "InClusterQueue", "message": PREEMPTED_MSG}


def test_last_preemption_survives_readmission_without_the_previously_prefix():
    readmitted = workload(
        RESERVED, cond("Preempted", "False", "QuotaReserved", "Previously: " + PREEMPTED_MSG)
    )
    assert observe(rayjob("Running", suspend=False), readmitted).last_preemption == {
        "reason": "Preempted",
        "message": PREEMPTED_MSG,
    }
    assert observe(rayjob("Running", suspend=False), workload(RESERVED)).last_preemption is None


PODS_READY_MSG = "Exceeded the PodsReady timeout default/rayjob-train-42-123ec"


def test_pods_ready_timeout_backoff_is_queued_says_why_and_until_when():
    evicted = cond("Evicted", "True", "PodsReadyTimeout", PODS_READY_MSG)
    wl = workload(
        cond("QuotaReserved", "False", "Pending", PODS_READY_MSG),
        evicted,
        cond("Requeued", "False", "PodsReadyTimeout", PODS_READY_MSG),
        cond("Admitted", "False", "NoReservation", "The workload has no reservation"),
        requeue_at="2026-12-02T12:00:00Z",
        evictions=[{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}],
    )
    obs = observe(rayjob("Suspended"), wl)
    assert (obs.phase, obs.reason) == (Phase.QUEUED, "PodsReadyTimeout")
    assert "pods not ready within" in obs.message and "check taints, tolerations, image pulls" in obs.message
    assert "2026-12-02T12:00:00Z" in obs.message and PODS_READY_MSG in obs.message
    assert (obs.preemptions, obs.pods_ready_evictions) == (0, 1)


def test_after_the_backoff_the_schedulers_newer_words_win():
    wl = workload(
        cond("QuotaReserved", "False", "Pending", MORE_NEEDED),
        cond("Evicted", "True", "PodsReadyTimeout", PODS_READY_MSG),
        cond("Requeued", "True", "BackoffFinished", "The workload backoff was finished"),
    )
    obs = observe(rayjob("Suspended"), wl)
    assert (obs.phase, obs.message) == (Phase.QUEUED, MORE_NEEDED)


def timed(condition, at):
    return {**condition, "lastTransitionTime": at}


@pytest.mark.parametrize(
    ("reason", "message", "phase"),
    [
        ("Preempted", PREEMPTED_MSG, Phase.PREEMPTED),
        ("PodsReadyTimeout", PODS_READY_MSG, Phase.PODS_NOT_READY),
        ("AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "gpu" (retry)', Phase.EVICTED),
        ("ClusterQueueStopped", "The ClusterQueue is stopped", Phase.EVICTED),
    ],
)
def test_an_eviction_is_shown_as_what_it_is(reason, message, phase):
    wl = workload(RESERVED, ADMITTED, cond("Evicted", "True", reason, message), admission=ADMISSION)
    obs = observe(rayjob("Suspending", suspend=True), wl)
    assert (obs.phase, obs.reason, obs.terminal) == (phase, reason, False)
    assert message in obs.message


def test_pods_not_ready_names_the_timeout_kueue_applied_and_the_usual_causes():
    wl = workload(
        timed(RESERVED, "2026-12-02T10:00:00Z"),
        timed(ADMITTED, "2026-12-02T10:00:00Z"),
        timed(cond("Evicted", "True", "PodsReadyTimeout", PODS_READY_MSG), "2026-12-02T10:30:00Z"),
        admission=ADMISSION,
        evictions=[{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}],
    )
    obs = observe(rayjob("Suspending", suspend=True), wl)
    assert obs.phase is Phase.PODS_NOT_READY
    assert (
        obs.message == f"pods not ready within 30m: check taints, tolerations, image pulls ({PODS_READY_MSG})"
    )
    assert (obs.pods_ready_timeout, obs.pods_ready_evictions, obs.preemptions) == (1800.0, 1, 0)


def test_pods_ready_evictions_are_counted_apart_from_preemptions():
    stats = [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 2},
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForRecovery", "count": 1},
        {"reason": "Preempted", "underlyingCause": "", "count": 4},
    ]
    assert count_pods_ready_evictions(workload(evictions=stats)) == 3
    assert count_preemptions(workload(evictions=stats)) == 4
    ahead = workload(requeue_at="2026-12-02T12:00:00Z")  # requeueState.count 1, stats not written yet
    assert count_pods_ready_evictions(ahead) == 1


@pytest.mark.parametrize(("seconds", "text"), [(1800, "30m"), (5400, "1h30m"), (90, "1m30s"), (6, "6s")])
def test_durations_read_like_kueues_config(seconds, text):
    assert format_duration(seconds) == text


CHECKS = [("gpu-provisioning", "Pending", "Waiting for 1 GPU node"), ("quota-audit", "Ready", "")]


def test_quota_reserved_is_not_admitted_while_admission_checks_are_pending():
    """Kueue reserves quota first; the RayJob stays suspended until every check is Ready."""
    obs = observe(rayjob("Suspended"), workload(RESERVED, admission=ADMISSION, checks=CHECKS))
    assert (obs.phase, obs.terminal) == (Phase.AWAITING_CHECKS, False)
    assert obs.message == (
        "quota reserved in ClusterQueue cluster-queue, waiting for admission checks: "
        "gpu-provisioning (Pending: Waiting for 1 GPU node), quota-audit (Ready)"
    )
    assert obs.admission_checks[0] == {
        "name": "gpu-provisioning",
        "state": "Pending",
        "message": "Waiting for 1 GPU node",
    }
    # Re-reserved after an eviction, Kueue keeps Admitted=False until the checks pass again.
    no_reservation = cond("Admitted", "False", "NoReservation", "The workload has no reservation")
    again = observe(
        rayjob("Suspended"), workload(RESERVED, no_reservation, admission=ADMISSION, checks=CHECKS)
    )
    assert (again.phase, again.reason) == (Phase.AWAITING_CHECKS, "QuotaReserved")
    # Evicted while admitted with checks (they are reset to Pending): Kueue's reason says so, and it is
    # as stale once quota is reserved again; the checks tell what the Workload waits for.
    reset = cond(
        "Admitted",
        "False",
        "NoReservationUnsatisfiedChecks",
        "The workload has no reservation and not all checks ready",
    )
    again = observe(rayjob("Suspended"), workload(RESERVED, reset, admission=ADMISSION, checks=CHECKS))
    assert (again.phase, again.reason) == (Phase.AWAITING_CHECKS, "QuotaReserved")
    assert again.message.startswith(
        "quota reserved in ClusterQueue cluster-queue, waiting for admission checks"
    )
    # Never admitted: no Admitted condition at all.
    never = observe(rayjob("Suspended"), workload(RESERVED, admission=ADMISSION, checks=CHECKS))
    assert (never.phase, never.reason) == (Phase.AWAITING_CHECKS, "QuotaReserved")
    unsatisfied = cond("Admitted", "False", "UnsatisfiedChecks", "The workload has not all checks ready")
    assert (
        observe(rayjob("Suspended"), workload(RESERVED, unsatisfied, checks=CHECKS)).reason
        == "UnsatisfiedChecks"
    )
    ready = [(name, "Ready", "") for name, _, _ in CHECKS]
    admitted = observe(
        rayjob("Initializing", suspend=False), workload(RESERVED, ADMITTED, admission=ADMISSION, checks=ready)
    )
    assert admitted.phase is Phase.ADMITTED


def test_a_rejected_admission_check_ends_it_naming_the_check_and_its_message():
    rejected = [("capacity", "Rejected", "no A100 capacity in westeurope")]
    obs = observe(rayjob("Suspended"), workload(RESERVED, admission=ADMISSION, checks=rejected))
    assert (obs.phase, obs.terminal, obs.reason) == (Phase.DEACTIVATED, True, "AdmissionCheckRejected")
    assert "capacity: no A100 capacity in westeurope" in obs.message
    # Once Kueue deactivated it, its own words name the check (the check itself is reset to Pending).
    kueue_words = 'The workload is deactivated due to AdmissionCheck in Rejected state: "capacity" (no A100)'
    deactivated = workload(
        cond("QuotaReserved", "False", "Pending", kueue_words),
        cond("Evicted", "True", "DeactivatedDueToAdmissionCheck", kueue_words),
        active=False,
        checks=[("capacity", "Pending", "Reset to Pending after eviction. Previously: Rejected")],
    )
    after = observe(rayjob("Suspended"), deactivated)
    assert (after.phase, after.reason, after.message) == (
        Phase.DEACTIVATED,
        "DeactivatedDueToAdmissionCheck",
        kueue_words,
    )


def test_preemption_count_from_historical_condition():
    previously = cond("Preempted", "False", "QuotaReserved", "Previously: " + PREEMPTED_MSG)
    assert count_preemptions(workload(RESERVED, previously)) == 1
    assert count_preemptions(workload(RESERVED)) == 0
    other = [{"reason": "PodsReadyTimeout", "count": 3}, {"reason": "Preempted", "count": 1}]
    assert count_preemptions(workload(evictions=other)) == 1


@pytest.mark.parametrize(
    "wl",
    [
        workload(cond("QuotaReserved", "False", "Pending", ""), active=False),
        workload(
            RESERVED,
            cond(
                "Evicted",
                "True",
                "DeactivatedDueToRequeuingLimitExceeded",
                "The workload is deactivated due to x",
            ),
        ),
        workload(
            RESERVED,
            cond(
                "DeactivationTarget",
                "True",
                "MaximumExecutionTimeExceeded",
                "exceeding the maximum execution time",
            ),
        ),
    ],
)
def test_deactivation_is_terminal(wl):
    obs = observe(rayjob("Running", "RUNNING", suspend=False), wl)
    assert (obs.phase, obs.terminal) == (Phase.DEACTIVATED, True)


def test_observation_serialises_for_trigger_events():
    data = observe(
        rayjob("Initializing", suspend=False), workload(RESERVED, ADMITTED, admission=ADMISSION)
    ).to_dict()
    assert data["phase"] == "ADMITTED"
    assert data["flavors"]["submitter"] == {"cpu": "default-flavor", "memory": "default-flavor"}


def test_the_quota_reservation_instant_is_read_only_while_quota_is_reserved():
    reserved = {**RESERVED, "lastTransitionTime": "2026-12-02T10:00:30Z"}
    running = observe(rayjob("Running", "RUNNING", suspend=False), workload(reserved))
    assert running.quota_reserved_at == "2026-12-02T10:00:30Z"
    waiting = {**cond("QuotaReserved", "False", "Pending"), "lastTransitionTime": "2026-12-02T10:00:00Z"}
    assert observe(rayjob("Suspended"), workload(waiting)).quota_reserved_at is None


POD_TEMPLATE = {
    "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0", "args": ["x"] * 50}]}
}
EVERY_PHASE = [
    (rayjob("Suspended"), None),
    (rayjob("Suspended"), workload(cond("QuotaReserved", "False", "Pending", MORE_NEEDED))),
    (
        rayjob("Suspended"),
        workload(cond("QuotaReserved", "False", "Inadmissible", "ClusterQueue x is inactive")),
    ),
    (rayjob("Suspended"), workload(RESERVED, admission=ADMISSION, checks=[("gpu", "Pending", "Waiting")])),
    (rayjob("Initializing", suspend=False), workload(RESERVED, ADMITTED, admission=ADMISSION)),
    (
        rayjob("Running", "RUNNING", suspend=False, jobId="j-1", rayClusterName="rc", dashboardURL="d:8265"),
        workload(RESERVED, ADMITTED, admission=ADMISSION),
    ),
    (
        rayjob("Suspending", suspend=True),
        workload(
            RESERVED,
            cond("Evicted", "True", "Preempted", PREEMPTED_MSG),
            cond("Preempted", "True", "InClusterQueue", PREEMPTED_MSG),
            admission=ADMISSION,
            evictions=[{"reason": "Preempted", "underlyingCause": "", "count": 1}],
        ),
    ),
    (
        rayjob("Suspended"),
        workload(
            cond("QuotaReserved", "False", "Pending", ""),
            cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout"),
            evictions=[{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}],
            requeue_at="2026-12-02T10:05:00Z",
        ),
    ),
    (rayjob("Retrying", suspend=False, failed=1), workload(RESERVED, ADMITTED, admission=ADMISSION)),
    (
        rayjob("Complete", "SUCCEEDED", suspend=False, rayJobInfo={"startTime": "t0", "endTime": "t1"}),
        workload(RESERVED, ADMITTED, cond("Finished", "True", "Succeeded", "done"), admission=ADMISSION),
    ),
    (rayjob("Failed", "FAILED", reason="AppFailed", message="exit 1"), None),
    (rayjob("Suspended"), workload(cond("QuotaReserved", "False", "Pending", ""), active=False)),
]


@pytest.mark.parametrize(("job", "wl"), EVERY_PHASE)
def test_what_a_watch_cache_keeps_of_the_objects_means_the_same(job, wl):
    """The hub keeps only ``essential_*`` of each object; observe() must read the same from it."""
    job = {**job, "spec": {**job["spec"], "rayClusterSpec": {"headGroupSpec": {"template": POD_TEMPLATE}}}}
    job["metadata"] = {**job["metadata"], "managedFields": [{"manager": "kuberay"}] * 10}
    if wl is not None:
        wl = {
            **wl,
            "spec": {**wl["spec"], "podSets": [{"name": "head", "count": 1, "template": POD_TEMPLATE}]},
        }
    kept_wl = essential_workload(wl) if wl is not None else None
    assert observe(essential_rayjob(job), kept_wl) == observe(job, wl)
    assert "rayClusterSpec" not in str(essential_rayjob(job)) and "managedFields" not in str(
        essential_rayjob(job)
    )
    if wl is not None:
        # the pod templates are not kept; a pending Workload Kueue has not tried keeps its pod sets'
        # requests (``why_queued``), nothing else of them
        assert "ray-head" not in str(kept_wl) and "rayproject" not in str(kept_wl)
        untried = not (wl.get("status") or {}).get("admission") and not (wl.get("status") or {}).get(
            "resourceRequests"
        )
        assert ("podSets" in kept_wl["spec"]) == untried


def _submitted_rayjob() -> dict:
    """A RayJob as the operator submits it (labels and annotations of ``AirflowIdentity``), as another
    tool and kubectl would have touched it too."""
    from kueue_ray.naming import QUEUE_LABEL, WAITER_ANNOTATION, AirflowIdentity

    identity = AirflowIdentity("etl", "train", "manual__1", map_index=2, try_number=1)
    job = rayjob("Suspended")
    job["metadata"] = {
        **job["metadata"],
        "namespace": "ml",
        "uid": "u-1",
        "creationTimestamp": "2026-12-02T10:00:00Z",
        "labels": {
            **identity.labels(),
            QUEUE_LABEL: "team-a",
            "kueue.x-k8s.io/priority-class": "high",
            "ray.io/originated-from-crd": "RayJob",
            "team": "a",
        },
        "annotations": {
            **identity.annotations(),
            WAITER_ANNOTATION: "etl/manual__1/wait/-1/1",
            "kubectl.kubernetes.io/last-applied-configuration": "{" + '"x": 1, ' * 500 + "}",
            "monitoring.example.com/scrape": "true",
        },
    }
    return job


def test_the_cached_rayjob_keeps_every_label_and_annotation_the_wait_reads():
    """What the hub's watch selects and keys on, the trigger's queue and watched checks, and the preemptor
    named with its DAG run (``describe_rayjob``) read the same from the cached RayJob."""
    from kueue_ray.hub.resources import RAYJOBS
    from kueue_ray.naming import QUEUE_LABEL
    from kueue_ray.narration import describe_rayjob
    from kueue_ray.trigger import _watched

    job = _submitted_rayjob()
    kept = essential_rayjob(job)

    assert RAYJOBS.selects(kept) and RAYJOBS.key_of(kept) == RAYJOBS.key_of(job)
    assert _watched(kept, "")
    assert kept["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    name = job["metadata"]["name"]
    assert (
        describe_rayjob(kept)
        == describe_rayjob(job)
        == f"RayJob ml/{name} (DAG etl, run manual__1, task train)"
    )
    identity = ("name", "namespace", "uid", "resourceVersion")
    assert {k: v for k, v in kept["metadata"].items() if k in identity} == {
        k: v for k, v in job["metadata"].items() if k in identity
    }


def test_the_cached_rayjob_drops_labels_and_annotations_nothing_reads():
    """Another tool's labels, kubectl's last-applied-configuration (a copy of the whole object) and the
    like are not kept for thousands of waiting tasks."""
    kept = essential_rayjob(_submitted_rayjob())["metadata"]
    assert "team" not in kept["labels"] and "ray.io/originated-from-crd" not in kept["labels"]
    assert set(kept["annotations"]) == {
        k for k in _submitted_rayjob()["metadata"]["annotations"] if "airflow.apache.org/" in k
    }
    assert "creationTimestamp" not in kept


def test_the_cached_workload_keeps_what_the_hub_and_the_rayservice_wait_read():
    """The job-uid label (the hub's key), the controller reference and creation time (which of a
    RayService's Workloads is its own, and the newest), the conditions' clocks; not the rest."""
    from kueue_ray.hub.resources import WORKLOADS
    from kueue_ray.rayservice.status import cluster_workload, service_workload

    wl = workload(cond("QuotaReserved", "False", "Pending", MORE_NEEDED))
    wl["status"]["conditions"][0]["observedGeneration"] = 3
    wl["metadata"] = {
        **wl["metadata"],
        "uid": "w-1",
        "creationTimestamp": "2026-12-02T10:00:01Z",
        "labels": {"kueue.x-k8s.io/job-uid": "svc-uid", "other": "x"},
        "annotations": {"example.com/note": "y"},
        "ownerReferences": [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayService",
                "name": "svc",
                "uid": "svc-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            },
        ],
    }
    kept = essential_workload(wl)
    service = {"metadata": {"name": "svc", "uid": "svc-uid"}}

    assert WORKLOADS.selects(kept) and WORKLOADS.key_of(kept) == "svc-uid"
    assert service_workload(service, [kept]) is kept
    assert cluster_workload("svc-abcde", [kept]) is None
    assert kept["metadata"]["creationTimestamp"] == "2026-12-02T10:00:01Z"
    assert kept["metadata"]["labels"] == {"kueue.x-k8s.io/job-uid": "svc-uid"}
    assert "annotations" not in kept["metadata"]
    assert kept["metadata"]["ownerReferences"] == [
        {"kind": "RayService", "name": "svc", "uid": "svc-uid", "controller": True}
    ]
    assert kept["status"]["conditions"] == [
        {k: v for k, v in wl["status"]["conditions"][0].items() if k != "observedGeneration"}
    ]


def test_cached_objects_decoded_apart_share_their_keys_and_repeated_values():
    """json's decoder makes new key strings for every document: 10,000 cached Workloads held 10,000
    "resourceUsage", "cpu", "1" and label values each (~60 bytes a string). The essential copies share
    one of each; the values a cache of one namespace repeats (the queue, the DAG, the quantities) too."""
    import json

    def decoded(name: str) -> tuple[dict, dict]:
        job = _submitted_rayjob()
        job["metadata"]["name"] = name
        wl = workload(cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved"))
        wl["status"]["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "head", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}, "count": 1}
            ],
        }
        wl["status"]["resourceRequests"] = [{"name": "head", "resources": {"cpu": "1"}}]
        return json.loads(json.dumps(job)), json.loads(json.dumps(wl))

    (job_a, wl_a), (job_b, wl_b) = decoded("a"), decoded("b")
    kept_a, kept_b = essential_rayjob(job_a)["metadata"], essential_rayjob(job_b)["metadata"]
    assert [k for k in kept_a["labels"]] == [k for k in kept_b["labels"]]
    assert all(x is y for x, y in zip(kept_a["labels"], kept_b["labels"], strict=True))
    assert all(kept_a["labels"][k] is kept_b["labels"][k] for k in kept_a["labels"])
    assert kept_a["namespace"] is kept_b["namespace"]

    usage_a, usage_b = (
        essential_workload(w)["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
        for w in (wl_a, wl_b)
    )
    (key_a, value_a), (key_b, value_b) = next(iter(usage_a.items())), next(iter(usage_b.items()))
    assert key_a is key_b and value_a is value_b
    requests_a, requests_b = (essential_workload(w)["status"]["resourceRequests"][0] for w in (wl_a, wl_b))
    assert next(iter(requests_a["resources"])) is next(iter(requests_b["resources"]))
