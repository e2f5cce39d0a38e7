"""A cluster that says "no" for good ends the task, one that says it for a moment costs nothing, and a cluster
without Kueue is named as such.

* The triggerer's access to RayJobs and Workloads is revoked (403 to every get, list and watch in the
  namespace, as a deleted RoleBinding answers) while a task waits: the task fails once the refusal has
  lasted ``[kueue_ray] refusal_timeout`` (short here, set on the triggerer through
  ``AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT``), naming what was refused, to whom, and the ``kubectl auth
  can-i`` that shows it. Revoked and restored within that window, the task succeeds.
* The cluster does not serve ``kueue.x-k8s.io`` at all: the operator fails within 15 s, saying Kueue is
  not installed, and creates nothing.

Open watches are ended when the access is revoked (``drop_watches``): an API server does not end a watch
it already granted, so a real cluster shows the refusal at the watch's next renewal, and the window runs
from there.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pytest

from kubesim.apiserver.faults import DEFAULT_USER
from tests.e2e.harness import rayjob_creations, wait_until

pytestmark = pytest.mark.timeout(420)

DAG = "e2e_rayjob"
NAMESPACE = "ray"
WINDOW = 20
"""Seconds of refusal the triggerer waits out in these tests."""
WAITED_FOR = ["rayjobs.ray.io", "workloads.kueue.x-k8s.io"]
REVOKED = [{"code": 403, "verbs": ["get", "list", "watch"], "resources": WAITED_FOR, "namespace": NAMESPACE}]


@pytest.fixture
def short_refusal_window(e2e):
    """The triggerer restarted with a ``WINDOW``-second refusal timeout, and restarted as before after."""
    airflow = e2e.airflow
    airflow.env["AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT"] = str(WINDOW)
    airflow.kill_triggerer()
    airflow.start_component("triggerer")
    try:
        yield
    finally:
        airflow.env.pop("AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT", None)
        airflow.kill_triggerer()
        airflow.start_component("triggerer")


def deferred_and_running(e2e, run_id: str) -> dict:
    """Wait until the run's task waits in the triggerer while its RayJob runs; the RayJob."""

    def ready():
        if e2e.ti(DAG, run_id, "submit")["state"] != "deferred":
            return None
        jobs = e2e.rayjobs_of(DAG, run_id, "submit")
        running = [j for j in jobs if (j.get("status") or {}).get("jobDeploymentStatus") == "Running"]
        return running[0] if running else None

    return wait_until(ready, timeout=180, interval=1, what=f"{run_id}'s task deferred, its RayJob running")


def ended_at(ti: dict) -> float:
    return datetime.fromisoformat(ti["end_date"]).timestamp()


def test_a_refusal_that_lasts_the_window_fails_the_waiting_task_saying_what_to_grant(
    e2e, short_refusal_window
):
    run_id = e2e.start_run(DAG, {"entrypoint": "sleep infinity"})
    rayjob = deferred_and_running(e2e, run_id)
    try:
        revoked = time.time()
        e2e.faults(rules=REVOKED, drop_watches=True)
        run = e2e.wait_run(DAG, run_id, timeout=WINDOW + 90)
        ti = e2e.ti(DAG, run_id, "submit")
    finally:
        e2e.clear_faults()
        e2e.custom.delete_namespaced_custom_object(
            "ray.io", "v1", NAMESPACE, "rayjobs", rayjob["metadata"]["name"]
        )

    assert run["state"] == "failed" and ti["state"] == "failed"
    took = ended_at(ti) - revoked
    assert WINDOW - 1 <= took <= WINDOW + 30, f"failed {took:.0f}s after the revocation, window {WINDOW}s"
    log = e2e.task_log(DAG, run_id, "submit")
    refused = next((line for line in log.splitlines() if f"for {WINDOW}s in a row" in line), None)
    assert refused, log[-4000:]
    assert any(
        f"refused to {verb} {resource} in namespace ray" in refused
        for verb in ("get", "list", "watch")
        for resource in WAITED_FOR
    ), refused
    assert f"to {DEFAULT_USER} (connection kubernetes_default)" in refused
    assert "kubectl auth can-i" in refused and f"-n ray --as={DEFAULT_USER}" in refused


def test_a_refusal_that_clears_within_the_window_costs_nothing(e2e, short_refusal_window):
    run_id = e2e.start_run(DAG, {"entrypoint": "sleep 300"})
    deferred_and_running(e2e, run_id)
    e2e.faults(rules=REVOKED, drop_watches=True)
    time.sleep(WINDOW / 2)
    e2e.clear_faults()

    run = e2e.wait_run(DAG, run_id, timeout=180)

    log = e2e.task_log(DAG, run_id, "submit")
    assert run["state"] == "success", log[-4000:]
    assert "The API server refuses to" in log, "the refusal was never met: the test proved nothing"
    assert "in a row" not in log


def test_a_cluster_without_kueue_fails_the_operator_fast_and_creates_nothing(e2e):
    e2e.collect_requests()
    e2e.faults(unserved_groups=["kueue.x-k8s.io"])
    try:
        run_id = e2e.start_run(DAG)
        run = e2e.wait_run(DAG, run_id, timeout=120)
    finally:
        e2e.clear_faults()

    ti = e2e.ti(DAG, run_id, "submit")
    assert run["state"] == "failed" and ti["state"] == "failed"
    assert datetime.fromisoformat(ti["end_date"]) - datetime.fromisoformat(ti["start_date"]) < timedelta(
        seconds=15
    )
    log = e2e.task_log(DAG, run_id, "submit")
    assert "Kueue API kueue.x-k8s.io/v1beta2 is not served by this cluster: install Kueue ≥ v0.19" in log, (
        log[-3000:]
    )
    assert "NotFoundException" not in log and "HTTP response headers" not in log
    assert rayjob_creations(e2e.collect_requests()) == 0
