"""A RayJob no task will ever wait for: its worker died right after creating it, with no retry left.

No trigger ever ran for it, so no on_kill can stop it, and it holds the single ClusterQueue's quota. The
`kueue_ray_janitor` DAG finds it by its Airflow identity and the task's state, deletes it, and says why.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(300)

DAG = "e2e_orphan"
JANITOR = "kueue_ray_janitor"


def test_the_janitor_deletes_the_rayjob_of_a_task_that_failed_for_good(e2e):
    run_id = e2e.start_run(DAG, {"entrypoint": "sleep infinity"})
    assert e2e.wait_run(DAG, run_id, timeout=120)["state"] == "failed"
    [orphan] = e2e.rayjobs_of(DAG, run_id, "submit")
    assert not orphan["metadata"].get("deletionTimestamp")

    # Unpausing also starts the scheduled run of the latest interval: whichever sweep looks first deletes.
    e2e.unpause(JANITOR)
    e2e.start_run(JANITOR)
    wait_until(lambda: not e2e.rayjobs_of(DAG, run_id, "submit"), timeout=120, what="the orphan deleted")
    sweeps = [e2e.wait_run(JANITOR, run["dag_run_id"], timeout=120) for run in e2e.runs(JANITOR)]
    assert {sweep["state"] for sweep in sweeps} == {"success"}
    records = {
        sweep["dag_run_id"]: record
        for sweep in sweeps
        for record in e2e.xcom(JANITOR, sweep["dag_run_id"], "delete_orphans") or ()
        if record["name"] == orphan["metadata"]["name"]
    }
    [(sweep_id, record)] = records.items()  # deleted once, by one sweep
    assert record["result"] == "deleted"
    assert record["reason"] == "the task that submitted it, submit, ended failed and no task waits for it"
    log = e2e.task_log(JANITOR, sweep_id, "delete_orphans")
    assert f"Orphaned RayJob ray/{orphan['metadata']['name']}" in log
