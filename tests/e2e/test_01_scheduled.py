"""A scheduled run of each pipeline succeeds; the task log tells the phase story and XCom holds
the timeline.

Unpausing a DAG whose start_date is in the past (catchup=False) makes the scheduler create one scheduled
run for the latest interval, exactly what a user sees after enabling a pipeline. The text classifier
(single ClusterQueue) and the LLM pipeline (team cohort) share no quota, so they are enabled together;
the Aurora pipeline only once the LLM run is over, as both fine-tunes and the Aurora RayService compete
for the team cohort's GPUs (see RELIABILITY.md).
"""

from __future__ import annotations

import subprocess

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(420)

# dag_id -> [(submitting task, waiting task: the one whose log and XCom tell the RayJob's story)]
WAITS = {
    "text_classifier_finetune": [("submit", "wait")],
    "llm_train_and_batch_inference": [("train", "wait_train"), ("batch_inference", "wait_inference")],
    "aurora_finetune_and_serve": [("finetune", "wait_finetune")],
}
TOGETHER = ("text_classifier_finetune", "llm_train_and_batch_inference")
PHASES = ("SUBMITTED", "QUEUED", "ADMITTED", "RUNNING", "SUCCEEDED")
"""The phases of a RayJob that runs once, in the order its transition lines tell them."""
AFTER = {"aurora_finetune_and_serve": "llm_train_and_batch_inference"}
"""A pipeline enabled only once the other one's scheduled run finished (they would compete for GPUs)."""


def scheduled_run_id(e2e, dag_id: str) -> str:
    return wait_until(
        lambda: e2e.runs(dag_id, run_type="scheduled"), timeout=90, what=f"a scheduled run of {dag_id}"
    )[0]["dag_run_id"]


@pytest.fixture(scope="module")
def enabled(e2e):
    """Enable the pipelines that may run side by side at once; the others when a test asks for them."""
    for dag_id in TOGETHER:
        e2e.unpause(dag_id)
    return {dag_id: scheduled_run_id(e2e, dag_id) for dag_id in TOGETHER}


@pytest.mark.parametrize("dag_id", list(WAITS))
def test_scheduled_run_succeeds_with_phase_story_and_timeline(e2e, enabled, dag_id):
    if dag_id not in enabled:
        predecessor = AFTER[dag_id]
        e2e.wait_run(predecessor, enabled[predecessor], timeout=300)
        e2e.unpause(dag_id)
        enabled[dag_id] = scheduled_run_id(e2e, dag_id)
    run_id = enabled[dag_id]

    run = e2e.wait_run(dag_id, run_id, timeout=300)

    assert run["state"] == "success", e2e.ti_states(dag_id, run_id)
    assert set(e2e.ti_states(dag_id, run_id).values()) == {"success"}
    for submit_id, task_id in WAITS[dag_id]:
        # Scheduled runs get the project's default priority, and the submit log says why.
        assert "Priority dev-priority" in e2e.task_log(dag_id, run_id, submit_id)
        # The trigger's transitions land in the task log, in order, ending SUCCEEDED. Every try: under load
        # Airflow 3.3.2's LocalExecutor can fail a resumed sensor, and its retry then finds the RayJob
        # finished (the story is in the first try's log, the timeline in the last one's).
        log = e2e.every_try_log(dag_id, run_id, task_id)
        # The trigger's own lines, then the end: a failure shows the story, not only the driver log's tail.
        told = "\n".join(
            line for line in log.splitlines() if "kueue_ray.trigger" in line or "RayJob " in line
        )
        phases = [phase for line in log.splitlines() for phase in PHASES if f": {phase} (" in line]
        assert "SUCCEEDED" in phases, f"no SUCCEEDED line in {task_id} log:\n{told[-6000:]}"
        # The sensor starts seconds after the submit, and a 6 s RayJob (E2E_TIME_SCALE) may be over by
        # then under load: a wait that first saw it unfinished tells it RUNNING, then SUCCEEDED.
        if phases[0] != "SUCCEEDED":
            seen = phases[: phases.index("SUCCEEDED") + 1]
            assert "RUNNING" in seen, f"no RUNNING line before SUCCEEDED in {task_id} log:\n{told[-6000:]}"
            assert seen == sorted(seen, key=PHASES.index), (
                f"phases out of order in {task_id} log:\n{told[-6000:]}"
            )

        timeline = e2e.xcom(dag_id, run_id, task_id, key="timeline")
        assert timeline["final_phase"] == "SUCCEEDED"
        assert timeline["submitted_at"] and timeline["finished_at"]
        assert len(timeline["admissions"]) >= 1
        assert timeline["admissions"][0].get("cluster_queue")
        assert timeline["running_seconds"] > 0
        assert timeline["preemption_count"] == 0


def kubectl(kubesim, *args: str) -> str:
    """kubectl as a user runs it, reading across namespaces (the RBAC test tells such reads apart)."""
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubesim.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def active_cluster(service: dict) -> str | None:
    return ((service.get("status") or {}).get("activeServiceStatus") or {}).get("rayClusterName")


def test_a_second_aurora_run_deploys_the_new_model_to_the_running_service(e2e, enabled, kubesim):
    """Upgrade, as KubeRay does it: the new checkpoint is a new cluster config for the same RayService; a
    pending cluster comes up (Kueue admits it on its own), traffic switches, the old cluster goes."""
    if "aurora_finetune_and_serve" not in enabled:
        pytest.skip("the scheduled Aurora run did not happen in this session")
    [before] = e2e.rayservices()
    old = active_cluster(before)
    assert old, "the scheduled Aurora run left no RayService serving"

    run_id = e2e.start_run("aurora_finetune_and_serve", {})
    run = e2e.wait_run("aurora_finetune_and_serve", run_id, timeout=300)

    assert run["state"] == "success", e2e.ti_states("aurora_finetune_and_serve", run_id)
    [after] = e2e.rayservices()
    new = active_cluster(after)
    assert after["metadata"]["uid"] == before["metadata"]["uid"] and new and new != old
    # Every try's log: under load a try may fail after its switch (a zombie, a timeout), and its retry rolls
    # the service out again by design (RayServiceRollout: a new cluster, a second switch).
    log = e2e.every_try_log("aurora_finetune_and_serve", run_id, "deploy_serve")
    assert f"switches traffic from RayCluster {old}" in log, log[-3000:]
    # While the new cluster queues, starts or deploys, the log says the old one serves meanwhile. kubesim
    # may finish the switch before the triggerer's first look; then no such line is due.
    meanwhile = [
        line
        for line in log.splitlines()
        if f"RayService {after['metadata']['namespace']}/{after['metadata']['name']}: " in line
        and any(f": {phase} (" in line for phase in ("QUEUED", "ADMITTED", "DEPLOYING"))
    ]
    assert not meanwhile or any(f"RayCluster {old} keeps serving" in line for line in meanwhile), meanwhile
    switches = [line for line in log.splitlines() if "Traffic switched from RayCluster " in line]
    assert switches and f"Traffic switched from RayCluster {old} to RayCluster " in switches[0], switches
    assert f" to RayCluster {new} " in switches[-1], switches
    name = after["metadata"]["name"]
    assert kubectl(kubesim, "get", "rayservices", "-A", f"--field-selector=metadata.name={name}", "-o", "jsonpath={.items[*].status.activeServiceStatus.rayClusterName}") == new  # fmt: skip
    selector = kubectl(
        kubesim, "get", "services", "-A", f"--field-selector=metadata.name={name}-serve-svc",
        "-o", r"jsonpath={.items[*].spec.selector.ray\.io/cluster}",
    )  # fmt: skip
    assert selector == new, "the Serve Service sends traffic to the new cluster"
    wait_until(
        lambda: old not in kubectl(kubesim, "get", "rayclusters", "-A", "-o", "name"),
        timeout=60,
        what=f"the replaced RayCluster {old} deleted",
    )


def test_a_run_of_its_own_service_tears_down_the_earlier_one_and_keeps_its_own(e2e, enabled):
    """serve_mode new_service: the run deploys a RayService of its own, then deletes the earlier ones."""
    if "aurora_finetune_and_serve" not in enabled:
        pytest.skip("the scheduled Aurora run did not happen in this session")
    before = {svc["metadata"]["name"] for svc in e2e.rayservices()}
    assert before, "the earlier Aurora runs left no RayService serving"

    run_id = e2e.start_run(
        "aurora_finetune_and_serve", {"serve_mode": "new_service", "teardown_previous": True}
    )
    run = e2e.wait_run("aurora_finetune_and_serve", run_id, timeout=300)

    assert run["state"] == "success", e2e.ti_states("aurora_finetune_and_serve", run_id)
    after = {svc["metadata"]["name"] for svc in e2e.rayservices()}
    assert len(after) == 1 and not after & before, f"previous RayServices {before} still there: {after}"
    assert "Tore down earlier RayService" in e2e.task_log("aurora_finetune_and_serve", run_id, "deploy_serve")
