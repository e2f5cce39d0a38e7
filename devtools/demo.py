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
from datetime import UTC, datetime, timedelta
from pathlib import Path

from devtools.airflow import running_airflow
from devtools.kubesim_process import start_kubesim
from devtools.postgres import metadata_database

DAG_ID = "text_classifier_finetune"
TIME_SCALE = float(os.environ.get("DEMO_TIME_SCALE", "10"))
DEADLINE_SECONDS = 300
BACKFILL_CONF = {"epochs": 9}
"""60 s installing the runtime env's packages plus 9 epochs of 20 s = 240 simulated s = 24 s at the default
time scale (kubesim/README.md): the prod run is submitted while a backfill RayJob still runs. With the
default 3 epochs, the e2e walkthrough saw in CI two dev RayJobs end before the prod run's submit task had
started, and nothing was preempted."""


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
                today = datetime.now(UTC).date()
                print(
                    f"1. Backfill of 3 days, conf {BACKFILL_CONF}: dev-priority runs "
                    "(backfills are clamped to dev-priority)"
                )
                _, failures = airflow.create_backfill(
                    {
                        "dag_id": DAG_ID,
                        "from_date": f"{today - timedelta(days=3)}T00:00:00Z",
                        "to_date": f"{today - timedelta(days=1)}T00:00:00Z",
                        "max_active_runs": 3,
                        "dag_run_conf": BACKFILL_CONF,
                    },
                    timeout=deadline - time.monotonic(),
                )
                if failures:
                    print(f"   (Airflow failed {failures} attempt(s) first: its database was busy)")
                # A backfill RayJob, not any: the DAG is unpaused, so its scheduled run may hold the
                # queue first, and the prod run must preempt a run of the backfill.
                wait_until(
                    lambda: any(
                        (j.get("status") or {}).get("jobDeploymentStatus") == "Running"
                        and (j["metadata"].get("annotations") or {})
                        .get("airflow.apache.org/run-id", "")
                        .startswith("backfill__")
                        for j in rayjobs(kubesim.kubeconfig)
                    ),
                    "the first backfill RayJob to run",
                    deadline,
                )
                print("2. Manual prod run: {'priority': 'prod-priority'}")
                airflow.trigger_dag_run(DAG_ID, {"priority": "prod-priority"})

                def all_done():
                    runs = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns", params={"limit": 100}).json()[
                        "dag_runs"
                    ]
                    ours = [r for r in runs if r["run_type"] in ("backfill", "manual")]
                    finished = len(ours) >= 4 and all(r["state"] in ("success", "failed") for r in ours)
                    return ours if finished else None

                print("3. Waiting for every run to finish...")
                runs = wait_until(all_done, "all runs to finish", deadline, interval=2)
                rows = timeline_rows(airflow, sorted(runs, key=lambda r: r["dag_run_id"]))
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
