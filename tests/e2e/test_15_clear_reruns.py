"""Clear re-runs the work: clearing a successful ``submit`` and its downstream ``wait`` (as a user does in
the UI to retrain) submits a second RayJob, which runs to completion and trains again; the first RayJob,
finished, is left as it was. (A retry after a worker died mid-create still adopts: test_05.)"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(360)

DAG = "text_classifier_finetune"


def clear(e2e, dag_id: str, run_id: str, task_ids: list[str]) -> None:
    """The UI's Clear on a task with "Downstream" ticked: POST clearTaskInstances, not a dry run."""
    response = e2e.airflow.api(
        "POST",
        f"/dags/{dag_id}/clearTaskInstances",
        json={
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": task_ids,
            "include_downstream": True,
            "only_failed": False,
            "reset_dag_runs": True,
        },
    )
    assert response.status_code == 200, response.text


def test_clearing_a_successful_submit_and_wait_trains_again_with_a_new_rayjob(e2e):
    e2e.unpause(DAG)
    run_id = e2e.start_run(DAG, {"epochs": 2})
    assert e2e.wait_run(DAG, run_id, timeout=240)["state"] == "success", e2e.all_logs(DAG, run_id)[-3000:]
    (first,) = e2e.rayjobs_of(DAG, run_id, "submit")
    assert "epoch 2/2" in e2e.task_log(DAG, run_id, "wait", 1)

    clear(e2e, DAG, run_id, ["submit"])
    run = e2e.wait_run(DAG, run_id, timeout=240)

    assert run["state"] == "success", e2e.all_logs(DAG, run_id)[-3000:]
    assert e2e.ti(DAG, run_id, "submit")["try_number"] == 2
    submit_log = e2e.task_log(DAG, run_id, "submit", 2)
    assert "of try 1 already ended SUCCEEDED; this try 2 submits a new RayJob" in submit_log
    jobs = {job["metadata"]["uid"]: job for job in e2e.rayjobs_of(DAG, run_id, "submit")}
    assert len(jobs) == 2 and first["metadata"]["uid"] in jobs, "the first RayJob is still there"
    (second,) = [job for uid, job in jobs.items() if uid != first["metadata"]["uid"]]
    assert second["status"]["jobStatus"] == "SUCCEEDED"
    untouched = jobs[first["metadata"]["uid"]]
    assert untouched["status"]["jobStatus"] == "SUCCEEDED"
    assert untouched["metadata"]["annotations"]["airflow.apache.org/try-number"] == "1"
    # The second try of wait followed the new RayJob, and its driver log trained again.
    assert e2e.xcom(DAG, run_id, "wait", key="rayjob")["uid"] == second["metadata"]["uid"]
    # The triggerer's supervisor writes a trigger's last lines (the driver log's tail) to the task log a
    # moment after the TaskSuccessEvent, which may reach the scheduler first.
    wait_until(
        lambda: "epoch 2/2" in e2e.task_log(DAG, run_id, "wait", 2),
        timeout=30,
        what=lambda: (
            f"the driver log's tail in try 2 of wait:\n{e2e.task_log(DAG, run_id, 'wait', 2)[-2000:]}"
        ),
    )
