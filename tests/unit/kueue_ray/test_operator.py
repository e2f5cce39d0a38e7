"""SubmitRayJobOperator without a cluster: what it submits, how it defers, how it ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kueue_ray.bounds import DEFAULT_RUN_TIMEOUT
from kueue_ray.hook import RayJobHook
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.preflight import QueueCapacity
from kueue_ray.trigger import RayJobTrigger

ROOT = Path(__file__).resolve().parents[3]

TEMPLATE = {
    "apiVersion": "ray.io/v1",
    "kind": "RayJob",
    "metadata": {"name": "x"},
    "spec": {
        "entrypoint": "python train.py",
        "submissionMode": "HTTPMode",
        "rayClusterSpec": {
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-head",
                                "image": "rayproject/ray:2.46.0",
                                "resources": {"requests": {"cpu": "1"}},
                            }
                        ]
                    }
                },
            }
        },
    },
}


class TI:
    dag_id, task_id, run_id, map_index, try_number = "pipe", "train", "scheduled__2026-12-01", -1, 1

    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


class DagRun:
    def __init__(self, run_type):
        self.run_type = run_type


@pytest.fixture
def cluster(monkeypatch):
    """The hook's cluster-facing calls, answered in memory: records what would be created."""
    created = []

    def preflight(self, built, namespace, queue, priority):
        return QueueCapacity(cluster_queue="cq", capacity={})

    def create_or_get(self, body, namespace):
        obj = {
            **body,
            "metadata": {
                **body["metadata"],
                "namespace": namespace,
                "uid": "uid-1",
                "resourceVersion": "7",
                "creationTimestamp": "2026-12-01T12:00:00Z",
            },
        }
        created.append(obj)
        return obj, True

    monkeypatch.setattr(RayJobHook, "preflight", preflight)
    monkeypatch.setattr(RayJobHook, "create_or_get_rayjob", create_or_get)
    # no earlier try left a RayJob
    monkeypatch.setattr(RayJobHook, "list_managed_rayjobs", lambda self, namespace, label_selector=None: [])
    monkeypatch.setattr(RayJobHook, "get_rayjob", lambda self, name, namespace: None)
    return created


def operator(**kwargs):
    defaults = dict(
        task_id="train", template=TEMPLATE, local_queue="team-a", priority="prod-priority", namespace="ml"
    )
    defaults.update(kwargs)
    return SubmitRayJobOperator(**defaults)


def test_execute_submits_and_defers_to_the_trigger(cluster):
    ti = TI()
    context = {"ti": ti, "dag_run": DagRun("scheduled"), "params": {}}
    with pytest.raises(TaskDeferred) as deferred:
        operator(queue_timeout=600, max_preemptions=2).execute(context)
    [body] = cluster
    labels = body["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "team-a"
    assert labels["kueue.x-k8s.io/priority-class"] == "prod-priority"
    assert body["spec"]["suspend"] is True
    trigger = deferred.value.trigger
    assert isinstance(trigger, RayJobTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert (trigger.name, trigger.namespace, trigger.uid) == (body["metadata"]["name"], "ml", "uid-1")
    assert (trigger.policy.queue_timeout, trigger.policy.max_preemptions, trigger.policy.run_timeout) == (
        600,
        2,
        DEFAULT_RUN_TIMEOUT,
    ), "run_timeout unset: bounded by its default"
    assert trigger.owner == {
        "dag_id": "pipe",
        "task_id": "train",
        "run_id": "scheduled__2026-12-01",
        "map_index": -1,
        "try_number": 1,
        "deployment": "tests",  # tests/conftest.py: [kueue_ray] deployment
    }
    assert ti.xcom["rayjob"]["uid"] == "uid-1"


@pytest.mark.parametrize("field,value", [("queue_timeout", "-1"), ("run_timeout", "soon")])
def test_a_bad_timeout_fails_the_task_before_anything_is_created(cluster, field, value):
    from airflow.sdk.exceptions import AirflowFailException

    context = {"ti": TI(), "dag_run": DagRun("scheduled"), "params": {}}
    with pytest.raises(AirflowFailException, match=f"{field}: not a timeout .* Fix: give seconds > 0"):
        operator(**{field: value}).execute(context)
    assert cluster == []


def test_backfill_runs_are_clamped_to_the_backfill_priority(cluster):
    context = {"ti": TI(), "dag_run": DagRun("backfill"), "params": {"priority": "prod-priority"}}
    policy = {"allowed": ["dev-priority", "prod-priority"]}
    with pytest.raises(TaskDeferred):
        operator(priority_policy=policy).execute(context)
    assert cluster[0]["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "dev-priority"


def test_execute_complete_pushes_the_timeline_and_fails_loudly():
    ti = TI()
    event = {
        "status": "failed",
        "reason": "AppFailed",
        "phase": "FAILED",
        "message": "Job failed due to an application error: CUDA out of memory",
        "name": "j",
        "namespace": "ml",
        "uid": "u",
        "timeline": {"queued_seconds": 61.0},
    }
    with pytest.raises(
        AirflowException, match=r"did not succeed \(failed, AppFailed\): .*CUDA out of memory"
    ):
        operator(log_tail_lines=0).execute_complete({"ti": ti}, event=event)
    assert ti.xcom["timeline"] == {"queued_seconds": 61.0}
    ok = {**event, "status": "success", "phase": "SUCCEEDED"}
    assert operator(log_tail_lines=0).execute_complete({"ti": ti}, event=ok) == {
        "name": "j",
        "namespace": "ml",
        "uid": "u",
    }


def test_importing_the_operator_and_sensor_does_not_import_kubernetes():
    code = (
        "import sys; import kueue_ray.operators, kueue_ray.sensors; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'kubernetes_asyncio')]"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT / "plugins")}
    )


def test_the_dashboard_link_opens_in_a_browser_as_soon_as_the_rayjob_exists():
    from kueue_ray.links import RayDashboardLink

    op = operator(kubernetes_conn_id="")
    op.rayjob_details = {}  # preflight refused it: nothing was created
    assert RayDashboardLink().get_link(op, ti_key=None) == "", "no RayJob, no link"
    # What execute() knows right after creating the RayJob, before it defers (the segment whose end
    # renders the links the UI shows while the task waits): no Ray cluster, no job id yet.
    op.rayjob_details = {"name": "j", "namespace": "ml", "uid": "u", "ray_cluster": None, "job_id": None}
    link = RayDashboardLink().get_link(op, ti_key=None)
    assert link == "http://localhost:8265/#/jobs"
    assert not link.startswith("kubectl")


def test_a_dashboard_template_is_filled_in_once_its_fields_are_known():
    from kueue_ray.links import RayDashboardLink

    op = operator(ray_dashboard_url_template="https://ray.example.com/{namespace}/{name}/#/jobs/{job_id}")
    op.rayjob_details = {"name": "j", "namespace": "ml", "uid": "u", "ray_cluster": None, "job_id": None}
    assert RayDashboardLink().get_link(op, ti_key=None) == "", "a half-filled URL would be broken"
    op.rayjob_details["job_id"] = "j-xyz"
    assert RayDashboardLink().get_link(op, ti_key=None) == "https://ray.example.com/ml/j/#/jobs/j-xyz"


def test_submitting_logs_the_port_forward_and_the_workload_command(cluster, capfd):
    """Commands belong in the log, not in links: the task log says how to reach the dashboard."""
    context = {"ti": TI(), "dag_run": DagRun("scheduled"), "params": {}}
    with pytest.raises(TaskDeferred):
        operator(kubernetes_conn_id="").execute(context)
    log = capfd.readouterr().out
    name = cluster[0]["metadata"]["name"]
    assert (
        f"kubectl -n ml port-forward svc/{name}-head-svc 8265:8265, then open http://localhost:8265/#/jobs"
        in log
    )
    assert "kubectl -n ml describe workloads -l kueue.x-k8s.io/job-uid=uid-1" in log


def test_the_operator_and_sensor_offer_browser_links_only():
    """The Kueue tab and the Ray dashboard: URLs a browser opens; no kubectl command as a link."""
    from kueue_ray.sensors import RayJobSensor

    sensor = RayJobSensor(task_id="wait", submit_task_id="submit")
    for task in (operator(), sensor):
        assert [link.name for link in task.operator_extra_links] == ["Kueue", "Ray dashboard"]


def test_the_kueue_link_opens_the_task_instances_kueue_tab_under_the_base_url(monkeypatch):
    from types import SimpleNamespace

    from kueue_ray.links import KueueTabLink

    run_id = "backfill__2026-10-01T00:00:00+00:00"
    key = SimpleNamespace(dag_id="text_classifier_finetune", run_id=run_id, task_id="wait", map_index=-1)
    op = operator()
    op.rayjob_details = {"namespace": "ml"}
    assert KueueTabLink().get_link(op, ti_key=key) == ""  # no RayJob yet: no link
    op.rayjob_details = {"name": "j", "namespace": "ml", "uid": "u"}
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/")
    assert KueueTabLink().get_link(op, ti_key=key) == (
        "https://airflow.example.com/dags/text_classifier_finetune/runs/"
        "backfill__2026-10-01T00%3A00%3A00%2B00%3A00/tasks/wait/plugin/kueue"
    )
    mapped = SimpleNamespace(**{**vars(key), "map_index": 3})
    assert KueueTabLink().get_link(op, ti_key=mapped).endswith("/tasks/wait/mapped/3/plugin/kueue")


def test_the_kueue_queue_does_not_replace_the_airflow_executor_queue():
    op = operator(executor_queue="gpu-workers")
    assert (op.local_queue, op.queue) == ("team-a", "gpu-workers")
    assert "local_queue" in op.template_fields and "queue" not in op.template_fields
    assert operator().queue != "team-a"


OPERATORS = ["kueue_ray.operators.SubmitRayJobOperator", "kueue_ray.serving.DeployRayServiceOperator"]


def operator_class(path: str) -> type:
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("path", OPERATORS)
def test_local_queue_names_the_kueue_queue_and_is_templated(path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        op = operator_class(path)(task_id="t", template=TEMPLATE, local_queue="{{ params.q }}", priority="p")
    assert op.local_queue == "{{ params.q }}" and "local_queue" in op.template_fields
    assert "queue" not in op.template_fields


@pytest.mark.parametrize("path", OPERATORS)
def test_queue_is_the_deprecated_name_of_local_queue(path):
    cls = operator_class(path)
    with pytest.warns(DeprecationWarning, match=r"use local_queue="):
        op = cls(task_id="t", template=TEMPLATE, queue="team-a", priority="p")
    assert op.local_queue == "team-a"
    assert op.queue == cls(task_id="u", template=TEMPLATE, local_queue="x", priority="p").queue, (
        "the LocalQueue never becomes the executor queue"
    )
    assert op.queue != "team-a"


@pytest.mark.parametrize("path", OPERATORS)
def test_local_queue_and_queue_together_is_an_error_naming_both_and_the_fix(path):
    with pytest.raises(TypeError) as error:
        operator_class(path)(task_id="t", template=TEMPLATE, local_queue="a", queue="b", priority="p")
    message = str(error.value)
    assert "local_queue='a'" in message and "queue='b'" in message and "pass only local_queue=" in message


@pytest.mark.parametrize("path", OPERATORS)
def test_a_missing_local_queue_is_an_error_naming_it(path):
    with pytest.raises(TypeError, match="needs local_queue="):
        operator_class(path)(task_id="t", template=TEMPLATE, priority="p")


@pytest.mark.parametrize("path", OPERATORS)
def test_the_dag_default_executor_queue_stays_airflows(path):
    """``default_args["queue"]`` is the executor queue of every task in the DAG: it must reach
    ``BaseOperator.queue`` and never be taken for the Kueue LocalQueue."""
    from airflow.sdk import DAG

    with DAG("d", schedule=None, default_args={"queue": "gpu-workers"}):
        op = operator_class(path)(task_id="t", template=TEMPLATE, local_queue="team-a", priority="p")
    assert (op.local_queue, op.queue) == ("team-a", "gpu-workers")


def deferred_trigger(op) -> RayJobTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({"ti": TI(), "dag_run": DagRun("manual"), "params": {}})
    return deferred.value.trigger


def test_a_success_ends_in_the_triggerer_by_default_with_the_operators_xcoms(cluster):
    trigger = deferred_trigger(operator(log_tail_lines=20))
    assert trigger.end_in_triggerer == {
        "log_tail_lines": 20,
        # The run's type (and the task's priority policy, none here) for a priority change from the tab.
        "rayjob_extra": {
            "queue": "team-a",
            "priority": "prod-priority",
            "priority_policy": None,
            "run_type": "manual",
        },
        "links": {"_link_RayDashboardLink": None},
        "push_return_value": True,
    }
    assert trigger.deferred_at is not None
    # What the triggerer gets back from the database still says so.
    assert RayJobTrigger(**trigger.serialize()[1]).end_in_triggerer == trigger.end_in_triggerer


class KeepsItsOwnEnd(SubmitRayJobOperator):
    def execute_complete(self, context, event):
        return super().execute_complete(context, event)


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda: operator(end_in_triggerer=False), None),
        (lambda: operator(on_success_callback=lambda context: None), "on_success_callback"),
        (lambda: operator(outlets=[Asset("s3://models/x")]), "outlets"),
        (
            lambda: KeepsItsOwnEnd(task_id="t", template=TEMPLATE, local_queue="q", priority="p"),
            "execute_complete",
        ),
    ],
)
def test_a_success_resumes_on_a_worker_when_the_switch_is_off_or_user_code_runs_at_the_end(
    cluster, capfd, make, why
):
    assert deferred_trigger(make()).end_in_triggerer is None
    if why:
        assert why in capfd.readouterr().out


def test_listener_plugins_keep_the_worker_path(cluster, monkeypatch):
    class Listeners:
        has_listeners = True

    monkeypatch.setattr("airflow.sdk.listener.get_listener_manager", lambda: Listeners())
    assert deferred_trigger(operator()).end_in_triggerer is None
