"""Benchmark-only DAGs (``bench.task_end``): the pipelines' submit → wait shape twice, identical but for
where the sensor's success ends: in the triggerer (as shipped) or on a worker (``end_in_triggerer=False``);
and Airflow's floor beside them (``bench.floor``): one task that defers at once and ends in the triggerer
when the benchmark raises its flag.

A short RayJob (``sleep 5``) so that 50 runs of each take minutes. They live in their own DAG bundle, which
only the benchmark adds, so ``make run`` and the DAG integrity tests see only the pipelines.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.sensors import RayJobSensor

from bench.floor import FlagOperator

NAMESPACE = "ray"


def submit_then_wait(*, end_in_triggerer: bool) -> None:
    submit = SubmitRayJobOperator(
        task_id="submit",
        template="text-classifier",
        namespace=NAMESPACE,
        local_queue="user-queue",
        priority="dev-priority",
        entrypoint="sleep 5",
        wait_for_completion=False,
    )
    wait = RayJobSensor(
        task_id="wait", submit_task_id="submit", namespace=NAMESPACE, end_in_triggerer=end_in_triggerer
    )
    submit >> wait


with DAG(
    dag_id="bench_end_in_triggerer",
    description="bench: a successful RayJob ends the sensor in the triggerer (the default)",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["bench"],
):
    submit_then_wait(end_in_triggerer=True)


with DAG(
    dag_id="bench_end_on_worker",
    description="bench: a successful RayJob resumes the sensor on a worker (end_in_triggerer=False)",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["bench"],
):
    submit_then_wait(end_in_triggerer=False)


with DAG(
    dag_id="bench_floor",
    description="bench: Airflow's floor, a deferred task ended in the triggerer the moment a flag file appears",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=200,  # every run defers at once and waits for its flag
    tags=["bench"],
):
    FlagOperator(task_id="wait")
