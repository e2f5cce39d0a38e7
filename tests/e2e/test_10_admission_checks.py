"""Admission checks in a real Airflow: a RayJob behind a slow check waits with its quota reserved, the log
shows the check and run_timeout does not count the wait; a rejected check fails the task naming the check
and its message.

The e2e cluster (tests/e2e/cluster/queues.yaml) has two queues behind kubesim's simulated check
controller: `e2e-checked` (the check turns Ready 400 simulated seconds after the quota reservation, 40 s
here) and `e2e-rejected` (the check rejects every RayJob with "no A100 capacity in westeurope").
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(300)

GUARDED = "e2e_guarded"  # run_timeout=25 s (tests/e2e/dags/e2e_rayjob.py)
DAG = "e2e_rayjob"


def test_a_slow_admission_check_is_shown_and_not_counted_by_run_timeout(e2e):
    run_id = e2e.start_run(GUARDED, {"queue": "e2e-checked", "entrypoint": "sleep 30"})

    def waiting_for_the_check() -> list[dict]:
        jobs = e2e.rayjobs_of(GUARDED, run_id, "submit")
        return jobs if jobs and jobs[0]["spec"].get("suspend") else []

    [job] = wait_until(waiting_for_the_check, timeout=90, what="the RayJob, suspended")
    run = e2e.wait_run(GUARDED, run_id, timeout=240)

    log = e2e.task_log(GUARDED, run_id, "submit")
    assert run["state"] == "success", log[-4000:]
    assert "AWAITING_CHECKS" in log
    assert "waiting for admission checks: e2e-gpu-provisioning (Pending: Waiting for 1 GPU node)" in log
    timeline = e2e.xcom(GUARDED, run_id, "submit", key="timeline")
    # The check held it for 40 s with quota reserved, longer than run_timeout=25 s: not counted as running.
    assert timeline["awaiting_checks_seconds"] > 25, timeline
    assert timeline["final_phase"] == "SUCCEEDED"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "e2e-checked"


def test_a_rejected_admission_check_fails_the_task_naming_the_check_and_its_message(e2e):
    run_id = e2e.start_run(DAG, {"queue": "e2e-rejected", "entrypoint": "sleep 60"})

    run = e2e.wait_run(DAG, run_id, timeout=180)

    assert run["state"] == "failed"
    log = e2e.task_log(DAG, run_id, "submit")
    failure = [line for line in log.splitlines() if "did not succeed" in line]
    assert failure, log[-4000:]
    assert "e2e-capacity" in failure[-1] and "no A100 capacity in westeurope" in failure[-1], failure[-1]
    assert "PREEMPTED" not in log
