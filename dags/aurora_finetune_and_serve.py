"""Fine-tune Microsoft's Aurora weather model as a Kueue-admitted RayJob, publish the checkpoint as an
Asset, and serve it with Ray Serve (a Kueue-managed RayService) — the AKS example's steps 1 and 2.

The plugin has an operator for RayJobs only, so the three serving steps are small tasks here that import
the Kubernetes client and the plugin's hook, manifests and naming when they run (never when the file is
parsed).
"""

from __future__ import annotations

import hashlib
import time
from datetime import datetime, timedelta

from airflow.sdk import DAG, Asset, Param, task
from airflow.sdk.exceptions import AirflowException
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.params import NAMESPACE, PRIORITY_CLASSES, priority_param, queue_param
from kueue_ray.sensors import RayJobSensor

CONN_ID = "kubernetes_default"
SERVE_APPLICATION = "aurora-forecast"
"""The Serve application name in include/manifests/rayjobs/aurora-serve.yaml.j2."""

AURORA_CHECKPOINT = Asset(name="aurora_finetuned_checkpoint", uri="file:///mnt/models/aurora-finetuned")
"""Each successful fine-tune adds an event whose extra names the checkpoint, RayJob, queue, priority and
timeline."""

DOC = """
### Aurora fine-tune and serve

1. **finetune** / **wait_finetune**: Aurora fine-tune as a RayJob (Ray Train, GPU workers) in Kueue.
2. **publish_checkpoint**: an event on the asset `aurora_finetuned_checkpoint` with the checkpoint path
   and how it was made (RayJob, queue, priority, queue/run timeline).
3. **deploy_serve**: a RayService (Ray Serve) for that checkpoint, submitted to Kueue at the serve
   priority; waits until KubeRay reports it `Ready`.
4. **smoke_check**: the Serve application must be `RUNNING` with every deployment `HEALTHY`; with
   **endpoint_url** set (an ingress or `kubectl port-forward svc/<name>-serve-svc 8000`) it also sends
   one request and expects HTTP 2xx.
5. **teardown_previous** (param): deletes the RayServices earlier runs of this DAG deployed, so only the
   new one holds GPUs.

Queues: the fine-tune needs 4 GPUs per worker; use the team-queues setup (`team-a` / `team-b`). The
single-queue setup (1 GPU) cannot hold it and the task fails at preflight with the fix.
Priority of the fine-tune follows the project policy (scheduled: `dev-priority`, manual: the form,
backfill: `dev-priority`).
"""


def serve_name(run_id: str) -> str:
    """One RayService per run, so a new model is served next to the old one until teardown."""
    return f"aurora-serve-{hashlib.sha1(run_id.encode()).hexdigest()[:8]}"


def ready_condition(rayservice: dict) -> dict:
    conditions = (rayservice.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def cluster_progress(rayservice: dict) -> str:
    """Where the service's RayCluster is, for a timeout message: a cluster that stays ``suspended`` was
    never admitted by Kueue (or its admission never reached the cluster)."""
    status = rayservice.get("status") or {}
    for role in ("pendingServiceStatus", "activeServiceStatus"):
        service_status = status.get(role) or {}
        if service_status.get("rayClusterName"):
            state = (service_status.get("rayClusterStatus") or {}).get("state") or "not ready"
            return f"{role.removesuffix('ServiceStatus')} RayCluster {service_status['rayClusterName']} is {state}"
    return "no RayCluster yet"


def unhealthy_applications(rayservice: dict) -> list[str]:
    """What is not serving, in words; empty when the application and all its deployments are up."""
    statuses = ((rayservice.get("status") or {}).get("activeServiceStatus") or {}).get(
        "applicationStatuses"
    ) or {}
    app = statuses.get(SERVE_APPLICATION)
    if app is None:
        return [f"application {SERVE_APPLICATION} not deployed (have {sorted(statuses)})"]
    problems = (
        [] if app.get("status") == "RUNNING" else [f"application {SERVE_APPLICATION} is {app.get('status')}"]
    )
    for name, deployment in (app.get("serveDeploymentStatuses") or {}).items():
        if deployment.get("status") != "HEALTHY":
            problems.append(f"deployment {name} is {deployment.get('status')}: {deployment.get('message')}")
    return problems


with DAG(
    dag_id="aurora_finetune_and_serve",
    description="Aurora weather model: fine-tune (RayJob) -> checkpoint asset -> Ray Serve (RayService)",
    doc_md=DOC,
    schedule="@weekly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,  # int params stay ints in the RayJob (replicas, epochs)
    max_active_runs=1,  # two runs would race to deploy and tear down each other's services
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
        "epochs": Param(1, type="integer", minimum=1, maximum=20, title="Epochs", section="Fine-tune"),
        "gpu_workers": Param(
            1,
            type="integer",
            minimum=1,
            maximum=2,
            title="GPU workers (4 GPUs each)",
            description="1 fits a team's guaranteed 4 GPUs next to a running service; 2 needs all 8.",
            section="Fine-tune",
        ),
        "serve_replicas": Param(
            1, type="integer", minimum=1, maximum=4, title="Serve replicas", section="Serving"
        ),
        "serve_ready_timeout": Param(
            1800, type="integer", minimum=10, title="Seconds to wait for the service", section="Serving"
        ),
        "endpoint_url": Param(
            None,
            type=["null", "string"],
            title="Smoke-check URL",
            description="Optional URL of the Serve endpoint reachable from the worker; empty: status only.",
            section="Serving",
        ),
        "teardown_previous": Param(
            True, type="boolean", title="Tear down the previous deployment", section="Serving"
        ),
    },
):
    finetune = SubmitRayJobOperator(
        task_id="finetune",
        template="aurora-finetune",
        namespace=NAMESPACE,
        queue="{{ params.queue }}",
        priority="dev-priority",
        priority_policy={"allowed": PRIORITY_CLASSES},
        values={
            "epochs": "{{ params.epochs }}",
            "gpu_workers": "{{ params.gpu_workers }}",
            "output_dir": "/mnt/models/aurora-finetuned/{{ run_id | replace(':', '-') | replace('+', '-') }}",
        },
        wait_for_completion=False,
    )
    wait_finetune = RayJobSensor(
        task_id="wait_finetune", submit_task_id="finetune", namespace=NAMESPACE, run_timeout=12 * 3600
    )

    @task(outlets=[AURORA_CHECKPOINT])
    def publish_checkpoint(**context) -> dict:
        """Record the new checkpoint, and how it was produced, as an asset event."""
        ti = context["ti"]
        rayjob = ti.xcom_pull(task_ids="finetune", key="rayjob") or {}
        timeline = ti.xcom_pull(task_ids="wait_finetune", key="timeline") or {}
        run = context["run_id"].replace(":", "-").replace("+", "-")
        extra = {
            "checkpoint": f"/mnt/models/aurora-finetuned/{run}",
            "rayjob": f"{rayjob.get('namespace')}/{rayjob.get('name')}",
            "queue": rayjob.get("queue"),
            "priority": rayjob.get("priority"),
            "timeline": {
                key: timeline.get(key)
                for key in (
                    "submitted_at",
                    "finished_at",
                    "queued_seconds",
                    "running_seconds",
                    "preemption_count",
                )
            },
        }
        context["outlet_events"][AURORA_CHECKPOINT].extra = extra
        return extra

    @task
    def deploy_serve(checkpoint: dict, **context) -> dict:
        """Create this run's RayService (adopting it on retry) and wait until KubeRay says Ready."""
        from kubernetes.client.exceptions import ApiException
        from kueue_ray.hook import RayJobHook
        from kueue_ray.manifests import build_rayservice
        from kueue_ray.operators import task_identity

        params = context["params"]
        name = serve_name(context["run_id"])
        built = build_rayservice(
            "aurora-serve",
            name=name,
            namespace=NAMESPACE,
            queue=params["queue"],
            priority=params["serve_priority"],
            identity=task_identity(context),
            values={"model_path": checkpoint["checkpoint"], "replicas": params["serve_replicas"]},
        )
        hook = RayJobHook(kubernetes_conn_id=CONN_ID)
        hook.preflight(built, NAMESPACE, params["queue"], params["serve_priority"])
        api = hook.custom_object_client
        try:
            api.create_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayservices", built.body)
            print(f"Created RayService {NAMESPACE}/{name} for {checkpoint['checkpoint']}")
        except ApiException as exc:
            if exc.status != 409:
                raise
            print(f"RayService {NAMESPACE}/{name} exists (earlier try); waiting for it")
        deadline = time.monotonic() + params["serve_ready_timeout"]
        last = None
        while True:
            service = api.get_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayservices", name)
            ready = ready_condition(service)
            said = (ready.get("status"), ready.get("reason"))
            if said != last:
                last = said
                print(
                    f"RayService {name}: Ready={ready.get('status')} {ready.get('reason')}: {ready.get('message')}"
                )
            if ready.get("status") == "True":
                return {"name": name, "namespace": NAMESPACE, "uid": service["metadata"]["uid"]}
            if time.monotonic() > deadline:
                raise AirflowException(
                    f"RayService {NAMESPACE}/{name} not Ready after {params['serve_ready_timeout']}s "
                    f"({ready.get('reason')}: {ready.get('message')}; {cluster_progress(service)}); "
                    f"kubectl -n {NAMESPACE} describe rayservice {name}"
                )
            time.sleep(5 if said[1] else 1)

    @task
    def smoke_check(deployment: dict, **context) -> None:
        """Serve must report the application RUNNING and healthy; optionally answer one request."""
        from kueue_ray.hook import RayJobHook

        api = RayJobHook(kubernetes_conn_id=CONN_ID).custom_object_client
        service = api.get_namespaced_custom_object(
            "ray.io", "v1", NAMESPACE, "rayservices", deployment["name"]
        )
        problems = unhealthy_applications(service)
        if problems:
            raise AirflowException(f"RayService {deployment['name']} is not serving: {'; '.join(problems)}")
        url = context["params"].get("endpoint_url")
        if url:
            import httpx

            response = httpx.get(url, timeout=30)
            if not response.is_success:
                raise AirflowException(f"smoke request to {url} answered HTTP {response.status_code}")
            print(f"{url} answered HTTP {response.status_code}")
        print(f"RayService {deployment['name']}: {SERVE_APPLICATION} RUNNING, all deployments HEALTHY")

    @task
    def teardown_previous(deployment: dict, **context) -> list[str]:
        """Delete the RayServices earlier runs of this DAG deployed (only when the param says so)."""
        if not context["params"]["teardown_previous"]:
            print("teardown_previous is off: earlier deployments keep running")
            return []
        from kueue_ray.hook import RayJobHook
        from kueue_ray.naming import DAG_ID_LABEL, MANAGED_BY_SELECTOR, TASK_ID_LABEL, label_value

        api = RayJobHook(kubernetes_conn_id=CONN_ID).custom_object_client
        # The RayServices deploy_serve created in any run of this DAG (build_rayservice labels them).
        selector = (
            f"{MANAGED_BY_SELECTOR},{DAG_ID_LABEL}={label_value(context['dag'].dag_id)},"
            f"{TASK_ID_LABEL}=deploy_serve"
        )
        services = (
            api.list_namespaced_custom_object(
                "ray.io", "v1", NAMESPACE, "rayservices", label_selector=selector
            ).get("items")
            or []
        )
        deleted = []
        for service in services:
            name = service["metadata"]["name"]
            if name == deployment["name"]:
                continue
            api.delete_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayservices", name)
            deleted.append(name)
            print(f"Deleted previous RayService {NAMESPACE}/{name}")
        return deleted

    checkpoint = publish_checkpoint()
    deployment = deploy_serve(checkpoint)
    finetune >> wait_finetune >> checkpoint
    smoke_check(deployment) >> teardown_previous(deployment)
