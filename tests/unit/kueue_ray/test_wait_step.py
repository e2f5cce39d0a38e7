"""One wait step (``kueue_ray.wait_step``) for a RayJob and for a RayService: what it tells, when it ends a
wait and with what, and which reads it acts on. Objects shaped like KubeRay v1.7 / Kueue v0.19 write them."""

from __future__ import annotations

from copy import deepcopy
from datetime import UTC, datetime, timedelta

from kueue_ray.rayservice.waiting import ServiceTarget, ServiceTimeline
from kueue_ray.timeline import Timeline
from kueue_ray.verdicts import VerdictStatus
from kueue_ray.wait_policy import WaitPolicy
from kueue_ray.wait_step import Read, WaitState, wait_step
from kueue_ray.waiting import WaitTarget

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PREEMPTED_MSG = (
    "Preempted to accommodate a workload (UID: 1c2d, JobUID: 9f8e) due to prioritization in the "
    "ClusterQueue; preemptor path: /team-a-cq; preemptee path: /team-a-cq"
)
ADMISSION = {
    "clusterQueue": "team-a-cq",
    "podSetAssignments": [{"name": "head", "count": 1, "flavors": {"cpu": "default-flavor"}}],
}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(type_: str, status: str, reason: str, message: str = "", since: float = 0) -> dict:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp(since),
    }


def rayjob(deployment: str, *, suspend: bool, version: str = "10", job_status: str = "") -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": "train-42",
            "namespace": "ray",
            "uid": "6f1c2d3e",
            "resourceVersion": version,
            "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
        },
        "spec": {"suspend": suspend, "shutdownAfterJobFinishes": True},
        "status": {"jobDeploymentStatus": deployment, "jobStatus": job_status, "failed": 0, "succeeded": 0},
    }


def workload(*conditions: dict, version: str = "20", admission: dict | None = None, **status) -> dict:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "rayjob-train-42-123ec", "namespace": "ray", "resourceVersion": version},
        "spec": {"active": True, "queueName": "team-a"},
        "status": {"conditions": list(conditions), **status},
    }
    if admission:
        body["status"]["admission"] = admission
    return body


RESERVED = cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue team-a-cq", 5)
ADMITTED = cond("Admitted", "True", "Admitted", "The workload is admitted", 5)
RUNNING = (
    rayjob("Running", suspend=False, job_status="RUNNING"),
    workload(RESERVED, ADMITTED, admission=ADMISSION),
)
PREEMPTED = (
    rayjob("Suspending", suspend=True, version="11"),
    workload(
        RESERVED,
        cond("Evicted", "True", "Preempted", PREEMPTED_MSG, 60),
        cond("Preempted", "True", "InClusterQueue", PREEMPTED_MSG, 60),
        version="21",
        admission=ADMISSION,
    ),
)
QUEUED = (
    rayjob("Suspended", suspend=True, version="8"),
    workload(
        cond("QuotaReserved", "False", "Pending", "couldn't assign flavors: 1 more needed", 0), version="18"
    ),
)


def rayjob_wait(**policy) -> tuple:
    target = WaitTarget("train-42", "ray", "6f1c2d3e", priority="prod-priority", submitted_at=stamp(0))
    kind = target.kind()
    return kind, WaitState.start(kind, WaitPolicy(**policy), Timeline())


def test_a_preempted_rayjobs_step_tells_the_preemption_naming_the_preemptor_and_keeps_waiting():
    kind, state = rayjob_wait()
    wait_step(kind, state, Read(*RUNNING), at(30))

    step = wait_step(kind, state, Read(*PREEMPTED), at(61))

    assert step.news and step.verdict is None and step.payload is None
    assert step.preemptor_uid == "9f8e"
    preemptor = {"metadata": {"name": "urgent-7", "namespace": "ray", "uid": "9f8e"}}
    line = step.transition_line(None, preemptor)
    assert line.startswith("RayJob ray/train-42: PREEMPTED")
    assert "RayJob ray/urgent-7 (Workload UID: 1c2d, JobUID: 9f8e)" in line
    assert line.endswith("[preempted 1x so far]")
    assert wait_step(kind, state, Read(*PREEMPTED), at(62)).news is False  # said once


def test_a_queued_rayjobs_transition_asks_for_its_position_in_the_rayjobs_queue():
    kind, state = rayjob_wait()

    step = wait_step(kind, state, Read(*QUEUED), at(1))

    assert step.news and step.position_in == "team-a"
    assert step.transition_line("position 2 of 5 pending in LocalQueue team-a").endswith(
        "— position 2 of 5 pending in LocalQueue team-a"
    )
    running = wait_step(kind, state, Read(*RUNNING), at(30))
    assert running.news and running.position_in is None  # a running job has no place in a queue


def test_a_read_older_than_the_one_acted_on_is_ignored():
    kind, state = rayjob_wait()
    wait_step(kind, state, Read(*PREEMPTED), at(61))
    # a watch event queued while the newer read ran: the RayJob still running, its Workload not evicted
    step = wait_step(kind, state, Read(*RUNNING), at(62))

    assert step.observation.phase.value == "PREEMPTED" and not step.news
    assert step.read.obj is PREEMPTED[0] and step.read.related is PREEMPTED[1]
    assert len(state.timeline.to_dict()["preemptions"]) == 1


def test_an_overdue_admission_is_confirmed_on_a_fresh_read_then_ends_with_the_watchdogs_verdict():
    kind, state = rayjob_wait(queue_timeout=60)

    cached = wait_step(kind, state, Read(*QUEUED), at(61))
    assert cached.verdict.status == VerdictStatus.QUEUE_TIMEOUT and cached.confirm and cached.payload is None

    fresh = wait_step(kind, state, Read(*deepcopy(QUEUED), fresh=True), at(61))  # as read again
    assert not fresh.confirm
    payload = fresh.payload
    assert payload["status"] == VerdictStatus.QUEUE_TIMEOUT and payload["reason"] == "QueueTimeout"
    assert type(payload["status"]) is str  # the event as the task log prints it says 'queue_timeout'
    assert payload["message"].startswith(
        "not admitted within queue_timeout=60s (waiting since 2026-12-01T12:00"
    )
    assert (payload["name"], payload["queue"], payload["priority"]) == ("train-42", None, "prod-priority")
    assert payload["phase"] == "QUEUED"


def test_a_wait_is_woken_for_its_next_deadline():
    kind, state = rayjob_wait(queue_timeout=60, run_timeout=100)
    assert wait_step(kind, state, Read(*QUEUED), at(15)).deadline == 45.0
    assert wait_step(kind, state, Read(*RUNNING), at(30)).deadline == 75.0  # admitted at 5s


def test_a_deleted_rayjob_ends_the_wait_saying_so():
    kind, state = rayjob_wait()
    wait_step(kind, state, Read(*RUNNING), at(30))

    step = wait_step(kind, state, Read(None, None), at(40))

    assert step.gone and not step.news
    assert step.payload["status"] == VerdictStatus.DELETED
    assert step.payload["message"] == "RayJob ray/train-42 (uid 6f1c2d3e) was deleted before it finished"


def test_a_succeeded_rayjob_ends_with_its_timeline():
    kind, state = rayjob_wait()
    wait_step(kind, state, Read(*RUNNING), at(30))
    done = rayjob("Complete", suspend=False, version="12", job_status="SUCCEEDED")
    finished = workload(RESERVED, ADMITTED, cond("Finished", "True", "Succeeded", "done", 90), version="22")

    step = wait_step(kind, state, Read(done, finished), at(90))

    assert step.payload["status"] == VerdictStatus.SUCCESS and step.payload["phase"] == "SUCCEEDED"
    assert step.payload["timeline"]["final_phase"] == "SUCCEEDED"


SERVE_CONFIG = "applications:\n  - name: forecast\n    deployments:\n      - name: Model\n"


def service(cluster: str, *, state: str, ready: str, applications: dict | None = None) -> dict:
    role = {"rayClusterName": cluster, "rayClusterStatus": {"state": state}}
    if applications is not None:
        role["applicationStatuses"] = applications
    serving = ready == "True"
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "serve", "namespace": "ray", "uid": "svc-uid", "generation": 1},
        "spec": {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": {"suspend": False}},
        "status": {
            "observedGeneration": 1,
            "activeServiceStatus": role if serving else {},
            "pendingServiceStatus": {} if serving else role,
            "conditions": [cond("Ready", ready, "NonZeroServeEndpoints" if serving else "Initializing")],
        },
    }


def cluster_workload(cluster: str, *conditions: dict, **status) -> dict:
    return {
        "metadata": {
            "name": f"raycluster-{cluster}-abcde",
            "uid": f"wl-{cluster}",
            "resourceVersion": "30",
            "ownerReferences": [{"kind": "RayCluster", "name": cluster, "uid": "rc-uid", "controller": True}],
            "creationTimestamp": stamp(0),
        },
        "spec": {"active": True},
        "status": {"conditions": list(conditions), **status},
    }


def service_wait(**policy) -> tuple:
    target = ServiceTarget(
        "serve", "ray", "svc-uid", generation=1, created=True, queue="team-a", submitted_at=stamp(0)
    )
    kind = target.kind()
    return kind, WaitState.start(kind, WaitPolicy(**policy), ServiceTimeline())


def test_a_rayservice_preempted_between_two_looks_is_told_before_its_queued_line():
    kind, state = service_wait()
    requeued = cluster_workload(
        "serve-a",
        cond("QuotaReserved", "False", "Pending", PREEMPTED_MSG, 60),
        cond("Evicted", "True", "Preempted", PREEMPTED_MSG, 60),
        cond("Preempted", "True", "InClusterQueue", PREEMPTED_MSG, 60),
        cond("Requeued", "True", "Preempted", PREEMPTED_MSG, 60),
        schedulingStats={
            "evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}]
        },
    )

    step = wait_step(
        kind, state, Read(service("serve-a", state="suspended", ready="False"), [requeued]), at(61)
    )

    assert step.lines == (
        f"RayService ray/serve: PREEMPTED (InClusterQueue): pending RayCluster serve-a: {PREEMPTED_MSG}",
    )
    assert step.news and step.position_in == "team-a" and step.verdict is None
    assert step.transition_line("position 1 of 1 pending in LocalQueue team-a").startswith(
        "RayService ray/serve: QUEUED"
    )


def test_a_serving_rayservice_ends_the_wait_with_its_active_cluster():
    kind, state = service_wait(queue_timeout=600)
    admitted = cluster_workload(
        "serve-a",
        cond("QuotaReserved", "True", "QuotaReserved", since=5),
        cond("Admitted", "True", "Admitted", since=5),
        admission={"clusterQueue": "team-a-cq", "podSetAssignments": [{"name": "head", "flavors": {}}]},
    )
    running = {"forecast": {"status": "RUNNING", "serveDeploymentStatuses": {"Model": {"status": "HEALTHY"}}}}

    step = wait_step(
        kind,
        state,
        Read(service("serve-a", state="ready", ready="True", applications=running), [admitted]),
        at(40),
    )

    assert step.news and step.position_in is None
    payload = step.payload
    assert (payload["status"], payload["phase"], payload["active_cluster"]) == (
        VerdictStatus.SUCCESS,
        "SERVING",
        "serve-a",
    )
    assert payload["created"] is True and payload["queue"] == "team-a"
