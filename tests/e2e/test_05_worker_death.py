"""The worker is SIGKILLed right after it created the RayJob (before Airflow recorded anything);
the retry finds the RayJob under its deterministic name and adopts it. One RayJob in total."""

from __future__ import annotations

import pytest

from tests.e2e.harness import rayjob_creations

pytestmark = pytest.mark.timeout(300)

DAG = "e2e_worker_death"


def test_retry_adopts_the_rayjob_of_the_killed_worker(e2e):
    e2e.collect_requests()
    run_id = e2e.start_run(DAG, {"values": {"num_epochs": 3}})

    run = e2e.wait_run(DAG, run_id, timeout=240)

    assert run["state"] == "success", e2e.all_logs(DAG, run_id)[-3000:]
    ti = e2e.ti(DAG, run_id, "submit")
    assert ti["try_number"] >= 2
    assert "killing this worker" in e2e.task_log(DAG, run_id, "submit", 1)
    # The last try's log says whose RayJob it adopted (try 2's own log may be missing from the API when
    # Airflow's executor race made a third try necessary).
    assert "Adopting RayJob" in e2e.task_log(DAG, run_id, "submit", ti["try_number"])
    assert rayjob_creations(e2e.collect_requests()) == 1
