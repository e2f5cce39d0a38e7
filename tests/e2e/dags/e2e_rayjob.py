"""e2e-only DAGs: one SubmitRayJobOperator whose every input comes from the run's conf (as is, resuming on a
worker, with one retry, with limits), and two whose first try dies right after creating its RayJob (one
retries and adopts it, one has no retry left).

They live in their own DAG bundle (tests/e2e/conftest.py adds it), so `make run` and the DAG integrity
tests see only the pipelines. Params are free-form on purpose: the bad-input tests must reach the
operator's preflight with values the pipelines' Param enums would refuse.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime, timedelta

from airflow.sdk import DAG, Param
from kueue_ray.operators import SubmitRayJobOperator

NAMESPACE = "ray"


def conf_driven_submit(
    task_id: str, operator_class: type[SubmitRayJobOperator] = SubmitRayJobOperator, **limits
):
    return operator_class(
        task_id=task_id,
        template="{{ params.template }}",
        namespace=NAMESPACE,
        local_queue="{{ params.queue }}",
        priority="{{ params.priority }}",
        values="{{ params['values'] }}",
        entrypoint="{{ params.entrypoint }}",
        inadmissible_grace=10,
        **limits,
    )


def free_params() -> dict:
    return {
        "template": Param("text-classifier", type="string"),
        "queue": Param("user-queue", type="string"),
        "priority": Param("dev-priority", type="string"),
        "values": Param({}, type="object"),
        # A command a real cluster runs as well, e.g. "sleep infinity" for a RayJob that runs until stopped.
        "entrypoint": Param(None, type=["null", "string"]),
    }


with DAG(
    dag_id="e2e_rayjob",
    description="e2e: submit one RayJob built from the run conf and wait for it in the triggerer",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    max_active_runs=16,
    tags=["e2e"],
    params=free_params(),
):
    conf_driven_submit("submit")


with DAG(
    dag_id="e2e_on_worker",
    description="e2e: e2e_rayjob with end_in_triggerer=False: a success resumes on a worker",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    max_active_runs=16,
    tags=["e2e"],
    params=free_params(),
):
    conf_driven_submit("submit", end_in_triggerer=False)


with DAG(
    dag_id="e2e_retried",
    description="e2e: e2e_rayjob with one retry: a failed RayJob fails its try and the retry runs",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    max_active_runs=16,
    tags=["e2e"],
    default_args={"retries": 1, "retry_delay": timedelta(seconds=1)},
    params=free_params(),
):
    conf_driven_submit("submit")


GUARDED_RUN_TIMEOUT = 25.0
"""Seconds from the RayJob's admission: enough for the text-classifier template with ``sleep 30`` (60 s
installing its runtime env's packages plus 30 s: 9 s here), far less than the 40 s the e2e-checked queue's
admission check keeps it waiting with quota already reserved."""

with DAG(
    dag_id="e2e_guarded",
    description="e2e: e2e_rayjob with a run_timeout and at most one eviction for pods that never get ready",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    max_active_runs=16,
    tags=["e2e"],
    params=free_params(),
):
    conf_driven_submit("submit", run_timeout=GUARDED_RUN_TIMEOUT, max_pods_ready_evictions=1)


class DieAfterCreate(SubmitRayJobOperator):
    """Its first try SIGKILLs its own worker process right after the RayJob exists: the crash window
    between "created in the cluster" and "recorded in Airflow" that the deterministic name must cover."""

    def submit(self, hook, body, identity):
        rayjob = super().submit(hook, body, identity)
        if identity.try_number == 1:
            self.log.warning("e2e: killing this worker (pid %s) right after creating the RayJob", os.getpid())
            os.kill(os.getpid(), signal.SIGKILL)
        return rayjob


with DAG(
    dag_id="e2e_worker_death",
    description="e2e: the worker dies right after creating the RayJob; the retry must adopt it",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["e2e"],
    # Two retries, like the pipelines: under load Airflow 3.3.2's LocalExecutor can fail a resumed task
    # whose success it reports while the scheduler still sees it queued; the next try adopts again.
    default_args={"retries": 2, "retry_delay": timedelta(seconds=1)},
    params=free_params(),
):
    conf_driven_submit("submit", DieAfterCreate)


with DAG(
    dag_id="e2e_orphan",
    description="e2e: the worker dies right after creating the RayJob and no retry is left: an orphan",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    tags=["e2e"],
    default_args={"retries": 0},
    params=free_params(),
):
    conf_driven_submit("submit", DieAfterCreate)
