"""Train an LLM as a Kueue-admitted RayJob, publish the model as an Asset, then run batch inference on
the latest published model — the AKS example's steps 3 and 4.

The Asset is the link between the two halves: inference reads the model path from the newest asset
event, so with ``train`` off a run does inference alone on the latest model someone trained.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param, task
from airflow.sdk.exceptions import AirflowException
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.params import NAMESPACE, PRIORITY_CLASSES, bounded_int, priority_param, queue_param
from kueue_ray.publish import PublishRayJobOutputOperator
from kueue_ray.sensors import RayJobSensor

LLM_MODEL = Asset(name="llm_finetuned_model", uri="file:///mnt/models/llm-finetuned")
"""Each successful training run adds an event whose extra names the model path, RayJob, queue, priority
and timeline."""

DOC = """
### LLM train and batch inference

1. **should_train** (param **train**): off skips training and publishing.
2. **train** / **wait_train**: fine-tune a causal LM with Ray Train as a RayJob in Kueue.
3. **publish_model**: an event on the asset `llm_finetuned_model` (model path, RayJob, queue, priority,
   timeline).
4. **latest_model**: the model path of the newest event of that asset — the one just published, or, with
   training off, the latest model any run published.
5. **batch_inference** / **wait_inference**: vLLM on Ray Data over the prompts, as a second RayJob.

Training uses 4-GPU workers (**train_gpu_workers**: 1 fits a team's guaranteed 4 GPUs, 2 needs the whole
cohort's 8); inference uses 1-GPU workers. Use the team-queues setup (`team-a` / `team-b`).
Priority follows the project policy (scheduled: `dev-priority`, manual: the form, backfill: `dev-priority`).
"""


MODEL_DIR = "/mnt/models/llm-finetuned/{{ run_id | replace(':', '-') | replace('+', '-') }}"

with DAG(
    dag_id="llm_train_and_batch_inference",
    description="LLM fine-tune (RayJob) -> model asset -> vLLM batch inference (RayJob)",
    doc_md=DOC,
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,  # int params stay ints in the RayJob (replicas, epochs)
    max_active_runs=1,  # inference must read the model its own run published
    tags=["ray", "kueue", "training", "inference", "llm"],
    default_args={
        "owner": "llm-platform",
        "retries": 2,
        "retry_delay": timedelta(minutes=2),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=30),
    },
    params={
        "priority": priority_param("WorkloadPriorityClass of both RayJobs for manual runs."),
        "queue": queue_param("team-a", "Kueue LocalQueue in namespace ray."),
        "train": Param(
            True,
            type="boolean",
            title="Train a new model",
            description="Off: run batch inference alone on the latest published model.",
            section="Training",
        ),
        "base_model": Param(
            "meta-llama/Llama-3.2-1B",
            type="string",
            minLength=1,
            title="Base model",
            description="Hugging Face model id the training starts from.",
            section="Training",
        ),
        "dataset": Param(
            "tatsu-lab/alpaca",
            type="string",
            minLength=1,
            title="Training dataset",
            description="Hugging Face dataset id of the instruction data.",
            section="Training",
        ),
        "epochs": bounded_int(
            1, 1, 10, title="Epochs", description="Passes over the training dataset.", section="Training"
        ),
        "train_gpu_workers": bounded_int(
            1,
            1,
            2,
            title="Training GPU workers (4 GPUs each)",
            description="1 fits a team's guaranteed 4 GPUs; 2 needs all 8, so it waits while anything else "
            "(e.g. the Aurora service) holds a GPU in the cohort, and the other team can reclaim half of it.",
            section="Training",
        ),
        "input_path": Param(
            "az://datasets/prompts/",
            type="string",
            minLength=1,
            title="Prompts",
            description="Where batch inference reads the prompts (a path the Ray workers can read).",
            section="Inference",
        ),
        "output_path": Param(
            "az://datasets/completions/",
            type="string",
            minLength=1,
            title="Completions",
            description="Where batch inference writes the completions.",
            section="Inference",
        ),
        "inference_workers": bounded_int(
            2,
            1,
            8,
            title="Inference GPU workers",
            description="vLLM workers of one GPU each.",
            section="Inference",
        ),
    },
):

    @task.short_circuit(ignore_downstream_trigger_rules=False)
    def should_train(**context) -> bool:
        return bool(context["params"]["train"])

    train = SubmitRayJobOperator(
        task_id="train",
        template="llm-train",
        namespace=NAMESPACE,
        local_queue="{{ params.queue }}",
        priority="dev-priority",
        priority_policy={"allowed": PRIORITY_CLASSES},
        values={
            "base_model": "{{ params.base_model }}",
            "dataset": "{{ params.dataset }}",
            "epochs": "{{ params.epochs }}",
            "gpu_workers": "{{ params.train_gpu_workers }}",
            "output_dir": MODEL_DIR,
        },
        wait_for_completion=False,
    )
    wait_train = RayJobSensor(
        task_id="wait_train", submit_task_id="train", namespace=NAMESPACE, run_timeout=12 * 3600
    )

    publish_model = PublishRayJobOutputOperator(
        task_id="publish_model",
        asset=LLM_MODEL,
        path=MODEL_DIR,
        path_key="model_path",
        submit_task_id="train",
        wait_task_id="wait_train",
    )

    @task(inlets=[LLM_MODEL], trigger_rule="none_failed")
    def latest_model(**context) -> str:
        """The model path of the newest event of the model asset."""
        events = context["inlet_events"][LLM_MODEL]
        if not events:
            raise AirflowException(
                f"asset {LLM_MODEL.name} has no events yet: run once with train on before inference alone"
            )
        event = events[-1]
        print(
            f"Using model {event.extra.get('model_path')} from {event.extra.get('rayjob')} ({event.timestamp})"
        )
        return event.extra["model_path"]

    model_path = latest_model()
    batch_inference = SubmitRayJobOperator(
        task_id="batch_inference",
        template="batch-inference",
        namespace=NAMESPACE,
        local_queue="{{ params.queue }}",
        priority="dev-priority",
        priority_policy={"allowed": PRIORITY_CLASSES},
        values={
            "model_path": model_path,
            "input_path": "{{ params.input_path }}",
            "output_path": "{{ params.output_path }}",
            "gpu_workers": "{{ params.inference_workers }}",
        },
        wait_for_completion=False,
    )
    wait_inference = RayJobSensor(
        task_id="wait_inference", submit_task_id="batch_inference", namespace=NAMESPACE, run_timeout=6 * 3600
    )

    should_train() >> train >> wait_train >> publish_model >> model_path
    model_path >> batch_inference >> wait_inference
