"""The worker cluster of a workload Kueue's MultiKueue dispatched, on the queues page and the Kueue tab:
read from the manager's Workload (``status.clusterName``, else the multikueue check's "admitted on"
message), and absent for workloads that run where they are queued."""

from __future__ import annotations

import doctest

import kueue_ray.multikueue
from kueue_ray.multikueue import worker_cluster
from kueue_ray.ui.snapshot import Snapshot
from kueue_ray.ui.views import TaskRef, queues_view, task_view

from tests.unit.kueue_ray.test_ui_views import (
    CLUSTER_QUEUE,
    DAG,
    FIRST,
    LINKS,
    LOCAL_QUEUE,
    READER,
    RUNNING,
    T0,
    snapshot,
    workload,
)

ADMITTED_ON = 'The workload was admitted on "worker2"'


def dispatched(name: str, job_uid: str, *, cluster_name: str | None, message: str = ADMITTED_ON) -> dict:
    """An admitted manager Workload whose multikueue check is Ready, as Kueue v0.19.2 leaves it."""
    wl = workload(name, job_uid, admitted_at=5)
    wl["status"]["admissionChecks"] = [
        {
            "name": "multikueue",
            "state": "Ready",
            "message": message,
            "lastTransitionTime": "2026-12-02T10:00:05Z",
        }
    ]
    wl["status"]["conditions"].append({"type": "Admitted", "status": "True", "reason": "Admitted"})
    if cluster_name:
        wl["status"]["clusterName"] = cluster_name
    return wl


def test_the_worker_is_the_workloads_cluster_name_else_the_checks_message():
    assert worker_cluster(dispatched("a", "u", cluster_name="worker1")) == "worker1"
    assert worker_cluster(dispatched("a", "u", cluster_name=None)) == "worker2"
    # Waiting for a worker, or evicted from one: it runs nowhere now.
    assert worker_cluster(dispatched("a", "u", cluster_name=None, message="")) is None
    retry = dispatched("a", "u", cluster_name=None)
    retry["status"]["admissionChecks"][0]["state"] = "Retry"
    assert worker_cluster(retry) is None
    assert worker_cluster(workload("local", "u", admitted_at=5)) is None
    assert doctest.testmod(kueue_ray.multikueue).failed == 0


def multikueue_snapshot() -> Snapshot:
    shot = snapshot()
    wls = [w for w in shot.workloads if w["metadata"]["name"] != "wl-running"]
    return Snapshot(
        cluster_queues=[CLUSTER_QUEUE],
        local_queues=[LOCAL_QUEUE],
        workloads=[dispatched("wl-running", "u-running", cluster_name="worker1"), *wls],
        rayjobs=shot.rayjobs,
        identities=shot.identities,
        namespaces=shot.namespaces,
        health=shot.health,
        version=shot.version,
    )


def test_the_queues_page_shows_each_admitted_workloads_worker_cluster():
    view = queues_view(multikueue_snapshot(), {}, READER, LINKS, now=T0 + 100)
    admitted = view["cluster_queues"][0]["admitted"]["items"]
    assert {item["workload"]: item["worker_cluster"] for item in admitted} == {
        "wl-running": "worker1",
        "wl-batch-job": None,  # admitted on this cluster: runs here
    }


def test_the_kueue_tab_names_the_worker_its_rayjob_runs_on():
    view = task_view(
        TaskRef(DAG, RUNNING.run_id, "wait"),
        rayjob_xcom={"name": "rj-running", "namespace": "ray", "uid": "u-running", "queue": "default"},
        snapshot=multikueue_snapshot(),
        access=READER,
        links=LINKS,
        now=T0 + 100,
    )
    assert view["rayjob"]["worker_cluster"] == "worker1"
    queued = task_view(
        TaskRef(DAG, FIRST.run_id, "wait"),
        rayjob_xcom={"name": "rj-first", "namespace": "ray", "uid": "u-first", "queue": "default"},
        snapshot=multikueue_snapshot(),
        access=READER,
        links=LINKS,
        now=T0 + 100,
    )
    assert queued["rayjob"]["worker_cluster"] is None
