"""Item 2, the walkthrough: three dev backfill runs queue on the single ClusterQueue, a manual
prod-priority run preempts the running one and finishes first, and every run finally succeeds.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(420)

DAG = "text_classifier_finetune"
PREEMPTED_BY_PRIORITY = "Preempted to accommodate"
DUE_TO_PRIORITY = "due to prioritization in the ClusterQueue"
BACKFILL_CONF = {"priority": "prod-priority", "epochs": 9}
"""Asks for prod (the policy must still give dev-priority). 60 s installing the runtime env's packages plus
9 epochs of 20 s = 240 simulated s = 24 s here (kubesim/README.md): the prod run must be submitted while a
dev RayJob still runs, and the default 3 epochs could end before the prod run's submit task had started
(seen in CI: two dev runs finished first and nothing was preempted)."""


def running_backfill_rayjob(e2e) -> dict | None:
    for job in e2e.rayjobs():
        annotations = job["metadata"].get("annotations") or {}
        run_id = next((v for k, v in annotations.items() if k.endswith("/run-id")), "")
        if (
            run_id.startswith("backfill__")
            and (job.get("status") or {}).get("jobDeploymentStatus") == "Running"
        ):
            return job
    return None


@pytest.fixture(scope="module")
def walkthrough(e2e):
    e2e.unpause(DAG)
    # A backfill whose conf asks for prod: the priority policy must still give it dev-priority.
    # Through the REST API (what the UI's backfill dialog calls); create_backfill asks again after a 5xx
    # from a busy SQLite unless the failed attempt made it after all.
    e2e.airflow.create_backfill(
        {
            "dag_id": DAG,
            "from_date": "2026-10-01T00:00:00Z",
            "to_date": "2026-10-03T00:00:00Z",
            "max_active_runs": 3,
            "dag_run_conf": BACKFILL_CONF,
        },
        timeout=120,
    )
    backfill = wait_until(
        lambda: len(runs := e2e.runs(DAG, run_type="backfill")) == 3 and runs,
        timeout=60,
        what="3 backfill runs",
    )
    wait_until(lambda: running_backfill_rayjob(e2e), timeout=120, what="a backfill RayJob running")
    prod_id = e2e.start_run(DAG, {"priority": "prod-priority"})
    finished = {run["dag_run_id"]: e2e.wait_run(DAG, run["dag_run_id"], timeout=300) for run in backfill}
    finished[prod_id] = e2e.wait_run(DAG, prod_id, timeout=300)
    return prod_id, finished


def test_every_run_succeeds_and_prod_finishes_first(e2e, walkthrough):
    prod_id, runs = walkthrough
    assert {run_id: run["state"] for run_id, run in runs.items()} == dict.fromkeys(runs, "success")
    dev_ends = [run["end_date"] for run_id, run in runs.items() if run_id != prod_id]
    assert runs[prod_id]["end_date"] < min(dev_ends)
    assert e2e.xcom(DAG, prod_id, "submit", key="rayjob")["priority"] == "prod-priority"


def test_preempted_dev_run_tells_kueues_reason_and_counts_one_preemption(e2e, walkthrough):
    prod_id, runs = walkthrough
    timelines = {
        run_id: e2e.xcom(DAG, run_id, "wait", key="timeline") for run_id in runs if run_id != prod_id
    }
    preempted = [run_id for run_id, timeline in timelines.items() if timeline["preemption_count"]]
    assert len(preempted) == 1, {run_id: t["preemption_count"] for run_id, t in timelines.items()}
    assert timelines[preempted[0]]["preemption_count"] == 1
    log = e2e.task_log(DAG, preempted[0], "wait")
    assert "PREEMPTED" in log or "Preempted" in log
    assert PREEMPTED_BY_PRIORITY in log and DUE_TO_PRIORITY in log, log[-3000:]
    # Kueue names the preemptor by UIDs only; the log names its RayJob and run (at the latest in the
    # closing lines, written when the preemptor's RayJob is long known).
    assert f"(DAG {DAG}, run {prod_id}, task submit)" in log, log[-3000:]
    assert timelines[preempted[0]]["final_phase"] == "SUCCEEDED"


def test_backfill_runs_are_dev_priority_even_when_conf_asks_for_prod(e2e, walkthrough):
    prod_id, runs = walkthrough
    for run_id, run in runs.items():
        if run_id == prod_id:
            continue
        assert run["run_type"] == "backfill"
        assert run["conf"] == BACKFILL_CONF
        assert e2e.xcom(DAG, run_id, "submit", key="rayjob")["priority"] == "dev-priority"
        assert "Priority dev-priority" in e2e.task_log(DAG, run_id, "submit")
