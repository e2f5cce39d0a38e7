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


def test_a_dry_run_with_no_retention_reports_a_finished_rayjob_whose_task_ended_and_keeps_it(e2e):
    """The retention rule through a real Airflow: the DAG run's state and the task's come from the janitor
    task's execution API. A dry run, so the finished RayJobs of other tests stay untouched."""
    run_id = e2e.start_run("e2e_rayjob", {"entrypoint": "sleep 10"})
    assert e2e.wait_run("e2e_rayjob", run_id, timeout=240)["state"] == "success"
    [done] = e2e.rayjobs_of("e2e_rayjob", run_id, "submit")

    sweep = e2e.start_run(JANITOR, {"dry_run": True, "retention_days": 0})
    assert e2e.wait_run(JANITOR, sweep, timeout=120)["state"] == "success"
    [record] = [
        r for r in e2e.xcom(JANITOR, sweep, "delete_orphans") or () if r["name"] == done["metadata"]["name"]
    ]
    assert record["result"] == "not deleted (dry run)"
    assert record["reason"].startswith("finished (Complete)")
    assert record["reason"].endswith("longer than the retention of 0 s, and its task submit ended success")
    assert e2e.rayjobs_of("e2e_rayjob", run_id, "submit"), "a dry run deletes nothing"
    log = e2e.task_log(JANITOR, sweep, "delete_orphans")
    assert f"Expired RayJob ray/{done['metadata']['name']}" in log
