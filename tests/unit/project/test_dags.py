"""The DAG files as Airflow and users see them: they parse, stay cheap to parse, and offer exactly the
priority classes and queues the Kueue manifests define."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DAGS_DIR = ROOT / "dags"
KUEUE_DIR = ROOT / "include" / "manifests" / "kueue"
DAG_IDS = {"text_classifier_finetune", "aurora_finetune_and_serve", "llm_train_and_batch_inference"}
"""The pipelines; ``kueue_ray_janitor`` is the maintenance DAG next to them."""
JANITOR = "kueue_ray_janitor"
RUNTIME_ONLY = (
    "kueue_ray.hook",
    "kueue_ray.async_hook",
    "kueue_ray.manifests",
    "kueue_ray.templates",
    "kueue_ray.validation",
    "kueue_ray.trigger",
    "kueue_ray.hub",
    "kueue_ray.kube.listwatch",
    "kueue_ray.status",
    "kueue_ray.rayservice.hook",
    "kueue_ray.rayservice.status",
    "kueue_ray.rayservice.trigger",
    "kueue_ray.kube.essential",
    "kueue_ray.kube.refusals",
    "kueue_ray.kube.shared_client",
    "kueue_ray.trigger_base",
    "kueue_ray.rayservice.rollout",
)
"""Plugin modules only a worker or the triggerer needs; a parse must not pay for importing them."""


def manifest_names(kind: str) -> set[str]:
    return {
        doc["metadata"]["name"]
        for path in KUEUE_DIR.rglob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == kind
    }


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS_DIR))


def test_dagbag_has_the_three_pipelines_and_the_janitor_without_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAG_IDS | {JANITOR}


def test_the_janitor_sweeps_the_pipelines_namespace_regularly_and_can_dry_run(dagbag):
    from kueue_ray.params import NAMESPACE

    dag = dagbag.dags[JANITOR]
    assert dag.max_active_runs == 1 and not dag.catchup
    assert dag.params.dump() == {"namespaces": [NAMESPACE], "dry_run": False, "retention_days": None}
    [task] = dag.tasks
    native = dag.get_template_env()  # render_template_as_native_obj: lists and booleans stay typed
    assert task.render_template(task.namespaces, {"params": dag.params.dump()}, native) == [NAMESPACE]
    assert task.render_template(task.dry_run, {"params": {"dry_run": True}}, native) is True
    # An empty retention Param leaves the option's value in force; a number overrides it.
    assert task.render_template(task.retention_days, {"params": dag.params.dump()}, native) is None
    assert task.render_template(task.retention_days, {"params": {"retention_days": 0.5}}, native) == 0.5


def test_parsing_the_dag_files_imports_no_kubernetes_client_nor_runtime_plugin_modules(tmp_path):
    """In a fresh interpreter, as the dag-processor parses: after each file, no Kubernetes client, and
    none of the plugin modules that only execution needs (hook, manifests, trigger, watch hub, status)."""
    code = (
        "import importlib.util, pathlib, sys\n"
        f"for path in sorted(pathlib.Path({str(DAGS_DIR)!r}).glob('*.py')):\n"
        "    spec = importlib.util.spec_from_file_location(path.stem, path)\n"
        "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "    loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'kubernetes_asyncio')\n"
        f"                    or m in {RUNTIME_ONLY!r})\n"
        "    print(path.name, ','.join(loaded) or '-')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}",
            "PATH": "/usr/bin:/bin",
            "AIRFLOW_HOME": str(tmp_path),
        },
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = dict(
        line.split(" ", 1)
        for line in result.stdout.splitlines()
        if line.endswith((".py -", "-")) or ".py " in line
    )
    assert set(report) == {p.name for p in DAGS_DIR.glob("*.py")}
    assert set(report.values()) == {"-"}, report


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_each_dag_is_documented_owned_retried_and_bounded(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert dag.doc_md and len(dag.doc_md) > 200
    assert {"ray", "kueue"} <= set(dag.tags)
    assert dag.catchup is False
    assert 1 <= dag.max_active_runs <= 3
    for task in dag.tasks:
        assert task.owner not in (None, "", "airflow"), task.task_id
        assert task.retries >= 1 and task.retry_exponential_backoff, task.task_id


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_trigger_form_offers_the_installed_priority_classes_and_queues(dagbag, dag_id):
    params = dagbag.dags[dag_id].params
    priority = params.get_param("priority").schema
    assert set(priority["enum"]) == manifest_names("WorkloadPriorityClass")
    assert set(priority["values_display"]) == set(priority["enum"])
    assert set(params.get_param("queue").schema["enum"]) == manifest_names("LocalQueue")


PRIORITY_DISPLAY = {
    "dev-priority": "dev-priority (100): waits behind production, may be preempted",
    "prod-priority": "prod-priority (1000): admitted first, preempts dev-priority work",
}
QUEUE_DISPLAY = {
    "user-queue": "user-queue (single-queue setup)",
    "team-a": "team-a (team-queues setup)",
    "team-b": "team-b (team-queues setup)",
    "multikueue-queue": "multikueue-queue (MultiKueue setup: runs on a worker cluster)",
}


def choice(value: str, enum: list[str], title: str, description: str, display: dict | None = None) -> dict:
    """A scheduling choice as Airflow serializes it for the Trigger form: no section, so it shows in the
    form's first section, the one open by default."""
    schema = {"type": "string", "enum": enum, "title": title}
    if display is not None:
        schema["values_display"] = display
    return {"value": value, "description": description, "schema": schema, "source": None}


PRIORITIES = ["dev-priority", "prod-priority"]
QUEUES = ["user-queue", "team-a", "team-b", "multikueue-queue"]
SCHEDULING_FORMS = {
    "text_classifier_finetune": {
        "priority": choice(
            "dev-priority",
            PRIORITIES,
            "Priority",
            "Kueue WorkloadPriorityClass for manual runs. Scheduled runs use dev-priority; "
            "backfills are clamped to dev-priority.",
            PRIORITY_DISPLAY,
        ),
        "queue": choice(
            "user-queue",
            QUEUES,
            "LocalQueue",
            "Kueue LocalQueue in namespace ray; which exist depends on the installed setup.",
            QUEUE_DISPLAY,
        ),
    },
    "aurora_finetune_and_serve": {
        "priority": choice(
            "dev-priority",
            PRIORITIES,
            "Fine-tune priority",
            "WorkloadPriorityClass of the fine-tune for manual runs.",
            PRIORITY_DISPLAY,
        ),
        "queue": choice(
            "team-a",
            QUEUES,
            "LocalQueue",
            "Kueue LocalQueue in namespace ray for the fine-tune and the service.",
        ),
        "serve_priority": choice(
            "prod-priority",
            PRIORITIES,
            "Serving priority",
            "WorkloadPriorityClass of the RayService; prod keeps dev work from preempting it.",
        ),
    },
    "llm_train_and_batch_inference": {
        "priority": choice(
            "dev-priority",
            PRIORITIES,
            "Priority",
            "WorkloadPriorityClass of both RayJobs for manual runs.",
            PRIORITY_DISPLAY,
        ),
        "queue": choice("team-a", QUEUES, "LocalQueue", "Kueue LocalQueue in namespace ray."),
    },
}
"""Each DAG's scheduling choices as users know them; the shared ``kueue_ray.params`` factories must render it
unchanged: same defaults, titles, descriptions, choices and labels."""


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_scheduling_choices_of_the_trigger_form_are_rendered_as_users_know_them(dagbag, dag_id):
    params = dagbag.dags[dag_id].params
    open_section = {key for key in params if not params.get_param(key).schema.get("section")}
    assert open_section == set(SCHEDULING_FORMS[dag_id]), "only priority and queue, always in view"
    for key, expected in SCHEDULING_FORMS[dag_id].items():
        assert params.get_param(key).serialize() == expected, key
    assert list(params)[: len(open_section)] == list(SCHEDULING_FORMS[dag_id]), "scheduling comes first"


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_every_param_says_what_it_is_and_every_number_its_range(dagbag, dag_id):
    from kueue_ray.params import integer_range

    params = dagbag.dags[dag_id].params
    for key in params:
        param = params.get_param(key)
        assert param.description and param.schema.get("title"), f"{dag_id}.{key} has no title/description"
        if param.schema.get("type") in ("integer", "number"):
            bounds = integer_range(param)
            assert bounds is not None, f"{dag_id}.{key} is a number without a range"
            low, high = bounds
            assert f"{low} to {high}" in param.description, f"{dag_id}.{key} does not show its range"
            # Airflow 3.3's number field clamps to minimum/maximum: a range written that way would
            # silently run another value than the one typed.
            assert "minimum" not in param.schema and "maximum" not in param.schema, key


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_an_out_of_range_number_is_refused_naming_the_param_not_clamped(dagbag, dag_id):
    from airflow.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    # What the API server checks a trigger's (or a backfill's) conf with: the serialized DAG's params.
    server_params = DagSerialization.from_dict(DagSerialization.to_dict(dagbag.dags[dag_id])).params
    from kueue_ray.params import integer_range

    for key in dagbag.dags[dag_id].params:
        bounds = integer_range(dagbag.dags[dag_id].params.get_param(key))
        if bounds is None:
            continue
        low, high = bounds
        assert server_params.deep_merge({key: high}).validate()[key] == high
        with pytest.raises(
            ParamValidationError, match=f"param {key}: {low - 1} is less than the minimum of {low}"
        ):
            server_params.deep_merge({key: low - 1}).validate()
        with pytest.raises(
            ParamValidationError, match=f"param {key}: {high + 1} is greater than the maximum"
        ):
            server_params.deep_merge({key: high + 1}).validate()


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_every_rayjob_follows_the_priority_policy(dagbag, dag_id):
    from kueue_ray.operators import SubmitRayJobOperator

    submits = [t for t in dagbag.dags[dag_id].tasks if isinstance(t, SubmitRayJobOperator)]
    assert submits
    for task in submits:
        assert task.priority == "dev-priority", "scheduled runs default to dev-priority"
        assert set(task.priority_policy["allowed"]) == manifest_names("WorkloadPriorityClass")
        assert not task.priority_policy.get("allow_backfill_priority"), "backfills must be clamped"
        assert task.namespace == "ray"


def test_text_classifier_runs_daily_as_submit_then_sensor(dagbag):
    dag = dagbag.dags["text_classifier_finetune"]
    assert dag.schedule == "@daily"
    assert dag.get_task("wait").upstream_task_ids == {"submit"}
    assert dag.get_task("submit").wait_for_completion is False


def test_text_classifier_wait_bounds_are_params(dagbag):
    """Empty queue_timeout keeps the default bound; a run may set its own, or "inf" for none."""
    from kueue_ray.bounds import DEFAULT_QUEUE_TIMEOUT
    from kueue_ray.wait_policy import WaitPolicy

    dag = dagbag.dags["text_classifier_finetune"]
    wait, native = dag.get_task("wait"), dag.get_template_env()
    params = dag.params.dump()
    rendered = {
        name: wait.render_template(getattr(wait, name), {"params": params}, native)
        for name in ("queue_timeout", "run_timeout")
    }
    assert rendered == {"queue_timeout": None, "run_timeout": 7200}
    policy = WaitPolicy.from_dict(rendered)
    assert (policy.queue_timeout, policy.run_timeout) == (DEFAULT_QUEUE_TIMEOUT, 7200)
    override = wait.render_template(
        wait.queue_timeout, {"params": {**params, "queue_timeout": "inf"}}, native
    )
    assert WaitPolicy.from_dict({"queue_timeout": override}).queue_timeout is None


def test_model_and_checkpoint_assets_link_producers_and_consumers(dagbag):
    aurora = dagbag.dags["aurora_finetune_and_serve"]
    assert [a.name for a in aurora.get_task("publish_checkpoint").outlets] == ["aurora_finetuned_checkpoint"]
    llm = dagbag.dags["llm_train_and_batch_inference"]
    assert [a.name for a in llm.get_task("publish_model").outlets] == ["llm_finetuned_model"]
    assert [a.name for a in llm.get_task("latest_model").inlets] == ["llm_finetuned_model"]
    assert "latest_model" in llm.get_task("batch_inference").upstream_task_ids


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_dag_serializes_as_the_dag_processor_stores_it(dagbag, dag_id):
    """The dag-processor (and dag.test) serialize every DAG; a DAG that cannot be serialized never
    reaches the scheduler or the UI."""
    from airflow.serialization.serialized_objects import DagSerialization

    DagSerialization.serialize_dag(dagbag.dags[dag_id])


def team_nominal_gpus() -> set[int]:
    return {
        int(resource["nominalQuota"])
        for path in (KUEUE_DIR / "team-queues").glob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == "ClusterQueue"
        for group in doc["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
        if resource["name"] == "nvidia.com/gpu"
    }


@pytest.mark.parametrize(
    ("dag_id", "task_id", "workers_param"),
    [
        ("aurora_finetune_and_serve", "finetune", "gpu_workers"),
        ("llm_train_and_batch_inference", "train", "train_gpu_workers"),
    ],
)
def test_default_fine_tunes_fit_one_teams_guaranteed_gpus(dagbag, dag_id, task_id, workers_param):
    """A fine-tune that needs more than a team's own GPUs is never admitted while anything else in the
    cohort holds one (the Aurora service does, until torn down); the defaults must not ask for that."""
    from kueue_ray.manifests import render_template, total_request

    dag = dagbag.dags[dag_id]
    task = dag.get_task(task_id)
    assert task.values["gpu_workers"] == f"{{{{ params.{workers_param} }}}}"
    workers = dag.params.get_param(workers_param).value
    gpus = int(total_request(render_template(task.template, {"gpu_workers": workers}))["nvidia.com/gpu"])
    assert {gpus} == team_nominal_gpus()


def test_pipeline_dags_hold_no_kubernetes_code_even_inside_tasks():
    """Declarative DAG files: every call to the cluster lives in the plugin's operators, never in a task
    function of a DAG (not even one imported lazily when it runs)."""
    import ast

    forbidden = {
        "kubernetes",
        "kubernetes_asyncio",
        "kueue_ray.hook",
        "kueue_ray.rayservice.hook",
        "kueue_ray.hub",
    }
    for path in DAGS_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        offending = {m for m in imported if m in forbidden or m.split(".")[0] in forbidden}
        assert offending == set(), f"{path.name} imports {sorted(offending)}"


def test_aurora_serves_the_published_checkpoint_through_the_deploy_operator(dagbag):
    from kueue_ray.publish import PublishRayJobOutputOperator
    from kueue_ray.serving import DeployRayServiceOperator

    dag = dagbag.dags["aurora_finetune_and_serve"]
    publish, deploy = dag.get_task("publish_checkpoint"), dag.get_task("deploy_serve")
    assert isinstance(publish, PublishRayJobOutputOperator) and isinstance(deploy, DeployRayServiceOperator)
    assert deploy.upstream_task_ids == {"publish_checkpoint"}
    assert "publish_checkpoint" in deploy.values["model_path"]
    assert (deploy.template, deploy.namespace, deploy.mode) == (
        "aurora-serve",
        "ray",
        "{{ params.serve_mode }}",
    )
    assert dag.params.get_param("serve_mode").value == "upgrade"
    llm = dagbag.dags["llm_train_and_batch_inference"]
    assert isinstance(llm.get_task("publish_model"), PublishRayJobOutputOperator)
