"""`make demo`: the "Priority Scheduling with RayJob and Kueue" walkthrough, headless, through Airflow's
REST API against kubesim (single-queue setup, fast simulated time).

1. a backfill of three days of `text_classifier_finetune`: three dev-priority runs whose RayJobs queue
   behind each other (the ClusterQueue holds one);
2. once the first backfill RayJob runs, a manual run with conf {"priority": "prod-priority"} preempts it;
3. everything finishes. A table (run, priority, queued s, preemptions, result) is printed from the
   `wait` tasks' XCom timelines; the exit code is 0 only if the outcome matches the walkthrough.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from devtools.airflow import running_airflow
from devtools.kubesim_process import start_kubesim
from devtools.postgres import metadata_database

DAG_ID = "text_classifier_finetune"
TIME_SCALE = float(os.environ.get("DEMO_TIME_SCALE", "10"))
DEADLINE_SECONDS = 300
BACKFILL_CONF = {"priority": "prod-priority", "epochs": 12}
"""Asks for prod: the priority policy must still give the backfill's runs dev-priority. 60 s installing
the runtime env's packages plus 12 epochs of 20 s = 300 simulated s = 30 s at the default time scale
(kubesim/README.md), long enough for the prod run to be submitted while a backfill RayJob still runs,
after the browser tests have looked at the queue (``walkthrough``'s ``before_prod``). With 3 epochs,
two dev RayJobs ended before the prod run's submit task had started, and nothing was preempted."""


def rayjobs(kubeconfig: Path) -> list[dict]:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        return client.CustomObjectsApi(api).list_namespaced_custom_object(
            "ray.io", "v1", "ray", "rayjobs", label_selector=f"airflow.apache.org/dag-id={DAG_ID}"
        )["items"]
    finally:
        api.close()


def wait_until(predicate, what: str, deadline: float, interval: float = 1.0):
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"gave up waiting for {what}")


def running_backfill_rayjob(jobs: list[dict]) -> dict | None:
    """A RayJob of a backfill run that runs (the DAG is unpaused, so its scheduled run may hold the queue
    first, and the prod run must preempt a run of the backfill)."""
    for job in jobs:
        run_id = (job["metadata"].get("annotations") or {}).get("airflow.apache.org/run-id", "")
        if (
            run_id.startswith("backfill__")
            and (job.get("status") or {}).get("jobDeploymentStatus") == "Running"
        ):
            return job
    return None


@dataclass
class Walkthrough:
    prod_run_id: str
    runs: dict[str, dict]
    """Run id -> the finished run, for the three backfill runs and the prod run."""


def walkthrough(
    airflow,
    kubeconfig: Path,
    *,
    first_day: date,
    deadline: float,
    say: Callable[[str], None] = print,
    before_prod: Callable[[], None] = lambda: None,
    after_prod: Callable[[str], None] = lambda prod_run_id: None,
) -> Walkthrough:
    """The walkthrough's steps against a running Airflow (``devtools.airflow``): a backfill of three days
    from ``first_day``, a manual prod run once a backfill RayJob runs, and every run waited for. ``make
    demo`` runs it on an Airflow of its own; tests/browser/test_kueue_ui.py on the browser tests' Airflow,
    with browsers looking at two moments: ``before_prod`` (a backfill RayJob runs, two wait behind it) and
    ``after_prod`` (the prod run was triggered; it is given the run's id)."""
    airflow.set_paused(DAG_ID, False)
    say(
        f"1. Backfill of 3 days, conf {BACKFILL_CONF}: dev-priority runs (backfills are clamped to dev-priority)"
    )
    _, failures = airflow.create_backfill(
        {
            "dag_id": DAG_ID,
            "from_date": f"{first_day}T00:00:00Z",
            "to_date": f"{first_day + timedelta(days=2)}T00:00:00Z",
            "max_active_runs": 3,
            "dag_run_conf": BACKFILL_CONF,
        },
        timeout=deadline - time.monotonic(),
    )
    if failures:
        say(f"   (Airflow failed {failures} attempt(s) first: its database was busy)")

    def dag_runs(**query) -> list[dict]:
        response = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns", params={"limit": 100, **query})
        response.raise_for_status()
        return response.json()["dag_runs"]

    backfill = wait_until(
        lambda: len(runs := dag_runs(run_type="backfill")) == 3 and runs, "the 3 backfill runs", deadline
    )
    wait_until(lambda: running_backfill_rayjob(rayjobs(kubeconfig)), "a backfill RayJob to run", deadline)
    before_prod()
    say("2. Manual prod run: {'priority': 'prod-priority'}")
    prod_run_id = airflow.trigger_dag_run(DAG_ID, {"priority": "prod-priority"})
    after_prod(prod_run_id)
    say("3. Waiting for every run to finish...")

    def finished() -> dict[str, dict] | None:
        ours = {r["dag_run_id"] for r in backfill} | {prod_run_id}
        runs = {r["dag_run_id"]: r for r in dag_runs() if r["dag_run_id"] in ours}
        done = len(runs) == 4 and all(r["state"] in ("success", "failed") for r in runs.values())
        return runs if done else None

    return Walkthrough(prod_run_id, wait_until(finished, "every run to finish", deadline, interval=2))


def timeline_rows(airflow, runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        run_id = run["dag_run_id"]
        response = airflow.api(
            "GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/wait/xcomEntries/timeline"
        )
        timeline = response.json().get("value", {}) if response.status_code == 200 else {}
        submitted = airflow.api(
            "GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/submit/xcomEntries/rayjob"
        )
        rayjob = submitted.json().get("value", {}) if submitted.status_code == 200 else {}
        rows.append(
            {
                "run": run_id,
                "priority": rayjob.get("priority", "?"),
                "queued": float(timeline.get("queued_seconds") or 0.0),
                "preemptions": int(timeline.get("preemption_count") or 0),
                "result": run["state"],
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    print(f"\n{'run':<44} {'priority':<14} {'queued s':>9} {'preemptions':>12}  result")
    for row in rows:
        print(
            f"{row['run']:<44} {row['priority']:<14} {row['queued']:>9.1f} {row['preemptions']:>12}  {row['result']}"
        )


def matches_walkthrough(rows: list[dict]) -> list[str]:
    """What differs from the walkthrough; empty when the demo reproduced it."""
    problems = []
    dev = [r for r in rows if r["priority"] == "dev-priority"]
    prod = [r for r in rows if r["priority"] == "prod-priority"]
    if len(dev) != 3 or len(prod) != 1:
        problems.append(f"expected 3 dev and 1 prod run, got {len(dev)} dev and {len(prod)} prod")
    if any(r["result"] != "success" for r in rows):
        problems.append("not every run succeeded")
    if prod and prod[0]["preemptions"] != 0:
        problems.append("the prod run was preempted")
    if sum(r["preemptions"] for r in dev) < 1:
        problems.append("no dev run was preempted by the prod run")
    if sum(1 for r in dev if r["queued"] > 0) < 2:
        problems.append("dev runs did not queue behind each other")
    return problems


def main() -> int:
    deadline = time.monotonic() + DEADLINE_SECONDS
    with tempfile.TemporaryDirectory(prefix="kueue-ray-demo-") as workdir:
        kubesim = start_kubesim(Path(workdir) / "kubesim", queues="single-queue", time_scale=TIME_SCALE)
        try:
            with (
                metadata_database() as database_url,
                running_airflow(
                    Path(workdir) / "airflow", kubeconfig=kubesim.kubeconfig, database_url=database_url
                ) as airflow,
            ):
                airflow.wait_for_dags([DAG_ID])
                first_day = datetime.now(UTC).date() - timedelta(days=3)
                done = walkthrough(airflow, kubesim.kubeconfig, first_day=first_day, deadline=deadline)
                rows = timeline_rows(airflow, sorted(done.runs.values(), key=lambda r: r["dag_run_id"]))
        finally:
            kubesim.stop()
    print_table(rows)
    problems = matches_walkthrough(rows)
    for problem in problems:
        print(f"MISMATCH: {problem}")
    print("\nOutcome matches the walkthrough." if not problems else "\nOutcome differs from the walkthrough.")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
