"""Fixtures for the kueue_ray I/O tests against kubesim over HTTP.

Airflow finds the cluster exactly as in production: through the ``kubernetes_default`` connection,
given here as an environment variable pointing at kubesim's kubeconfig. Every test gets its own
namespace, ClusterQueue, LocalQueue and WorkloadPriorityClasses, so tests sharing the session cluster
cannot see each other's quota.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, config

from tests import rayjobs

KUEUE = ("kueue.x-k8s.io", "v1beta2")


@pytest.fixture
def connection(kubesim, monkeypatch):
    """The ``kubernetes_default`` Airflow connection, pointing at kubesim."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": kubesim.kubeconfig}}),
    )
    return "kubernetes_default"


@pytest.fixture
def api(kubesim):
    """A plain ``kubernetes`` client for test setup and assertions (not the code under test)."""
    api_client = config.new_client_from_config(config_file=kubesim.kubeconfig)
    yield api_client
    api_client.close()


@dataclass
class Queues:
    """One test's Kueue setup: a namespace with a LocalQueue in front of its own ClusterQueue."""

    namespace: str
    local_queue: str
    cluster_queue: str
    high: str
    low: str
    custom: client.CustomObjectsApi
    core: client.CoreV1Api
    created: list[tuple[str, str]] = field(default_factory=list)

    def rayjobs(self) -> list[dict]:
        return self.custom.list_namespaced_custom_object("ray.io", "v1", self.namespace, "rayjobs")["items"]

    def workload(self, uid: str) -> dict | None:
        items = self.custom.list_namespaced_custom_object(
            *KUEUE, self.namespace, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={uid}"
        )["items"]
        return items[0] if items else None


@pytest.fixture
def queues(api, unique_name, connection) -> Queues:
    """cpu 2 / memory 8G / 1 GPU, preemption of lower priorities within the ClusterQueue (seed 000)."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    setup = Queues(
        namespace=unique_name,
        local_queue="user-queue",
        cluster_queue=f"{unique_name}-cq",
        high=f"{unique_name}-prod",
        low=f"{unique_name}-dev",
        custom=custom,
        core=core,
    )
    core.create_namespace({"metadata": {"name": setup.namespace}})
    cluster_scoped = [
        ("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": f"{unique_name}-flavor"}}),
        (
            "clusterqueues",
            {
                "kind": "ClusterQueue",
                "metadata": {"name": setup.cluster_queue},
                "spec": {
                    "namespaceSelector": {},
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": f"{unique_name}-flavor",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "2"},
                                        {"name": "memory", "nominalQuota": "8G"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": "1"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
        (
            "workloadpriorityclasses",
            {"kind": "WorkloadPriorityClass", "metadata": {"name": setup.high}, "value": 1000},
        ),
        (
            "workloadpriorityclasses",
            {"kind": "WorkloadPriorityClass", "metadata": {"name": setup.low}, "value": 100},
        ),
    ]
    for plural, body in cluster_scoped:
        custom.create_cluster_custom_object(*KUEUE, plural, {"apiVersion": "/".join(KUEUE), **body})
        setup.created.append((plural, body["metadata"]["name"]))
    custom.create_namespaced_custom_object(
        *KUEUE,
        setup.namespace,
        "localqueues",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "LocalQueue",
            "metadata": {"name": setup.local_queue},
            "spec": {"clusterQueue": setup.cluster_queue},
        },
    )
    yield setup
    core.delete_namespace(setup.namespace)
    for plural, name in reversed(setup.created):
        try:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def rayjob_body():
    """Factory for a seed-000-sized RayJob template dict (see ``make_rayjob_body``)."""
    return make_rayjob_body


@pytest.fixture
def task_context():
    """Factory: ``task_context(task_id, try_number=1, run_type="manual")`` -> Airflow-like context."""

    def build(
        task_id: str, *, try_number: int = 1, run_type: str = "manual", run_id: str = "manual__1"
    ) -> dict:
        ti = FakeTaskInstance("ml_pipeline", task_id, run_id, try_number=try_number)
        return {"ti": ti, "task_instance": ti, "dag_run": FakeDagRun(run_type), "params": {}}

    return build


@pytest.fixture
def user_kill():
    """``user_kill(trigger, task_state="failed")``: what Airflow's triggerer does once a user marked the
    deferred task failed (or success, or cleared it): the task instance has left the deferred state, and
    the trigger's ``on_kill`` runs. Airflow's side is the only part stood in for: the trigger reads that
    state instead of asking the API server through the triggerer's channel."""

    def kill(trigger, task_state: str | None = "failed") -> None:
        async def read() -> str | None:
            return task_state

        trigger.read_task_state = read
        asyncio.run(trigger.on_kill())

    return kill


@pytest.fixture
def eventually():
    return wait_for


def make_rayjob_body(
    *,
    cpu: str = "2",
    memory: str = "8G",
    gpu: str = "1",
    duration: str = "2",
    outcome: str = "Succeeded",
    submission_mode: str = "HTTPMode",
) -> dict:
    """A seed-000-sized RayJob (its head fills the whole ClusterQueue) whose entrypoint sleeps ``duration``
    simulated seconds ("inf": until stopped) and, for ``outcome="AppFailed"``, then exits 1, as it would on
    a real cluster. Only the pods' start-up time (a property of the nodes, not of the RayJob) is kubesim's
    annotation."""
    entrypoint = f"sleep {'infinity' if duration == 'inf' else duration}"
    if outcome == "AppFailed":
        entrypoint += "; exit 1"
    return rayjobs.rayjob_body(
        "placeholder",
        requests={"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpu},
        entrypoint=entrypoint,
        submission_mode=submission_mode,
        shutdown_after_job_finishes=None,
    )


class FakeTaskInstance:
    """What SubmitRayJobOperator and RayJobSensor use of the task instance: identity and XCom."""

    def __init__(self, dag_id: str, task_id: str, run_id: str, try_number: int = 1, map_index: int = -1):
        self.dag_id = dag_id
        self.task_id = task_id
        self.run_id = run_id
        self.try_number = try_number
        self.map_index = map_index
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        return self.xcom.get(key)


class FakeDagRun:
    def __init__(self, run_type: str = "manual"):
        self.run_type = run_type


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll until ``predicate()`` is truthy (cluster settling is not instantaneous)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)
