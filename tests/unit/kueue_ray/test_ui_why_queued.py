"""The Kueue tab's "why still queued": the holder of the quota named with its deploy task, the verdict,
and holders of DAGs the viewer may not read left unnamed."""

from __future__ import annotations

from kueue_ray.ui.access import Access
from kueue_ray.ui.snapshot import Snapshot
from kueue_ray.ui.views import TaskRef, task_view

from tests.unit.kueue_ray.test_ui_views import (
    DAG,
    DEPLOY,
    FIRST,
    LINKS,
    PENDING,
    READER,
    SECRET,
    T0,
    cluster,
    owned_workload,
    rayservice,
    snapshot,
)


def serving_holder(kind: str = "RayCluster", owner_uid: str = "u-cluster") -> dict:
    name = "aurora-serve-raycluster-a" if kind == "RayCluster" else "rj-running"
    held = owned_workload(f"{kind.lower()}-{name}", kind, name, owner_uid, admitted_at=3)
    held["status"]["admission"]["podSetAssignments"] = [
        {"name": "head", "flavors": {"nvidia.com/gpu": "default"}, "resourceUsage": {"nvidia.com/gpu": "1"}}
    ]
    return held


def why(
    access: Access, *, service_owner=DEPLOY, gpus: str = "2", holder_kind: str = "RayCluster"
) -> dict | None:
    base = snapshot()
    workloads = [dict(w) for w in base.workloads]
    first = next(w for w in workloads if w["metadata"]["name"] == "wl-first")
    first["status"] = {
        **first["status"],
        "resourceRequests": [{"name": "worker", "resources": {"nvidia.com/gpu": gpus}}],
    }
    service = rayservice(service_owner, active=cluster("aurora-serve-raycluster-a", "ready", "RUNNING"))
    view = task_view(
        TaskRef(DAG, FIRST.run_id, "wait"),
        rayjob_xcom={"name": "rj-first", "namespace": "ray", "uid": "u-first", "queue": "default"},
        timeline_xcom=None,
        dashboard_link=None,
        snapshot=Snapshot(
            **{
                **vars(base),
                "workloads": [
                    *workloads,
                    serving_holder(holder_kind, "u-cluster" if holder_kind == "RayCluster" else "u-running"),
                ],
                "rayservices": [service],
            }
        ),
        live_timeline=None,
        pending=PENDING,
        access=access,
        links=LINKS,
        now=T0 + 100,
    )
    return view["why_queued"]


def test_a_request_the_dags_own_service_keeps_out_names_it_and_says_waiting_will_not_admit_it():
    told = why(READER)
    assert told["stuck"]
    assert told["verdict"].startswith(
        "Will not be admitted by waiting: it needs 2 nvidia.com/gpu, and at most 0"
    )
    [holder] = told["holders"]
    assert holder["workload"] == "raycluster-aurora-serve-raycluster-a"
    assert holder["owner"] == f"DAG {DAG}, run {FIRST.run_id}, task deploy_serve"
    assert (holder["lasting"], holder["may_take"]) == (True, False)
    assert holder["priority"] == {"class": "prod", "value": 1000}


def test_a_request_that_fits_once_a_rayjob_holding_the_quota_ends_is_not_called_stuck():
    told = why(READER, gpus="1", holder_kind="RayJob")
    assert not told["stuck"]
    assert told["verdict"].startswith("Can be admitted by waiting")
    [holder] = told["holders"]
    assert holder["owner"].startswith(f"DAG {DAG}, run backfill__2026-10-01") and not holder["lasting"]


def test_a_holder_of_a_dag_the_viewer_may_not_read_is_not_named():
    told = why(READER, service_owner=SECRET)
    assert told["stuck"]
    text = repr(told)
    assert "aurora-serve" not in text and SECRET.dag_id not in text
    assert told["holders"][0]["workload"] == "a workload of a DAG you cannot read"
    # A reader of both DAGs sees it named.
    both = Access(user_name="admin", dag_ids=frozenset({DAG, SECRET.dag_id}))
    assert why(both, service_owner=SECRET)["holders"][0]["owner"].startswith(f"DAG {SECRET.dag_id}")


def starting_tab(pods):
    base = snapshot()
    rayjobs = [dict(r) for r in base.rayjobs]
    running = next(r for r in rayjobs if r["metadata"]["name"] == "rj-running")
    running["spec"] = {"suspend": False}
    running["status"] = {"jobDeploymentStatus": "Initializing", "rayClusterName": "rj-running-rc"}
    workloads = [dict(w) for w in base.workloads]
    admitted = next(w for w in workloads if w["metadata"]["name"] == "wl-running")
    admitted["status"] = {
        **admitted["status"],
        "conditions": [*admitted["status"]["conditions"], {"type": "Admitted", "status": "True"}],
    }
    starting = Snapshot(**{**vars(base), "rayjobs": rayjobs, "workloads": workloads})
    xcom = {"name": "rj-running", "namespace": "ray", "uid": "u-running", "queue": "default"}
    from kueue_ray.ui.views.rayjob import starting_cluster

    view = task_view(
        TaskRef(DAG, "backfill__2026-10-01T00:00:00+00:00", "wait"),
        rayjob_xcom=xcom,
        timeline_xcom=None,
        dashboard_link=None,
        snapshot=starting,
        live_timeline=None,
        pending=PENDING,
        access=READER,
        links=LINKS,
        now=T0 + 100,
        pods=pods,
    )
    return starting_cluster(starting, xcom), view


def test_a_starting_ray_clusters_pods_are_shown_with_the_schedulers_reason():
    message = "0/1 nodes are available: 1 node(s) had untolerated taint {maintenance: true}."
    pod = {
        "metadata": {"name": "rj-running-rc-head-x", "labels": {"ray.io/node-type": "head"}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ],
        },
    }
    cluster, view = starting_tab([pod])
    assert cluster == "rj-running-rc"
    assert view["phase"]["phase"] == "ADMITTED"
    assert view["pods"] == [
        {
            "role": "head",
            "name": "rj-running-rc-head-x",
            "phase": "Pending",
            "reason": "Unschedulable",
            "message": message,
        }
    ]
    assert view["why_queued"] is None
