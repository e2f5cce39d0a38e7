"""The one DAG the browser tests' restricted user may read: its own bundle, owned by team `sandbox`.

It submits a small RayJob to the team-queues LocalQueue `team-b` (away from the walkthrough's single
queue) and waits for it in its worker slot (``deferrable=False``): a team's deferred tasks would need a
triggerer of that team.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG
from kueue_ray.operators import SubmitRayJobOperator

with DAG(
    dag_id="sandbox_rayjob",
    description="browser tests: the only DAG the restricted user can read",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["browser-tests"],
):
    SubmitRayJobOperator(
        task_id="submit",
        template="text-classifier",
        namespace="ray",
        local_queue="team-b",
        priority="dev-priority",
        deferrable=False,
        poll_interval=1.0,
    )
