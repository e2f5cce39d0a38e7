"""The status model on a MultiKueue manager: the RayJob's status mirrored from the worker that runs it, the
Workload's MultiKueue check in Kueue v0.19.2's words (``pkg/controller/admissionchecks/multikueue``)."""

from __future__ import annotations

from kueue_ray.phases import Phase
from kueue_ray.status import observe
from kueue_ray.timeline import Timeline
from kueue_ray.waiting import describe_transition

from tests.unit.kueue_ray.test_status import ADMISSION, ADMITTED, RESERVED, cond, rayjob, workload

ADMITTED_ON = 'The workload was admitted on "worker2"'
LOST = (
    'Evicted due to AdmissionCheck in Retry state: "multikueue" (Admitting remote lost, Previously: "Ready")'
)


def manager_rayjob(*args, **kwargs) -> dict:
    job = rayjob(*args, **kwargs)
    job["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    return job


def dispatched(*conditions, state="Ready", message=ADMITTED_ON, cluster="worker2"):
    wl = workload(*conditions, admission=ADMISSION, checks=[("multikueue", state, message)])
    if cluster:
        wl["status"]["clusterName"] = cluster
    return wl


def test_waiting_for_a_worker_says_so_with_the_checks_name():
    seen = observe(manager_rayjob(), dispatched(RESERVED, state="Pending", message="", cluster=None))
    assert seen.phase is Phase.AWAITING_CHECKS
    assert "multikueue (Pending; waiting for a worker cluster to admit it)" in seen.message
    assert seen.worker_cluster is None


def test_dispatched_names_the_worker_in_kueues_words_and_in_the_field():
    seen = observe(manager_rayjob(suspend=False), dispatched(RESERVED, ADMITTED))
    assert seen.phase is Phase.ADMITTED
    assert seen.message.endswith(f"; multikueue: {ADMITTED_ON}")
    assert seen.worker_cluster == "worker2"


def test_the_mirrored_running_status_runs_on_the_worker_and_the_log_line_names_it():
    job = manager_rayjob(
        "Running", "RUNNING", suspend=False, jobId="train-42-abc", rayClusterName="train-42-x"
    )
    seen = observe(job, dispatched(RESERVED, ADMITTED))
    assert (seen.phase, seen.worker_cluster) == (Phase.RUNNING, "worker2")
    line = describe_transition("default", "train-42", seen, None)
    assert "[Ray job train-42-abc on RayCluster train-42-x in worker cluster worker2]" in line


def test_a_rejected_multikueue_check_ends_the_wait_with_its_message():
    message = 'No multikueue adapter found for owner kind "ray.io/v1, Kind=RayJob", Previously: "Pending"'
    seen = observe(manager_rayjob(), dispatched(RESERVED, state="Rejected", message=message, cluster=None))
    assert seen.phase is Phase.DEACTIVATED and seen.terminal
    assert message in seen.message


def test_a_lost_worker_keeps_running_until_kueue_retries_then_queues_while_the_mirror_still_says_running():
    """The mirrored status stays Running: nothing on the manager tears a Ray cluster down, so once the quota
    is released the wait is QUEUED (the queue clock runs), not EVICTED for ever."""
    job = manager_rayjob("Running", "RUNNING", suspend=False)
    assert observe(job, dispatched(RESERVED, ADMITTED)).phase is Phase.RUNNING  # within workerLostTimeout

    evicted = cond("Evicted", "True", "AdmissionCheck", LOST)
    job["spec"]["suspend"] = True
    retried = dispatched(
        RESERVED, evicted, state="Retry", message='Admitting remote lost, Previously: "Ready"'
    )
    being = observe(job, retried)
    assert being.phase is Phase.EVICTED and being.message.startswith(LOST)
    assert "a worker out of reach says nothing until it is reachable again" in being.message

    released = dispatched(
        cond("QuotaReserved", "False", "Pending", ""), evicted, state="Pending", message="", cluster=None
    )
    del released["status"]["admission"]
    queued = observe(job, released)
    assert queued.phase is Phase.QUEUED and LOST in queued.message
    assert queued.worker_cluster is None


def test_without_multikueue_an_evicted_rayjob_still_waits_for_kuberays_teardown():
    job = rayjob("Running", "RUNNING", suspend=True)
    released = workload(
        cond("QuotaReserved", "False", "Pending", ""), cond("Evicted", "True", "Preempted", "x")
    )
    assert observe(job, released).phase is Phase.PREEMPTED


def test_the_timeline_keeps_the_worker_of_each_admission():
    timeline = Timeline()
    job = manager_rayjob("Running", "RUNNING", suspend=False)
    timeline.record(
        observe(manager_rayjob(), dispatched(RESERVED, state="Pending", cluster=None, message="")), 0
    )
    timeline.record(observe(job, dispatched(RESERVED, ADMITTED, cluster="worker1", message="")), 10)
    again = Timeline.from_dict(timeline.to_dict())
    assert again.worker_cluster == "worker1"
    assert [a["worker_cluster"] for a in again.admissions] == ["worker1"]


def test_the_pods_of_a_ray_cluster_on_a_worker_are_not_looked_for_on_the_manager():
    from kueue_ray.narration import Story

    job = manager_rayjob("Initializing", suspend=False, rayClusterName="train-42-x")
    seen = observe(job, dispatched(RESERVED, ADMITTED))
    assert seen.phase is Phase.ADMITTED
    assert Story().pods_check_in(seen, 0.0) is None
    local = observe(
        rayjob("Initializing", suspend=False, rayClusterName="train-42-x"),
        dispatched(RESERVED, ADMITTED, cluster=None, message=""),
    )
    assert Story().pods_check_in(local, 0.0) == 0.0


def test_while_a_lost_workers_rayjob_holds_the_quota_evicted_the_run_clock_still_runs():
    """Kueue releases the manager's quota only once the mirrored status stops being active, which a lost
    worker cannot tell: run_timeout ends such a wait instead of nothing ever ending it."""
    from datetime import UTC, datetime, timedelta

    from kueue_ray.verdicts import VerdictStatus
    from kueue_ray.wait_policy import WaitPolicy
    from kueue_ray.waiting import Watchdog

    t0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
    job = manager_rayjob("Running", "RUNNING", suspend=False)
    dog = Watchdog(WaitPolicy(run_timeout=600, max_pods_ready_evictions=None), t0)
    assert dog.check(observe(job, dispatched(RESERVED, ADMITTED)), None, t0) is None
    job["spec"]["suspend"] = True
    held = observe(
        job, dispatched(RESERVED, cond("Evicted", "True", "AdmissionCheck", LOST), state="Pending")
    )
    assert held.phase is Phase.EVICTED
    assert dog.check(held, None, t0 + timedelta(seconds=300)) is None
    verdict = dog.check(held, None, t0 + timedelta(seconds=601))
    assert verdict is not None and verdict.status is VerdictStatus.RUN_TIMEOUT
    assert "still EVICTED 601s after its last admission" in verdict.message

    # without MultiKueue an eviction stops the run clock, as before (KubeRay tears the cluster down)
    evicted = cond("Evicted", "True", "AdmissionCheck", LOST)
    local = observe(
        rayjob("Running", "RUNNING", suspend=True), workload(RESERVED, evicted, admission=ADMISSION)
    )
    assert local.phase is Phase.EVICTED
    plain = Watchdog(WaitPolicy(run_timeout=600, max_pods_ready_evictions=None), t0)
    assert plain.check(local, None, t0 + timedelta(seconds=601)) is None


def test_what_a_watch_cache_keeps_of_a_manager_rayjob_and_workload_observes_the_same():
    """The hub keeps only ``essential_*``: ``spec.managedBy`` and ``status.clusterName`` must survive."""
    from kueue_ray.kube.essential import essential_rayjob, essential_workload

    job = manager_rayjob("Running", "RUNNING", suspend=True)
    wl = dispatched(RESERVED, cond("Evicted", "True", "AdmissionCheck", LOST), message="")
    kept = observe(essential_rayjob(job), essential_workload(wl))
    assert kept == observe(job, wl)
    assert (kept.multikueue, kept.worker_cluster) == (True, "worker2")
