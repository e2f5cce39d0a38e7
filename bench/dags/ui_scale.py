"""Benchmark-only DAG (``bench.ui_scale``): one task that submits a RayJob to a ClusterQueue with a thousand
pending workloads and returns, so the Kueue tab of a task whose RayJob is pending can be timed at scale.

It lives in the benchmark's own DAG bundle, which only the benchmark adds, so ``make run`` and the DAG
integrity tests see only the pipelines.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG
from kueue_ray.operators import SubmitRayJobOperator

with DAG(
    dag_id="bench_ui_scale",
    description="bench: submit one RayJob to a long queue and return (the Kueue tab is timed on it)",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["bench"],
):
    SubmitRayJobOperator(
        task_id="submit",
        template="text-classifier",
        namespace="ray",
        local_queue="ui-scale-0",
        priority="dev-priority",
        entrypoint="sleep 5",
        wait_for_completion=False,
    )
