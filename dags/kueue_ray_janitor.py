"""Delete the RayJobs no Airflow task will wait for again, so they stop holding Kueue quota.

Declarative: the rule is ``kueue_ray.orphans`` and the work ``kueue_ray.janitor``; this file only says where
and how often.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param
from kueue_ray.janitor import DeleteOrphanedRayJobsOperator
from kueue_ray.params import NAMESPACE

DOC = """
### Kueue RayJob janitor

Marking a waiting task failed (or success) deletes its RayJob through the trigger's `on_kill`, but Airflow
calls `on_kill` only for a trigger a triggerer has loaded, and never on a deferral timeout. A submitting
task whose worker died right after creating the RayJob with no retry left, a sensor whose deferral timed
out, or a deleted DAG run leave a RayJob that nobody watches and that keeps its place in the queue (or its
GPUs).

Every 15 minutes this DAG lists the active RayJobs that this Airflow deployment's tasks created (labels
`app.kubernetes.io/managed-by=airflow-kueue-ray` and `kueue-ray.airflow.apache.org/deployment`; another
Airflow sharing the cluster is never touched), asks Airflow for the state of the task instances named
in each RayJob's annotations, and deletes the orphans. A RayJob whose task may still come back (retrying,
deferred, running, not yet scheduled) or that a task handed on (`wait_for_completion=False`, succeeded,
no sensor registered) is never touched. The task log and the XCom list each orphan with the reason.

It also deletes this integration's **finished** RayJobs once they have been finished for longer than the
retention period (their Workload, submitter Job and pods go with them): `[kueue_ray] retention_days`
(default 7), or **retention_days** below for one run. Never before their DAG run and the task that collects
their result have ended.

Trigger it by hand with **dry_run** to see what it would delete.
"""

with DAG(
    dag_id="kueue_ray_janitor",
    description="Delete RayJobs no Airflow task waits for any more, and finished ones after their retention",
    doc_md=DOC,
    schedule=timedelta(minutes=15),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,  # namespaces stays a list
    tags=["ray", "kueue", "maintenance"],
    default_args={"owner": "ml-platform", "retries": 1, "retry_delay": timedelta(minutes=1)},
    params={
        "namespaces": Param(
            [NAMESPACE],
            type="array",
            items={"type": "string"},
            title="Namespaces",
            description="Where to look for orphaned RayJobs.",
        ),
        "dry_run": Param(False, type="boolean", title="Dry run", description="Only report, delete nothing."),
        "retention_days": Param(
            None,
            type=["null", "number"],
            minimum=0,
            title="Retention (days)",
            description="Days a finished RayJob is kept; empty: [kueue_ray] retention_days (default 7).",
        ),
    },
) as dag:
    DeleteOrphanedRayJobsOperator(
        task_id="delete_orphans",
        namespaces="{{ params.namespaces }}",
        dry_run="{{ params.dry_run }}",
        retention_days="{{ params.retention_days }}",
    )
