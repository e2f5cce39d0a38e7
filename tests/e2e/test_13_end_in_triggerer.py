"""A successful RayJob ends its task in the triggerer: no worker runs the task again, and the XComs, the
dashboard link and the driver log tail are there as a worker would have left them. A failing one still
resumes on a worker and Airflow retries it.

How "no worker" is seen: Airflow's task runner sends the StatsD counter ``ti.start`` (tags dag_id,
task_id) each time a worker runs a task, for its first ``execute`` and for every resume after deferral;
the session's Airflow sends its metrics to a StatsD listener (tests/e2e/conftest.py).
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

pytestmark = pytest.mark.timeout(420)

IN_TRIGGERER = "e2e_rayjob"
"""SubmitRayJobOperator as shipped: end_in_triggerer=True."""
ON_WORKER = "e2e_on_worker"
"""The same with end_in_triggerer=False."""
RETRIED = "e2e_retried"
"""The same with retries=1."""
SHORT = {"entrypoint": "sleep 5"}
SUBMITTED = "submitted successfully"
"""What KubeRay's K8sJobMode submitter prints (``ray job submit``): proof the log tail is the driver's."""


def worker_runs(statsd, dag_id: str, task_id: str = "submit") -> int:
    return len(statsd.named("ti.start", dag_id=dag_id, task_id=task_id))


def run_once(e2e, statsd, dag_id: str, conf: dict) -> tuple[str, dict, int]:
    """One run of ``dag_id`` (nothing else runs it meanwhile): its id, its state, the worker runs it took."""
    before = worker_runs(statsd, dag_id)
    run_id = e2e.start_run(dag_id, conf)
    run = e2e.wait_run(dag_id, run_id, timeout=240)
    return run_id, run, worker_runs(statsd, dag_id) - before


def links(e2e, dag_id: str, run_id: str) -> dict:
    path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/submit/links"
    return e2e.airflow.api("GET", path).json()["extra_links"]


def assert_links(e2e, dag_id: str, run_id: str) -> None:
    """Both extra links as a worker leaves them: the Ray dashboard, and the task instance's Kueue tab."""
    shown = links(e2e, dag_id, run_id)
    assert shown["Ray dashboard"] == "http://localhost:8265/#/jobs", shown
    assert shown["Kueue"].endswith(f"/dags/{dag_id}/runs/{quote(run_id, safe='')}/tasks/submit/plugin/kueue")


def test_a_success_ends_in_the_triggerer_without_a_worker_with_xcoms_and_log_tail(e2e, statsd):
    run_id, run, runs = run_once(e2e, statsd, IN_TRIGGERER, SHORT)

    assert run["state"] == "success", e2e.task_log(IN_TRIGGERER, run_id, "submit")[-3000:]
    assert runs == 1, "a worker ran the task again after it deferred"
    log = e2e.task_log(IN_TRIGGERER, run_id, "submit")
    assert "the task ends here in the triggerer, no worker needed" in log
    assert "ended SUCCEEDED after" in log
    assert "Last 50 lines of the Ray driver (submitter) log" in log and SUBMITTED in log, log[-3000:]

    timeline = e2e.xcom(IN_TRIGGERER, run_id, "submit", key="timeline")
    assert timeline["final_phase"] == "SUCCEEDED" and timeline["running_seconds"] > 0
    rayjob = e2e.xcom(IN_TRIGGERER, run_id, "submit", key="rayjob")
    assert rayjob["job_id"] and rayjob["ray_cluster"] and rayjob["cluster_queue"]
    assert (rayjob["queue"], rayjob["priority"]) == ("user-queue", "dev-priority")
    returned = e2e.xcom(IN_TRIGGERER, run_id, "submit")
    assert returned == {"name": rayjob["name"], "namespace": rayjob["namespace"], "uid": rayjob["uid"]}
    assert_links(e2e, IN_TRIGGERER, run_id)
    ti = e2e.ti(IN_TRIGGERER, run_id, "submit")
    assert (ti["state"], ti["try_number"]) == ("success", 1)


def test_switched_off_a_success_resumes_on_a_worker_with_the_same_xcoms(e2e, statsd):
    run_id, run, runs = run_once(e2e, statsd, ON_WORKER, SHORT)

    assert run["state"] == "success", e2e.task_log(ON_WORKER, run_id, "submit")[-3000:]
    assert runs == 2, "expected the first execute and one resume on a worker"
    log = e2e.task_log(ON_WORKER, run_id, "submit")
    assert "ends here in the triggerer" not in log
    assert "Last 50 lines of the Ray driver (submitter) log" in log and SUBMITTED in log
    rayjob = e2e.xcom(ON_WORKER, run_id, "submit", key="rayjob")
    assert set(rayjob) == {
        "name",
        "namespace",
        "uid",
        "ray_cluster",
        "job_id",
        "dashboard_url",
        "queue",
        "priority",
        "workload_name",
        "cluster_queue",
        # What a priority change from the Kueue tab is judged by (the tab cannot load the operator).
        "priority_policy",
        "run_type",
    }
    assert e2e.xcom(ON_WORKER, run_id, "submit", key="timeline")["final_phase"] == "SUCCEEDED"
    assert_links(e2e, ON_WORKER, run_id)


def test_a_failing_rayjob_still_fails_on_a_worker_and_is_retried(e2e, statsd):
    run_id, run, runs = run_once(e2e, statsd, RETRIED, {"entrypoint": "python train.py; exit 1"})

    assert run["state"] == "failed"
    ti = e2e.ti(RETRIED, run_id, "submit")
    assert (ti["state"], ti["try_number"]) == ("failed", 2)
    first, second = (e2e.task_log(RETRIED, run_id, "submit", number) for number in (1, 2))
    for log in (first, second):
        assert "did not succeed (failed" in log and "exit code 1" in log, log[-3000:]
    # the retry submitted a RayJob of its own after the failed one
    assert "of try 1 already ended FAILED; this try 2 submits a new RayJob" in second
    assert runs == 4  # each try: its execute, then its resume on the worker to fail there
