"""Fine-tune a PyTorch Lightning text classifier as a Kueue-admitted RayJob (the "Priority Scheduling with
RayJob and Kueue" walkthrough, as an Airflow DAG).

Declarative on purpose: the DAG only wires the operator and the sensor; which priority a run gets is
decided by ``kueue_ray.priority`` inside the operator, from how the run was started.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.params import (
    NAMESPACE,
    PRIORITY_CLASSES,
    bounded_int,
    priority_param,
    queue_param,
    timeout_param,
)
from kueue_ray.sensors import RayJobSensor

DOC = """
### Text classifier fine-tune

Runs KubeRay's PyTorch Lightning text-classifier sample as a RayJob in namespace `ray`, queued by Kueue:
**submit** creates the RayJob (suspended until Kueue admits it), **wait** follows it through queueing,
admission, preemption and completion, and writes a timeline to XCom (`timeline`).

Priority (WorkloadPriorityClass) by run type:

| run | priority |
|---|---|
| scheduled (daily) | `dev-priority` |
| manual (Trigger form) | the form's **priority** |
| backfill | clamped to `dev-priority`, whatever the form says (the task log says so) |

A prod-priority run preempts a running dev-priority one in the same ClusterQueue; the preempted RayJob
goes back to the queue and is re-admitted later (the timeline counts the preemptions).

With the single-queue setup exactly one of these RayJobs runs at a time; pick `team-a`/`team-b` as
**queue** when the cluster uses the team-queues setup.
"""

with DAG(
    dag_id="text_classifier_finetune",
    description="PyTorch Lightning text classifier fine-tune as a prioritized RayJob (Kueue + KubeRay)",
    doc_md=DOC,
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,  # int params stay ints in the RayJob (replicas, epochs)
    max_active_runs=3,
    tags=["ray", "kueue", "training", "walkthrough"],
    default_args={
        "owner": "ml-platform",
        "retries": 2,
        "retry_delay": timedelta(minutes=1),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=15),
    },
    params={
        "priority": priority_param(
            "Kueue WorkloadPriorityClass for manual runs. Scheduled runs use dev-priority; "
            "backfills are clamped to dev-priority."
        ),
        "queue": queue_param(
            "user-queue",
            "Kueue LocalQueue in namespace ray; which exist depends on the installed setup.",
            explained=True,
        ),
        "epochs": bounded_int(
            3, 1, 50, title="Epochs", description="Passes over the training data.", section="Training"
        ),
        "batch_size": bounded_int(
            16,
            1,
            512,
            title="Batch size per worker",
            description="Examples each Ray Train worker processes per step.",
            section="Training",
        ),
        "num_workers": bounded_int(
            1,
            1,
            8,
            title="Ray Train workers (one GPU each)",
            description="The RayJob asks Kueue for this many GPUs (the head's and one per extra worker pod). "
            "The single-queue setup has one GPU: more than 1 needs team-a/team-b (the team-queues setup).",
            section="Training",
        ),
        "queue_timeout": timeout_param(None, "Queue timeout", "How long the RayJob may wait for admission."),
        "run_timeout": timeout_param(2 * 3600, "Run timeout", "How long the RayJob may run once admitted."),
    },
):
    submit = SubmitRayJobOperator(
        task_id="submit",
        template="text-classifier",
        namespace=NAMESPACE,
        local_queue="{{ params.queue }}",
        priority="dev-priority",
        priority_policy={"allowed": PRIORITY_CLASSES},
        values={"num_workers": "{{ params.num_workers }}", "num_epochs": "{{ params.epochs }}"},
        runtime_env={"env_vars": {"BATCH_SIZE": "{{ params.batch_size }}"}},
        wait_for_completion=False,
    )
    wait = RayJobSensor(
        task_id="wait",
        submit_task_id="submit",
        namespace=NAMESPACE,
        queue_timeout="{{ params.queue_timeout }}",
        run_timeout="{{ params.run_timeout }}",
    )
    submit >> wait
