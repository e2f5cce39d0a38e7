"""The triggerer dies while a task waits and a new one starts; the task resumes from the cluster's
state and succeeds, and exactly one RayJob was ever created for it."""

from __future__ import annotations

import pytest

from tests.e2e.harness import rayjob_creations

pytestmark = pytest.mark.timeout(300)

DAG = "e2e_rayjob"


def test_task_survives_a_triggerer_restart_with_one_rayjob(e2e):
    e2e.collect_requests()
    run_id = e2e.start_run(DAG, {"entrypoint": "sleep 150"})
    e2e.wait_ti_state(DAG, run_id, "submit", {"deferred"})

    assert e2e.airflow.kill_triggerer() >= 1
    e2e.airflow.start_component("triggerer")

    run = e2e.wait_run(DAG, run_id, timeout=240)
    assert run["state"] == "success", e2e.task_log(DAG, run_id, "submit")[-3000:]
    ti = e2e.ti(DAG, run_id, "submit")
    assert ti["try_number"] == 1  # resumed, not retried
    assert rayjob_creations(e2e.collect_requests()) == 1
    assert e2e.xcom(DAG, run_id, "submit", key="timeline")["final_phase"] == "SUCCEEDED"
