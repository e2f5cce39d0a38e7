"""What the RayService integration tests share: a small RayService, the deploy operator, and running the
deferred wait the way the triggerer does (a trigger re-created from its serialized kwargs)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kueue_ray.rayservice.trigger import RayServiceTrigger
from kueue_ray.serving import DeployRayServiceOperator

from tests.integration.kueue_ray.conftest import FakeDagRun, FakeTaskInstance, wait_for
from tests.rayjobs import container, head_group

EVENT_TIMEOUT = 60
SERVE_CONFIG = (
    "applications:\n  - name: forecast\n    import_path: serve_model:app\n"
    "    deployments:\n      - name: Forecaster\n"
)


def service_body(model: str = "/models/v1", *, cpu: str = "1", annotations: dict | None = None) -> dict:
    """A RayService whose one cluster (a head of ``cpu`` CPU / 2G) loads ``model`` from its environment;
    an unused cluster is deleted 5 simulated seconds after a switch."""
    head = {
        **container("ray-head", {"cpu": cpu, "memory": "2G"}),
        "env": [{"name": "MODEL_PATH", "value": model}],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": "placeholder",
            "annotations": {"kubesim.dev/startup": "1", **(annotations or {})},
        },
        "spec": {
            "serveConfigV2": SERVE_CONFIG,
            "rayClusterDeletionDelaySeconds": 5,
            "rayClusterConfig": {"headGroupSpec": head_group({"containers": [head]})},
        },
    }


def wait_admitted(queues, rayjob: dict) -> None:
    """Until Kueue has admitted ``rayjob`` (the submit operator's result): real Kueue may admit a Workload
    created within the same second as the blocker's before it (one-second timestamps, then random UIDs)."""

    def admitted() -> bool:
        workload = queues.workload(rayjob["uid"]) or {}
        conditions = (workload.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)

    wait_for(admitted)


def deploy_op(queues, body: dict, *, task_id: str = "serve", priority: str | None = None, **kwargs):
    defaults = dict(
        task_id=task_id,
        template=body,
        local_queue=queues.local_queue,
        priority=priority or queues.low,
        namespace=queues.namespace,
        poll_interval=0.1,
    )
    defaults.update(kwargs)
    return DeployRayServiceOperator(**defaults)


def run_context(run_id: str, *, task_id: str = "serve", try_number: int = 1) -> dict:
    ti = FakeTaskInstance("serving_pipeline", task_id, run_id, try_number=try_number)
    return {"ti": ti, "task_instance": ti, "dag_run": FakeDagRun("manual"), "params": {}}


def defer(op: DeployRayServiceOperator, context: dict) -> RayServiceTrigger:
    """Execute until it defers; the trigger as the triggerer re-creates it from the database."""
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert deferred.value.method_name == "execute_complete"
    classpath, kwargs = deferred.value.trigger.serialize()
    assert classpath == "kueue_ray.rayservice.trigger.RayServiceTrigger"
    return RayServiceTrigger(**kwargs)


async def first_event(trigger: RayServiceTrigger, timeout: float = EVENT_TIMEOUT) -> dict:
    events = trigger.run()
    try:
        event = await asyncio.wait_for(events.__anext__(), timeout)
    finally:
        await events.aclose()
    return event.payload


def wait_deferred(
    op: DeployRayServiceOperator, context: dict, during: Callable[[], None] | None = None
) -> dict:
    """Defer, run the trigger to its event (``during`` runs in a thread meanwhile), resume; the result."""
    trigger = defer(op, context)

    async def scenario() -> dict:
        waiting = asyncio.create_task(first_event(trigger))
        if during is not None:
            await asyncio.to_thread(during)
        return await waiting

    event = asyncio.run(scenario())
    return op.execute_complete(context, event=event)


def trigger_log(capfd) -> list[str]:
    """The RayService trigger's task-log lines (Airflow's structlog writes them to stdout here)."""
    return [line for line in capfd.readouterr().out.splitlines() if "RayService " in line]


def rayservices(queues) -> list[dict]:
    return queues.custom.list_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayservices")[
        "items"
    ]


def workloads(queues) -> list[dict]:
    return queues.custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", queues.namespace, "workloads"
    )["items"]


class Sampler:
    """Samples a condition in a thread until stopped: e.g. that the service is Ready all along."""

    def __init__(self, sample: Callable[[], object], interval: float = 0.05) -> None:
        self.samples: list[object] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(sample, interval), daemon=True)

    def _run(self, sample: Callable[[], object], interval: float) -> None:
        while not self._stop.is_set():
            self.samples.append(sample())
            self._stop.wait(interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
