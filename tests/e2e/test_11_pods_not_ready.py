"""A RayJob whose pods never get ready, in a real Airflow: Kueue's waitForPodsReady evicts it
(PodsReadyTimeout) and requeues it, the task log shows that as its own kind with the hint, and after more
evictions than max_pods_ready_evictions the task fails with the hint and its RayJob is deleted.

The `e2e-spot` queue's GPU flavor sends the head pod to a spot pool whose taint the pod does not tolerate
(tests/e2e/cluster/), so it stays Pending (Unschedulable); kubesim runs waitForPodsReady with a 2-minute
timeout (tests/e2e/kueue-config.yaml, 12 s here) and a 30 s requeue backoff.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(300)

DAG = "e2e_guarded"  # max_pods_ready_evictions=1 (tests/e2e/dags/e2e_rayjob.py)
HINT = "check taints, tolerations, image pulls"


def test_pods_that_never_get_ready_fail_after_the_configured_evictions_and_the_rayjob_is_deleted(e2e):
    run_id = e2e.start_run(DAG, {"queue": "e2e-spot", "entrypoint": "sleep 60"})
    [job] = wait_until(lambda: e2e.rayjobs_of(DAG, run_id, "submit"), timeout=90, what="the RayJob")
    uid = job["metadata"]["uid"]

    run = e2e.wait_run(DAG, run_id, timeout=240)

    log = e2e.task_log(DAG, run_id, "submit")
    assert run["state"] == "failed", log[-4000:]
    assert "PODS_NOT_READY" in log or "QUEUED (PodsReadyTimeout)" in log, log[-4000:]
    assert "PREEMPTED" not in log
    failure = [line for line in log.splitlines() if "did not succeed" in line]
    assert failure, log[-4000:]
    assert "pods not ready within" in failure[-1] and HINT in failure[-1], failure[-1]
    assert "evicted it 2 times" in failure[-1] and "max_pods_ready_evictions=1" in failure[-1], failure[-1]
    # Given up on: the RayJob (and with it its Workload) is deleted, not left cycling through Kueue.
    wait_until(lambda: not e2e.rayjobs_of(DAG, run_id, "submit"), timeout=60, what="the RayJob deleted")

    def workload_gone() -> bool:
        return not [
            w
            for w in e2e.workloads()
            if (w["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid") == uid
        ]

    wait_until(workload_gone, timeout=60, what="its Workload deleted with it")
