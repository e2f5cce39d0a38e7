"""The walkthrough: three dev backfill runs queue on the single ClusterQueue, a manual
prod-priority run preempts the running one and finishes first, and every run finally succeeds.
"""

from __future__ import annotations

import time
from datetime import date

import pytest

from devtools import demo

pytestmark = pytest.mark.timeout(420)

DAG = "text_classifier_finetune"
PREEMPTED_BY_PRIORITY = "Preempted to accommodate"
DUE_TO_PRIORITY = "due to prioritization in the ClusterQueue"


@pytest.fixture(scope="module")
def walkthrough(e2e, kubesim):
    """``make demo``'s walkthrough (devtools.demo), on this session's Airflow: a backfill whose conf asks
    for prod (the priority policy must still give it dev-priority), through the REST API the UI's backfill
    dialog calls, then a manual prod run once a backfill RayJob runs."""
    done = demo.walkthrough(
        e2e.airflow,
        kubesim.kubeconfig,
        first_day=date(2026, 10, 1),
        deadline=time.monotonic() + 420,
        say=lambda line: None,
    )
    return done.prod_run_id, done.runs


def test_the_demos_table_says_the_outcome_matches_the_walkthrough(e2e, walkthrough):
    _, runs = walkthrough
    rows = demo.timeline_rows(e2e.airflow, sorted(runs.values(), key=lambda r: r["dag_run_id"]))
    assert demo.matches_walkthrough(rows) == [], rows


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
        assert run["conf"] == demo.BACKFILL_CONF
        assert e2e.xcom(DAG, run_id, "submit", key="rayjob")["priority"] == "dev-priority"
        assert "Priority dev-priority" in e2e.task_log(DAG, run_id, "submit")
