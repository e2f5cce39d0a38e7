"""Two Airflow deployments (staging and prod: two metadata databases, defaults left alone) share one
cluster, one namespace and one LocalQueue, and run the same DAG with the same run id at the same time.

Each gets a deployment identity of its own (generated in its metadata database), so each submits and
waits for a RayJob of its own; each janitor, swept while both RayJobs are alive, leaves the other's alone
(the other's DAG run does not exist in its database, which says nothing about that RayJob); each queues
page names the other's workloads "another Airflow: <identity>" and links none of them.
"""

from __future__ import annotations

import uuid

import pytest

from devtools.airflow import start_airflow
from devtools.postgres import metadata_database
from tests.e2e.conftest import dag_bundles, wait_for_dags_or_import_errors
from tests.e2e.harness import E2E, wait_until

pytestmark = pytest.mark.timeout(600)

DAG = "e2e_rayjob"
JANITOR = "kueue_ray_janitor"
DEPLOYMENT_LABEL = "kueue-ray.airflow.apache.org/deployment"


def deployment_of(harness: E2E) -> str:
    """The identity the deployment generated on first start (the Variable its api-server stored)."""
    response = harness.airflow.api("GET", "/variables/kueue_ray_deployment")
    response.raise_for_status()
    return response.json()["value"]


def foreign_owners(harness: E2E) -> set[str]:
    """The deployments named as "another Airflow" anywhere on this deployment's queues page."""
    response = harness.airflow.client.get("/kueue/api/v1/queues")
    response.raise_for_status()
    owners = set()
    for cluster_queue in response.json()["cluster_queues"]:
        for section in ("pending", "admitted"):
            for item in (cluster_queue.get(section) or {}).get("items") or ():
                owner = item.get("owner") or {}
                if owner.get("foreign_deployment"):
                    assert owner["description"] == f"another Airflow: {owner['foreign_deployment']}"
                    assert "task_instance_url" not in owner and "dag_id" not in owner
                    owners.add(owner["foreign_deployment"])
    return owners


def running(harness: E2E, run_id: str) -> bool:
    return any(
        (job.get("status") or {}).get("jobDeploymentStatus") == "Running"
        for job in harness.rayjobs_of(DAG, run_id, "submit")
    )


def sweep(harness: E2E) -> list[dict]:
    """Run this deployment's janitor now; what every sweep of it reported."""
    harness.unpause(JANITOR)
    harness.start_run(JANITOR)
    runs = [harness.wait_run(JANITOR, run["dag_run_id"], timeout=180) for run in harness.runs(JANITOR)]
    assert {run["state"] for run in runs} == {"success"}
    return [
        record for run in runs for record in harness.xcom(JANITOR, run["dag_run_id"], "delete_orphans") or ()
    ]


def test_two_deployments_run_the_same_run_id_side_by_side_and_never_touch_each_others_rayjobs(
    e2e, kubesim, tmp_path
):
    with metadata_database() as database_url:
        other_airflow = start_airflow(
            tmp_path / "staging",
            kubeconfig=kubesim.kubeconfig,
            database_url=database_url,
            extra_env={
                "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": dag_bundles(),
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            },
        )
        try:
            other = E2E(
                airflow=other_airflow,
                kubesim_url=e2e.kubesim_url,
                custom=e2e.custom,
                kubesim_verify=e2e.kubesim_verify,
            )
            wait_for_dags_or_import_errors(other_airflow, [DAG, JANITOR])
            other.unpause(DAG)
            prod, staging = deployment_of(e2e), deployment_of(other)
            assert prod != staging, "two deployments left at their defaults never collide"

            run_id = f"e2e__both_{uuid.uuid4().hex[:8]}"
            # Prod's RayJob runs first on the single GPU: 40 epochs of 20 simulated seconds, 80 s here, so
            # both are alive (prod's running, staging's queued behind it) through the sweeps below. Staging
            # asks for the same run id once prod's runs; its own RayJob then needs only a moment.
            e2e.start_run(DAG, {"values": {"num_epochs": 40}}, run_id=run_id)
            wait_until(
                lambda: running(e2e, run_id),
                timeout=120,
                what=lambda: f"prod's RayJob running: {e2e.rayjobs_of(DAG, run_id, 'submit')}",
            )
            other.start_run(DAG, {"values": {"num_epochs": 2}}, run_id=run_id)
            jobs = wait_until(
                lambda: len(found := e2e.rayjobs_of(DAG, run_id, "submit")) == 2 and found,
                timeout=120,
                what=lambda: f"a RayJob of each deployment: {e2e.rayjobs_of(DAG, run_id, 'submit')}",
            )
            by_deployment = {job["metadata"]["labels"][DEPLOYMENT_LABEL]: job for job in jobs}
            assert set(by_deployment) == {prod, staging}
            assert len({job["metadata"]["name"] for job in jobs}) == 2

            # Each queues page names the other's workload as another Airflow's, while both are in the queue.
            wait_until(
                lambda: staging in foreign_owners(e2e) and prod in foreign_owners(other),
                timeout=60,
                what=lambda: (
                    f"foreign owners: prod sees {foreign_owners(e2e)}, staging sees {foreign_owners(other)}"
                ),
            )

            # Both alive (one running, one queued behind it on the single GPU): sweep both janitors now.
            uids = {job["metadata"]["uid"] for job in jobs}
            for harness in (e2e, other):
                unfinished = [
                    j
                    for j in e2e.rayjobs_of(DAG, run_id, "submit")
                    if "jobStatus" not in j.get("status", {})
                    or j["status"]["jobStatus"] not in ("SUCCEEDED", "FAILED")
                ]
                assert len(unfinished) == 2, "the sweep must judge live RayJobs"
                deleted = [r for r in sweep(harness) if r["name"] in {j["metadata"]["name"] for j in jobs}]
                assert deleted == [], deleted
                alive = {j["metadata"]["uid"] for j in e2e.rayjobs_of(DAG, run_id, "submit")}
                assert alive == uids, "each janitor leaves the other deployment's RayJob alone"

            for harness in (e2e, other):
                run = harness.wait_run(DAG, run_id, timeout=300)
                assert run["state"] == "success", harness.task_log(DAG, run_id, "submit")[-3000:]
            for harness, deployment in ((e2e, prod), (other, staging)):
                rayjob = harness.xcom(DAG, run_id, "submit", key="rayjob")
                assert rayjob["uid"] == by_deployment[deployment]["metadata"]["uid"]
            finished = {
                j["metadata"]["uid"]: j["status"]["jobStatus"] for j in e2e.rayjobs_of(DAG, run_id, "submit")
            }
            assert finished == dict.fromkeys(uids, "SUCCEEDED")
        finally:
            other_airflow.stop()
