"""What the Kueue pages show, from cluster objects and what the user may read (no Airflow, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime

from kueue_ray.links import kueue_tab_path
from kueue_ray.naming import AirflowIdentity
from kueue_ray.ui.access import Access
from kueue_ray.ui.snapshot import Health, PendingRead, Snapshot
from kueue_ray.ui.views import HIDDEN_OWNER, Links, TaskRef, queues_view, task_view

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC).timestamp()
DAG = "text_classifier_finetune"
OTHER = "secret_pipeline"
LINKS = Links(root="/airflow")


def iso(offset: float) -> str:
    return datetime.fromtimestamp(T0 + offset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def identity(dag_id: str, run_id: str, task_id: str = "submit") -> AirflowIdentity:
    return AirflowIdentity(dag_id=dag_id, task_id=task_id, run_id=run_id)


def rayjob(name: str, uid: str, owner: AirflowIdentity | None, *, queue: str = "default") -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": "ray",
            "uid": uid,
            "creationTimestamp": iso(0),
            "labels": {"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": "dev-priority"},
            "annotations": owner.annotations() if owner else {},
        },
        "spec": {"suspend": True},
        "status": {"jobDeploymentStatus": "Suspended"},
    }


def workload(
    name: str,
    job_uid: str,
    *,
    admitted_at: float | None = None,
    priority=("dev-priority", 100),
    owner_kind: str = "RayJob",
) -> dict:
    conditions = []
    status: dict = {"conditions": conditions}
    if admitted_at is None:
        conditions.append(
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "insufficient unused quota",
            }
        )
    else:
        conditions.append({"type": "QuotaReserved", "status": "True", "lastTransitionTime": iso(admitted_at)})
        status["admission"] = {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {"name": "head", "resourceUsage": {"cpu": "1", "memory": "8G"}},
                {"name": "workers", "resourceUsage": {"cpu": "2500m", "memory": "7812500Ki"}},
            ],
        }
    return {
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": "ray",
            "labels": {"kueue.x-k8s.io/job-uid": job_uid},
            "ownerReferences": [
                {"kind": owner_kind, "name": name.removeprefix("wl-"), "uid": job_uid, "controller": True}
            ],
            "creationTimestamp": iso(0),
        },
        "spec": {
            "podSets": [{"name": "head", "count": 1, "template": pod(cpu="1", memory="2Gi")}],
            "queueName": "default",
            "priority": priority[1],
            "priorityClassRef": {"name": priority[0], "kind": "WorkloadPriorityClass"},
        },
        "status": status,
    }


def pod(**requests: str) -> dict:
    return {"spec": {"containers": [{"name": "ray", "resources": {"requests": requests}}]}}


CLUSTER_QUEUE = {
    "metadata": {"name": "cluster-queue"},
    "spec": {
        "cohortName": "shared",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "default",
                        "resources": [
                            {
                                "name": "cpu",
                                "nominalQuota": "2500m",
                                "borrowingLimit": "2500m",
                                "lendingLimit": "500m",
                            },
                            {"name": "nvidia.com/gpu", "nominalQuota": 1},
                        ],
                    }
                ],
            }
        ],
    },
    "status": {
        "pendingWorkloads": 4,
        "admittedWorkloads": 1,
        "flavorsUsage": [
            {"name": "default", "resources": [{"name": "cpu", "total": "3750m", "borrowed": "1250m"}]},
        ],
        "flavorsReservation": [{"name": "default", "resources": [{"name": "cpu", "total": "3750m"}]}],
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready"}],
    },
}
LOCAL_QUEUE = {
    "metadata": {"name": "default", "namespace": "ray"},
    "spec": {"clusterQueue": "cluster-queue"},
    "status": {"pendingWorkloads": 4, "admittedWorkloads": 1},
}
RUNNING = identity(DAG, "backfill__2026-10-01T00:00:00+00:00")
FIRST = identity(DAG, "backfill__2026-10-02T00:00:00+00:00")
SECRET = identity(OTHER, "manual__1")
THIRD = identity(DAG, "backfill__2026-10-03T00:00:00+00:00")


def pending_entry(name: str, job_uid: str, position: int, priority: int = 100, kind: str = "RayJob") -> dict:
    refs = [{"apiVersion": "ray.io/v1", "kind": kind, "name": name.removeprefix("wl-"), "uid": job_uid}]
    return {
        "metadata": {"name": name, "namespace": "ray", "creationTimestamp": iso(0), "ownerReferences": refs},
        "priority": priority,
        "localQueueName": "default",
        "positionInClusterQueue": position,
        "positionInLocalQueue": position,
    }


def snapshot(healthy: bool = True) -> Snapshot:
    rayjobs = [
        rayjob("rj-running", "u-running", RUNNING),
        rayjob("rj-first", "u-first", FIRST),
        rayjob("rj-secret", "u-secret", SECRET),
        rayjob("rj-third", "u-third", THIRD),
    ]
    workloads = [
        workload("wl-running", "u-running", admitted_at=5),
        workload("wl-first", "u-first"),
        workload("wl-secret", "u-secret", priority=("prod-priority", 1000)),
        workload("wl-third", "u-third"),
        workload("wl-batch-job", "u-plain-job", admitted_at=7, owner_kind="Job"),
    ]
    health = Health(True, T0 + 100, None, None) if healthy else Health(False, T0 + 40, T0 + 45, "refused")
    return Snapshot(
        cluster_queues=[CLUSTER_QUEUE],
        local_queues=[LOCAL_QUEUE],
        workloads=workloads,
        rayjobs=rayjobs,
        identities={"u-running": RUNNING, "u-first": FIRST, "u-secret": SECRET, "u-third": THIRD},
        namespaces=["ray"],
        health=health,
        version=7,
    )


PENDING = PendingRead(
    summary={
        "items": [
            pending_entry("wl-secret", "u-secret", 0, 1000),
            pending_entry("wl-first", "u-first", 1),
            pending_entry("wl-third", "u-third", 2),
            pending_entry("wl-someone-elses-job", "u-someone", 3, kind="Job"),
        ]
    },
    fetched_at=T0 + 99,
)
READER = Access(user_name="ops", dag_ids=frozenset({DAG}))


def test_pending_workloads_keep_kueues_order_and_positions_and_unreadable_ones_are_only_counted():
    view = queues_view(snapshot(), {"cluster-queue": PENDING}, READER, LINKS, now=T0 + 100)
    [queue] = view["cluster_queues"]
    pending = queue["pending"]
    assert [(item["position"], item["owner"].get("run_id")) for item in pending["items"]] == [
        (2, FIRST.run_id),
        (3, THIRD.run_id),
        (4, None),
    ]
    # A workload Airflow did not submit is a row of its own, labelled, never a DAG's.
    assert pending["items"][2]["owner"]["not_airflow"] is True
    assert pending["items"][2]["owner"]["description"] == "not from Airflow: Job ray/someone-elses-job"
    # The unreadable DAG's workload: counted, with what it asks for, nothing else.
    assert pending["hidden"] == 1 and pending["total"] == 4
    assert pending["hidden_requests"] == [
        {"resource": "cpu", "amount": "1"},
        {"resource": "memory", "amount": "2Gi"},
    ]
    assert pending["items"][0]["waiting_seconds"] == 100
    assert pending["items"][0]["owner"]["kueue_tab_url"] == "/airflow" + kueue_tab_path(
        DAG, FIRST.run_id, "submit"
    )
    assert "secret" not in str(view).replace("wl-secret", "")  # nothing of the unreadable DAG but counts
    assert OTHER not in str(view)


def test_admitted_workloads_have_their_age_and_foreign_ones_are_counted():
    view = queues_view(snapshot(), {"cluster-queue": PENDING}, READER, LINKS, now=T0 + 100)
    admitted = view["cluster_queues"][0]["admitted"]
    assert [(item["workload"], item["age_seconds"]) for item in admitted["items"]] == [
        ("wl-running", 95),
        ("wl-batch-job", 93),
    ]
    assert admitted["items"][0]["priority"] == {"class": "dev-priority", "value": 100}
    assert admitted["hidden"] == 0
    [plain] = [item for item in admitted["items"] if item["owner"].get("not_airflow")]
    assert plain["workload"] == "wl-batch-job"
    assert plain["owner"]["description"] == "not from Airflow: Job ray/batch-job"


def test_another_deployments_workloads_are_named_as_such_and_never_linked():
    """Prod's page, with staging's RayJob of the same DAG and run id queued and running beside prod's."""
    prod = Links(root="/airflow", deployment="prod")
    staging_run = AirflowIdentity(DAG, "submit", RUNNING.run_id, deployment="staging")
    staging_queued = AirflowIdentity(DAG, "submit", FIRST.run_id, deployment="staging")
    ours = AirflowIdentity(DAG, "submit", THIRD.run_id, deployment="prod")
    shot = snapshot()
    shot.identities.update({"u-running": staging_run, "u-first": staging_queued, "u-third": ours})
    view = queues_view(shot, {"cluster-queue": PENDING}, READER, prod, now=T0 + 100)
    [queue] = view["cluster_queues"]
    owners = [item["owner"] for item in queue["pending"]["items"] + queue["admitted"]["items"]]
    foreign = [o for o in owners if "foreign_deployment" in o]
    assert foreign == [
        {"foreign_deployment": "staging", "description": "another Airflow: staging"},
        {"foreign_deployment": "staging", "description": "another Airflow: staging"},
    ]
    assert [o["run_id"] for o in owners if "run_id" in o] == [THIRD.run_id], "only prod's own is linked"


def test_quota_rows_show_usage_against_nominal_and_the_borrowing_and_lending_limits():
    view = queues_view(snapshot(), {}, READER, LINKS, now=T0 + 100)
    queue = view["cluster_queues"][0]
    assert queue["cohort"] == "shared"
    [cohort] = view["cohorts"]
    assert (cohort["name"], cohort["cluster_queues"]) == ("shared", ["cluster-queue"])
    assert cohort["members"][0]["usage"][0] == {"usage": "3.75", "nominal": "2.5", "borrowed": "1.25"}
    # The priority classes the cluster's Workloads carry, lowest first.
    assert queue["preemption_words"] == [
        "dev-priority work here is never preempted.",
        "prod-priority work here is never preempted.",
    ]
    cpu, gpu = queue["quota"]
    assert (cpu["usage"], cpu["nominal"], cpu["borrowing_limit"], cpu["lending_limit"], cpu["borrowed"]) == (
        "3.75",
        "2.5",
        "2.5",
        "0.5",
        "1.25",
    )
    # Bars in percent of nominal + borrowing limit (5 CPU): used 75 %, nominal at 50 %, lendable from 40 %.
    assert cpu["bar"] == {
        "usage_pct": 75.0,
        "reserved_pct": 75.0,
        "nominal_pct": 50.0,
        "lendable_from_pct": 40.0,
    }
    assert (gpu["usage"], gpu["nominal"], gpu["borrowing_limit"]) == ("0", "1", None)
    assert queue["pending"]["available"] is False  # no visibility read given


def test_a_user_who_reads_every_dag_sees_every_airflow_workload():
    everyone = Access(user_name="admin", dag_ids=frozenset({DAG, OTHER}))
    pending = queues_view(snapshot(), {"cluster-queue": PENDING}, everyone, LINKS, now=T0 + 100)[
        "cluster_queues"
    ][0]["pending"]
    assert [item["position"] for item in pending["items"]] == [1, 2, 3, 4]
    assert pending["items"][0]["priority"] == {"class": "prod-priority", "value": 1000}
    assert pending["hidden"] == 0


def test_an_unreachable_cluster_is_reported_with_the_age_of_the_state_shown():
    view = queues_view(snapshot(healthy=False), {}, READER, LINKS, now=T0 + 100)
    assert view["cluster"]["reachable"] is False
    assert view["cluster"]["synced_at"] == datetime.fromtimestamp(T0 + 40, UTC).isoformat()
    assert view["cluster"]["error"] == "refused"
    assert view["cluster_queues"][0]["name"] == "cluster-queue"  # the last known state is still shown


def preempted_timeline(preemptor_uid: str) -> dict:
    message = f"Preempted to accommodate a workload (UID: w, JobUID: {preemptor_uid}) due to prioritization"
    return {
        "transitions": [
            {"at": iso(0), "phase": "QUEUED", "reason": "", "message": ""},
            {"at": iso(5), "phase": "RUNNING", "reason": "", "message": ""},
            {"at": iso(50), "phase": "PREEMPTED", "reason": "Preempted", "message": message},
            {"at": iso(55), "phase": "QUEUED", "reason": "Pending", "message": ""},
        ],
        "preemption_count": 1,
    }


def tab(access: Access, timeline: dict, **kwargs) -> dict:
    return task_view(
        TaskRef(DAG, FIRST.run_id, "wait"),
        rayjob_xcom={"name": "rj-first", "namespace": "ray", "uid": "u-first", "queue": "default"},
        timeline_xcom=kwargs.get("timeline_xcom"),
        dashboard_link=None,
        snapshot=snapshot(),
        live_timeline=timeline,
        pending=PENDING,
        access=access,
        links=LINKS,
        now=T0 + 100,
    )


def test_the_tab_shows_the_rayjob_its_queues_priority_phase_and_position():
    view = tab(READER, preempted_timeline("u-running"))
    assert view["rayjob"]["workload"] == "wl-first"
    assert (view["rayjob"]["local_queue"], view["rayjob"]["cluster_queue"]) == ("default", "cluster-queue")
    assert view["rayjob"]["priority"] == {"class": "dev-priority", "value": 100}
    assert view["phase"]["phase"] == "QUEUED" and view["phase"]["words"].startswith("Queued")
    assert view["position"] == {
        "in_cluster_queue": 2,
        "in_local_queue": 2,
        "pending_in_cluster_queue": 4,
        "fetched_at": datetime.fromtimestamp(T0 + 99, UTC).isoformat(),
    }
    assert view["links"]["queue"] == "/airflow/plugin/kueue-queues/airflow/kueue/queues#cq-cluster-queue"
    assert view["timeline"]["source"] == "live"
    assert [s["kind"] for s in view["timeline"]["spans"]] == ["queued", "running", "preempted", "requeued"]


def test_a_preemptor_is_named_only_to_users_who_may_read_its_dag():
    readable = tab(READER, preempted_timeline("u-running"))["timeline"]["spans"][2]["preemptor"]
    assert readable["known"] and readable["run_id"] == RUNNING.run_id
    assert readable["kueue_tab_url"] == "/airflow" + kueue_tab_path(DAG, RUNNING.run_id, "submit")
    hidden = tab(READER, preempted_timeline("u-secret"))["timeline"]["spans"][2]["preemptor"]
    assert hidden == {"known": False, "description": HIDDEN_OWNER}
    assert OTHER not in str(tab(READER, preempted_timeline("u-secret")))


def test_the_preemptors_tab_lists_whom_it_preempted_under_the_same_reading_rule():
    """The prod run (u-first here) preempted a readable dev run and one of a DAG the user may not read."""
    shot = snapshot()
    at = T0 + 50
    shot.preempted_by["u-first"] = [
        {"job_uid": "u-running", "at": at, "reason": "InClusterQueue", "message": "Preempted ..."},
        {"job_uid": "u-secret", "at": at + 1, "reason": "InClusterQueue", "message": "Preempted ..."},
    ]
    view = task_view(
        TaskRef(DAG, FIRST.run_id, "submit"),
        rayjob_xcom={"name": "rj-first", "namespace": "ray", "uid": "u-first", "queue": "default"},
        timeline_xcom=None,
        dashboard_link=None,
        snapshot=shot,
        live_timeline=None,
        pending=PENDING,
        access=READER,
        links=LINKS,
        now=T0 + 100,
    )
    readable, hidden = view["preempted"]
    assert readable["at"] == datetime.fromtimestamp(at, UTC).isoformat()
    assert readable["victim"]["description"] == f"DAG {DAG}, run {RUNNING.run_id}, task submit"
    assert readable["victim"]["kueue_tab_url"] == "/airflow" + kueue_tab_path(DAG, RUNNING.run_id, "submit")
    assert hidden["victim"] == {"description": HIDDEN_OWNER}
    assert OTHER not in str(view)
    assert tab(READER, None)["preempted"] == []  # it preempted nobody


def test_the_tasks_own_timeline_xcom_wins_over_the_live_one_once_written():
    finished = preempted_timeline("u-running")
    finished["transitions"].append({"at": iso(90), "phase": "SUCCEEDED", "reason": "", "message": ""})
    view = tab(READER, preempted_timeline("u-running"), timeline_xcom=finished)
    assert view["timeline"]["source"] == "xcom"
    assert view["timeline"]["spans"][-1]["kind"] == "finished"


def test_a_task_without_a_rayjob_says_so():
    view = task_view(
        TaskRef(DAG, FIRST.run_id, "report"),
        rayjob_xcom=None,
        timeline_xcom=None,
        dashboard_link=None,
        snapshot=snapshot(),
        live_timeline=None,
        pending=None,
        access=READER,
        links=LINKS,
        now=T0,
    )
    assert view["rayjob"] is None and "has not submitted" in view["message"]


DEPLOY = identity(DAG, FIRST.run_id, "deploy_serve")
LATER = identity(DAG, THIRD.run_id, "deploy_serve")


def rayservice(owner: AirflowIdentity, *, active: dict | None = None, pending: dict | None = None) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": "aurora-serve",
            "namespace": "ray",
            "uid": "u-svc",
            "generation": 1,
            "labels": {"kueue.x-k8s.io/queue-name": "default", "kueue.x-k8s.io/priority-class": "prod"},
            "annotations": owner.annotations(),
        },
        "spec": {"serveConfigV2": "applications:\n  - name: forecast\n    import_path: m:app\n"},
        "status": {
            "observedGeneration": 1,
            "activeServiceStatus": active or {},
            "pendingServiceStatus": pending or {},
        },
    }


def owned_workload(
    name: str, kind: str, owner_name: str, uid: str, *, admitted_at: float | None = None
) -> dict:
    made = workload(name, uid, admitted_at=admitted_at, priority=("prod", 1000))
    made["metadata"]["ownerReferences"] = [{"kind": kind, "name": owner_name, "uid": uid, "controller": True}]
    made["status"]["conditions"].append(
        {"type": "Admitted", "status": "True" if admitted_at is not None else "False"}
    )
    return made


def cluster(name: str, state: str, app_status: str | None = None) -> dict:
    apps = {"forecast": {"status": app_status, "serveDeploymentStatuses": {}}} if app_status else {}
    return {"rayClusterName": name, "rayClusterStatus": {"state": state}, "applicationStatuses": apps}


def deploy_tab(
    services: list[dict], workloads: list[dict], pending: PendingRead | None = None, **xcom
) -> dict:
    base = snapshot()
    return task_view(
        TaskRef(DAG, FIRST.run_id, "deploy_serve"),
        rayjob_xcom=None,
        timeline_xcom=None,
        dashboard_link=None,
        snapshot=Snapshot(**{**vars(base), "workloads": base.workloads + workloads, "rayservices": services}),
        live_timeline=None,
        pending=pending,
        access=READER,
        links=LINKS,
        now=T0 + 100,
        rayservice_xcom={
            "name": "aurora-serve",
            "namespace": "ray",
            "uid": "u-svc",
            "queue": "default",
            "priority": "prod",
            **xcom,
        },
    )


def test_a_queued_deploy_task_shows_its_rayservices_workload_queues_priority_and_position():
    service = rayservice(DEPLOY, active=cluster("aurora-serve-raycluster-a", "suspended"))
    queued = owned_workload("rayservice-aurora-serve-1", "RayService", "aurora-serve", "u-svc")
    read = PendingRead(
        summary={
            "items": [
                pending_entry("wl-secret", "u-secret", 0),
                pending_entry(queued["metadata"]["name"], None, 1),
            ]
        },
        fetched_at=T0 + 99,
    )
    view = deploy_tab([service], [queued], read)
    shown = view["rayservice"]
    assert view["rayjob"] is None and shown["exists"]
    assert (shown["workload"], shown["admitted_by"]) == ("rayservice-aurora-serve-1", "service")
    assert (shown["local_queue"], shown["cluster_queue"]) == ("default", "cluster-queue")
    assert shown["priority"] == {"class": "prod", "value": 1000}
    assert (shown["active_cluster"], shown["pending_cluster"]) == ("aurora-serve-raycluster-a", None)
    assert view["phase"]["phase"] == "QUEUED" and view["phase"]["words"].startswith("Queued")
    assert "insufficient unused quota" in view["phase"]["message"]
    assert view["position"]["in_cluster_queue"] == 2 and view["position"]["pending_in_cluster_queue"] == 2
    assert view["links"]["queue"] == "/airflow/plugin/kueue-queues/airflow/kueue/queues#cq-cluster-queue"


def test_an_upgrade_shows_the_pending_clusters_workload_while_the_active_one_serves():
    service = rayservice(
        DEPLOY,
        active=cluster("aurora-serve-raycluster-a", "ready", "RUNNING"),
        pending=cluster("aurora-serve-raycluster-b", "suspended"),
    )
    old = owned_workload("raycluster-a-1", "RayCluster", "aurora-serve-raycluster-a", "u-a", admitted_at=1)
    new = owned_workload("raycluster-b-1", "RayCluster", "aurora-serve-raycluster-b", "u-b", admitted_at=60)
    view = deploy_tab([service], [old, new], PENDING)
    shown = view["rayservice"]
    assert (shown["workload"], shown["admitted_by"]) == ("raycluster-b-1", "cluster")
    assert (shown["active_cluster"], shown["pending_cluster"]) == (
        "aurora-serve-raycluster-a",
        "aurora-serve-raycluster-b",
    )
    assert view["phase"]["phase"] == "ADMITTED" and view["phase"]["words"].startswith("Admitted")
    assert "RayCluster aurora-serve-raycluster-a keeps serving" in view["phase"]["message"]
    assert view["position"] is None


def test_a_deploy_kuberay_has_not_acted_on_yet_is_not_shown_serving_on_the_old_cluster():
    """Right after the deploy task rewrote the spec, the old cluster still serves and is Ready: the tab
    judges by the generation and the cluster the task recorded, as its wait does."""
    service = rayservice(DEPLOY, active=cluster("aurora-serve-raycluster-a", "ready", "RUNNING"))
    service["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "RunningServeApps"}]
    service["metadata"]["generation"] = 2
    before = deploy_tab([service], [])
    assert before["phase"]["phase"] == "SERVING", "without what the task recorded, the old cluster counts"
    view = deploy_tab([service], [], generation=2, switch_from="aurora-serve-raycluster-a")
    assert view["phase"]["phase"] != "SERVING", view["phase"]
    assert "generation 2" in view["phase"]["message"], view["phase"]


def test_a_serving_rayservice_upgraded_by_a_later_run_names_that_run():
    service = rayservice(LATER, active=cluster("aurora-serve-raycluster-b", "ready", "RUNNING"))
    service["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "RunningServeApps"}]
    view = deploy_tab([service], [])
    assert view["phase"]["phase"] == "SERVING" and view["phase"]["words"].startswith("Serving")
    assert view["rayservice"]["applications"] == {"forecast": "RUNNING"}
    assert view["rayservice"]["now_deployed_by"]["run_id"] == LATER.run_id


def test_a_deleted_or_recreated_rayservice_shows_what_the_task_recorded():
    recreated = rayservice(DEPLOY, active=cluster("aurora-serve-raycluster-z", "ready", "RUNNING"))
    recreated["metadata"]["uid"] = "u-someone-else"
    recorded = {
        "final_phase": "SERVING",
        "queued_seconds": 12.5,
        "starting_seconds": 30.0,
        "preemption_count": 1,
    }
    view = deploy_tab([recreated], [], timeline=recorded, active_cluster="aurora-serve-raycluster-a")
    assert not view["rayservice"]["exists"]
    assert view["rayservice"]["active_cluster"] == "aurora-serve-raycluster-a"
    assert view["phase"]["words"].startswith("Serving") and "no longer exists" in view["phase"]["words"]
    assert (view["timeline"]["source"], view["timeline"]["preemption_count"]) == ("xcom", 1)


def test_a_deploy_tasks_recorded_timeline_is_drawn_as_spans_like_a_rayjobs():
    service = rayservice(DEPLOY, active=cluster("aurora-serve-raycluster-b", "ready", "RUNNING"))
    recorded = {
        "submitted_at": iso(0),
        "admissions": [{"at": iso(10), "cluster": "a"}, {"at": iso(40), "cluster": "b"}],
        "preemptions": [{"at": iso(25), "cluster": "a", "message": "Preempted to accommodate a workload"}],
        "serving_at": T0 + 70,
        "finished_at": T0 + 70,
        "final_phase": "SERVING",
        "queued_seconds": 25.0,
        "starting_seconds": 45.0,
        "preemption_count": 1,
    }
    spans = deploy_tab([service], [], timeline=recorded)["timeline"]["spans"]
    assert [(s["kind"], s["duration_seconds"]) for s in spans] == [
        ("queued", 10),
        ("admitted", 15),
        ("preempted", 0),
        ("requeued", 15),
        ("admitted", 30),
        ("finished", 0),
    ]
    assert spans[2]["message"] == "Preempted to accommodate a workload"
    assert spans[-1]["phase"] == "SERVING" and spans[-1]["label"] == "Finished waiting: serving"


def test_a_waiting_deploy_tasks_spans_come_from_its_workload_until_it_records_its_own():
    service = rayservice(DEPLOY, active=cluster("aurora-serve-raycluster-a", "suspended"))
    queued = owned_workload("rayservice-aurora-serve-1", "RayService", "aurora-serve", "u-svc")
    view = deploy_tab([service], [queued])
    assert view["timeline"]["source"] == "live"
    [span] = view["timeline"]["spans"]
    assert (span["kind"], span["ongoing"], span["duration_seconds"]) == ("queued", True, 100)


SERVING_DAG = "aurora_finetune_and_serve"
DEPLOYED = AirflowIdentity(SERVING_DAG, "deploy_serve", "scheduled__2026-12-01T00:00:00+00:00")
UPGRADING = AirflowIdentity(SERVING_DAG, "deploy_serve", "manual__2026-12-02T09:00:00+00:00")


def cluster_of_service(name: str, uid: str, service_uid: str) -> dict:
    """A RayCluster KubeRay made for RayService ``aurora``: owned by it (its annotations are in the cache's
    identities, as KubeRay copies the RayService's)."""
    return {
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": "ray",
            "uid": uid,
            "ownerReferences": [
                {"kind": "RayService", "name": "aurora", "uid": service_uid, "controller": True}
            ],
        },
    }


def serving_snapshot() -> Snapshot:
    """Aurora during an upgrade: the scheduled run's cluster serves (admitted, 2 GPUs), the manual run's
    new cluster waits for quota (4 GPUs); Kueue admits each RayCluster through a Workload of its own."""
    service = {
        "kind": "RayService",
        "metadata": {
            "name": "aurora",
            "namespace": "ray",
            "uid": "u-svc",
            "annotations": UPGRADING.annotations(),
        },
        "status": {
            "activeServiceStatus": {"rayClusterName": "aurora-old"},
            "pendingServiceStatus": {"rayClusterName": "aurora-new"},
        },
    }
    serving = workload("wl-aurora-old", "u-old", admitted_at=5, owner_kind="RayCluster")
    serving["status"]["admission"]["podSetAssignments"] = [
        {"name": "head", "resourceUsage": {"cpu": "4", "memory": "16Gi"}},
        {"name": "gpu", "resourceUsage": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "2"}},
    ]
    waiting = workload("wl-aurora-new", "u-new", owner_kind="RayCluster")
    waiting["spec"]["podSets"] = [
        {"name": "head", "count": 1, "template": pod(cpu="4", memory="16Gi")},
        {"name": "gpu", "count": 4, "template": pod(**{"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"})},
    ]
    return Snapshot(
        cluster_queues=[CLUSTER_QUEUE],
        local_queues=[LOCAL_QUEUE],
        workloads=[serving, waiting],
        rayjobs=[],
        rayservices=[service],
        rayclusters=[
            cluster_of_service("aurora-old", "u-old", "u-svc"),
            cluster_of_service("aurora-new", "u-new", "u-svc"),
        ],
        identities={"u-svc": UPGRADING, "u-old": DEPLOYED, "u-new": UPGRADING},
        namespaces=["ray"],
        health=Health(True, T0 + 100, None, None),
        version=3,
    )


SERVING_PENDING = PendingRead(
    summary={"items": [pending_entry("wl-aurora-new", "u-new", 0, kind="RayCluster")]}, fetched_at=T0 + 99
)


def test_a_rayservices_cluster_workloads_are_linked_to_the_deploy_task_of_the_run_that_made_each():
    reader = Access(user_name="ops", dag_ids=frozenset({SERVING_DAG}))
    view = queues_view(serving_snapshot(), {"cluster-queue": SERVING_PENDING}, reader, LINKS, now=T0 + 100)
    [queue] = view["cluster_queues"]
    [admitted] = queue["admitted"]["items"]
    [pending] = queue["pending"]["items"]
    # During the upgrade the serving cluster is still the scheduled run's, the new one the manual run's.
    assert (admitted["owner"]["run_id"], admitted["owner"]["task_id"]) == (DEPLOYED.run_id, "deploy_serve")
    assert admitted["owner"]["object"] == {
        "kind": "RayCluster",
        "name": "aurora-old",
        "rayservice": "aurora",
        "role": "active",
    }
    assert admitted["owner"]["kueue_tab_url"] == "/airflow" + kueue_tab_path(
        SERVING_DAG, DEPLOYED.run_id, "deploy_serve"
    )
    assert (pending["owner"]["run_id"], pending["owner"]["object"]["role"]) == (UPGRADING.run_id, "pending")
    # What each asks for, in the quota's units: admitted usage, or the pending pod sets' total.
    assert admitted["requests"] == [
        {"resource": "cpu", "amount": "20"},
        {"resource": "memory", "amount": "144Gi"},
        {"resource": "nvidia.com/gpu", "amount": "2"},
    ]
    assert pending["requests"] == [
        {"resource": "cpu", "amount": "36"},
        {"resource": "memory", "amount": "272Gi"},
        {"resource": "nvidia.com/gpu", "amount": "4"},
    ]
    assert queue["pending"]["hidden"] == queue["admitted"]["hidden"] == 0


def test_a_rayservices_cluster_workloads_are_counted_with_their_requests_for_other_users():
    view = queues_view(serving_snapshot(), {"cluster-queue": SERVING_PENDING}, READER, LINKS, now=T0 + 100)
    [queue] = view["cluster_queues"]
    assert queue["admitted"]["items"] == [] and queue["pending"]["items"] == []
    assert queue["admitted"]["hidden"] == queue["pending"]["hidden"] == 1
    assert queue["pending"]["hidden_requests"][-1] == {"resource": "nvidia.com/gpu", "amount": "4"}
    assert "aurora" not in str(view) and SERVING_DAG not in str(view)


def test_a_rayservices_admitted_clusters_show_the_services_phase():
    reader = Access(user_name="ops", dag_ids=frozenset({SERVING_DAG}))

    def admitted_phase(snap: Snapshot) -> str | None:
        view = queues_view(snap, {"cluster-queue": SERVING_PENDING}, reader, LINKS, now=T0 + 100)
        [row] = view["cluster_queues"][0]["admitted"]["items"]
        return row["phase"]

    upgrading = serving_snapshot()
    # The cluster an upgrade replaces serves while the RayService is Ready; nothing is claimed otherwise.
    assert admitted_phase(upgrading) is None
    upgrading.rayservices[0]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    assert admitted_phase(upgrading) == "SERVING"
    # Once the new cluster is admitted it is the one the service is admitted through: the service's phase.
    [old, new] = upgrading.workloads
    new["status"]["admission"] = {"clusterQueue": "cluster-queue", "podSetAssignments": []}
    new["status"]["conditions"] = [
        {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-12-04T00:00:00Z"},
        {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-04T00:00:00Z"},
    ]
    old["status"]["admission"]["clusterQueue"] = "another-queue"
    assert admitted_phase(upgrading) == "ADMITTED"


def test_admitted_requests_are_kueues_usage_in_binary_units_not_kubernetes_raw_ones():
    view = queues_view(snapshot(), {}, READER, LINKS, now=T0 + 100)
    [running, _] = view["cluster_queues"][0]["admitted"]["items"]
    # 1 + 2.5 CPU; 8G + 7812500Ki (8G again) of memory, read as Gi.
    assert running["requests"] == [
        {"resource": "cpu", "amount": "3.5"},
        {"resource": "memory", "amount": "14.9Gi"},
    ]


def test_the_holders_module_examples_hold():
    import doctest

    from kueue_ray.ui.views import holders

    assert doctest.testmod(holders).failed == 0
