"""Fine-tune Microsoft's Aurora weather model as a Kueue-admitted RayJob, publish the checkpoint as an
Asset, and serve it with Ray Serve (a Kueue-managed RayService) — the AKS example's steps 1 and 2.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.params import NAMESPACE, PRIORITY_CLASSES, bounded_int, priority_param, queue_param
from kueue_ray.publish import PublishRayJobOutputOperator
from kueue_ray.sensors import RayJobSensor
from kueue_ray.serving import MODES, UPGRADE, DeployRayServiceOperator

AURORA_CHECKPOINT = Asset(name="aurora_finetuned_checkpoint", uri="file:///mnt/models/aurora-finetuned")
"""Each successful fine-tune adds an event whose extra names the checkpoint, RayJob, queue, priority and
timeline."""
CHECKPOINT = "/mnt/models/aurora-finetuned/{{ run_id | replace(':', '-') | replace('+', '-') }}"

DOC = """
### Aurora fine-tune and serve

1. **finetune** / **wait_finetune**: Aurora fine-tune as a RayJob (Ray Train, GPU workers) in Kueue.
2. **publish_checkpoint**: an event on the asset `aurora_finetuned_checkpoint` with the checkpoint path
   and how it was made (RayJob, queue, priority, queue/run timeline).
3. **deploy_serve**: Ray Serve for that checkpoint as a RayService in Kueue at the serving priority; waits
   until the Serve application is RUNNING with every deployment HEALTHY. With **serve_mode** `upgrade` every
   run deploys to the same RayService: the new checkpoint is a new cluster config, so KubeRay brings up a
   pending cluster, switches traffic once it serves and removes the old one (no downtime; Kueue must admit
   RayServices through their RayClusters, see the README). With `new_service` each run deploys its own.
   With **endpoint_url** set (an ingress or `kubectl port-forward svc/<service>-serve-svc 8000`; `{service}`,
   `{serve_service}` and `{namespace}` are filled in) it also sends one request and expects HTTP 2xx. With
   **teardown_previous** it then deletes the RayServices earlier runs deployed under other names.

Queues: the fine-tune needs 4 GPUs per worker; use the team-queues setup (`team-a` / `team-b`). The
single-queue setup (1 GPU) cannot hold it and the task fails at preflight with the fix.
Priority of the fine-tune follows the project policy (scheduled: `dev-priority`, manual: the form,
backfill: `dev-priority`).
"""


with DAG(
    dag_id="aurora_finetune_and_serve",
    description="Aurora weather model: fine-tune (RayJob) -> checkpoint asset -> Ray Serve (RayService)",
    doc_md=DOC,
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,  # int params stay ints in the RayJob (replicas, epochs)
    max_active_runs=1,  # two runs would race to update, or tear down, the same service
    tags=["ray", "kueue", "training", "serving", "aurora"],
    default_args={
        "owner": "weather-ml",
        "retries": 2,
        "retry_delay": timedelta(minutes=2),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
    },
    params={
        "priority": priority_param(
            "WorkloadPriorityClass of the fine-tune for manual runs.", title="Fine-tune priority"
        ),
        "queue": queue_param(
            "team-a", "Kueue LocalQueue in namespace ray for the fine-tune and the service."
        ),
        "serve_priority": priority_param(
            "WorkloadPriorityClass of the RayService; prod keeps dev work from preempting it.",
            title="Serving priority",
            default="prod-priority",
            explained=False,
        ),
        "epochs": bounded_int(
            1, 1, 20, title="Epochs", description="Passes over the ERA5 training data.", section="Fine-tune"
        ),
        "gpu_workers": bounded_int(
            1,
            1,
            2,
            title="GPU workers (4 GPUs each)",
            description="1 fits a team's guaranteed 4 GPUs next to a running service; 2 needs all 8.",
            section="Fine-tune",
        ),
        "serve_mode": Param(
            UPGRADE,
            type="string",
            enum=list(MODES),
            title="Deploy to",
            description="upgrade: the same RayService, switching traffic to the new model's cluster; "
            "new_service: a RayService of its own for this run.",
            section="Serving",
        ),
        "serve_replicas": bounded_int(
            1,
            1,
            4,
            title="Serve replicas",
            description="Ray Serve replicas of the model, one GPU each.",
            section="Serving",
        ),
        "serve_ready_timeout": bounded_int(
            1800,
            10,
            86400,
            title="Seconds for the service to start",
            description="From Kueue's admission of its cluster until it serves.",
            section="Serving",
        ),
        "endpoint_url": Param(
            None,
            type=["null", "string"],
            title="Smoke-check URL",
            description="Optional URL of the Serve endpoint reachable from the worker ({service}, "
            "{serve_service}, {namespace} are filled in); empty: status only.",
            section="Serving",
        ),
        "teardown_previous": Param(
            True,
            type="boolean",
            title="Tear down earlier services",
            description="Delete the RayServices earlier runs deployed under other names once this one serves.",
            section="Serving",
        ),
    },
):
    finetune = SubmitRayJobOperator(
        task_id="finetune",
        template="aurora-finetune",
        namespace=NAMESPACE,
        local_queue="{{ params.queue }}",
        priority="dev-priority",
        priority_policy={"allowed": PRIORITY_CLASSES},
        values={
            "epochs": "{{ params.epochs }}",
            "gpu_workers": "{{ params.gpu_workers }}",
            "output_dir": CHECKPOINT,
        },
        wait_for_completion=False,
    )
    wait_finetune = RayJobSensor(
        task_id="wait_finetune", submit_task_id="finetune", namespace=NAMESPACE, run_timeout=12 * 3600
    )

    publish_checkpoint = PublishRayJobOutputOperator(
        task_id="publish_checkpoint",
        asset=AURORA_CHECKPOINT,
        path=CHECKPOINT,
        path_key="checkpoint",
        submit_task_id="finetune",
        wait_task_id="wait_finetune",
    )
    deploy_serve = DeployRayServiceOperator(
        task_id="deploy_serve",
        template="aurora-serve",
        namespace=NAMESPACE,
        local_queue="{{ params.queue }}",
        priority="{{ params.serve_priority }}",
        mode="{{ params.serve_mode }}",
        values={
            "model_path": "{{ ti.xcom_pull(task_ids='publish_checkpoint')['checkpoint'] }}",
            "replicas": "{{ params.serve_replicas }}",
        },
        ready_timeout="{{ params.serve_ready_timeout }}",
        smoke_url="{{ params.endpoint_url }}",
        teardown_previous="{{ params.teardown_previous }}",
    )

    finetune >> wait_finetune >> publish_checkpoint >> deploy_serve
