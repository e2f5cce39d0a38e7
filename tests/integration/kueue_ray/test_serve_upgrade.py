"""Zero-downtime upgrades with DeployRayServiceOperator against a cluster where Kueue admits a RayService
through its RayClusters (``ray.io/rayservice`` left out of ``integrations.frameworks``): the traffic switch,
a preempted pending cluster, and the teardown of earlier services."""

from __future__ import annotations

import asyncio
import time

import pytest
from kueue_ray.operators import SubmitRayJobOperator

from kubesim.testing import run_kubesim
from tests.integration.conftest import TIME_SCALE
from tests.integration.kueue_ray.conftest import wait_for
from tests.integration.kueue_ray.serve_support import (
    Sampler,
    defer,
    deploy_op,
    first_event,
    rayservices,
    run_context,
    service_body,
    trigger_log,
    wait_deferred,
    workloads,
)

STALLS_ON_REAL = pytest.mark.kubesim_only(
    "stalls now and then on the real stack (KubeRay v1.6.2, Kueue v0.19.2 admitting a RayService's "
    "RayClusters on their own): the wait stays at ADMITTED ('its pods are starting') until the timeout; "
    "each of the module's four tests stalled in one run or another on 2026-12-04 (the zero-downtime "
    "upgrade in a CI run). In a stalled run Kueue's unsuspend of the RayCluster hit a 409 while KubeRay "
    "updated that cluster, and no head pod followed: v1.6.2 writes the RayService's "
    "rayClusterConfig.suspend into the existing cluster (kuberay#4739) as Kueue admits it "
    "(realcluster/README.md)"
)

BY_CLUSTER = """\
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
integrations:
  frameworks: ["batch/job", "ray.io/rayjob", "ray.io/raycluster"]
"""


@pytest.fixture(scope="module")
def kubesim(request, tmp_path_factory):
    """This module's own cluster: Kueue configured to admit RayServices through their RayClusters (with
    ``--cluster=real``, a real stack of its own whose Kueue runs include/kueue-config.yaml's frameworks)."""
    if request.config.getoption("cluster") == "real":
        from tests.integration.conftest import REAL_TIME_SCALE
        from tests.integration.real_backend import real_backend

        with real_backend(time_scale=REAL_TIME_SCALE) as real:
            yield real
        return
    config = tmp_path_factory.mktemp("kueue") / "kueue-config.yaml"
    config.write_text(BY_CLUSTER)
    with run_kubesim(time_scale=TIME_SCALE, kueue_config=config) as sim:
        yield sim


def ready(queues, name: str) -> bool:
    service = queues.custom.get_namespaced_custom_object(
        "ray.io", "v1", queues.namespace, "rayservices", name
    )
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in service["status"].get("conditions", [])
    )


def clusters(queues) -> set[str]:
    items = queues.custom.list_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayclusters")[
        "items"
    ]
    return {c["metadata"]["name"] for c in items if not c["metadata"].get("deletionTimestamp")}


def serve_selector(queues, name: str) -> str:
    svc = queues.core.read_namespaced_service(f"{name}-serve-svc", queues.namespace)
    return svc.spec.selector["ray.io/cluster"]


@STALLS_ON_REAL
def test_a_new_model_is_served_by_a_new_cluster_and_traffic_switches_without_downtime(
    queues, eventually, capfd
):
    first = deploy_op(queues, service_body("/models/v1"), deferrable=False).execute(run_context("manual__1"))
    name, old = first["name"], first["active_cluster"]
    [workload] = workloads(queues)
    assert workload["metadata"]["ownerReferences"][0] == {**workload["metadata"]["ownerReferences"][0],
                                                          "kind": "RayCluster", "name": old}  # fmt: skip
    capfd.readouterr()

    with Sampler(lambda: ready(queues, name)) as readiness:
        second = wait_deferred(deploy_op(queues, service_body("/models/v2")), run_context("manual__2"))

    new = second["active_cluster"]
    assert new != old and second["replaced_cluster"] == old
    assert readiness.samples and all(readiness.samples), "the service was Ready throughout the upgrade"
    assert serve_selector(queues, name) == new
    log = capfd.readouterr().out
    assert (
        f"upgraded: new cluster config; KubeRay brings up a new cluster and switches traffic from RayCluster {old}"
        in log
    )
    assert "keeps serving" in log, "the log says the old cluster serves while the new one comes up"
    assert f"Traffic switched from RayCluster {old} to RayCluster {new}" in log
    eventually(lambda: old not in clusters(queues), timeout=30)
    [service] = rayservices(queues)
    assert service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0][
        "env"
    ] == [{"name": "MODEL_PATH", "value": "/models/v2"}]


@STALLS_ON_REAL
def test_a_preempted_pending_cluster_is_reported_and_the_upgrade_completes_once_readmitted(
    queues, rayjob_body, task_context, eventually, capfd
):
    first = deploy_op(queues, service_body("/models/v1"), deferrable=False).execute(run_context("manual__1"))
    old = first["active_cluster"]
    context = run_context("manual__2")
    op = deploy_op(queues, service_body("/models/v2"))
    trigger = defer(op, context)
    capfd.readouterr()

    def pending_admitted() -> str | None:
        for w in workloads(queues):
            owner = w["metadata"]["ownerReferences"][0]["name"]
            admitted = any(
                c["type"] == "Admitted" and c["status"] == "True" for c in w["status"].get("conditions", [])
            )
            if owner != old and admitted:
                return owner
        return None

    def preempt_the_pending_cluster():
        pending = eventually(pending_admitted, timeout=30)
        # A prod RayJob needing the CPU the pending cluster holds (the active one holds the rest).
        SubmitRayJobOperator(
            task_id="urgent",
            template=rayjob_body(cpu="1", memory="2G", gpu="0", duration="4"),
            local_queue=queues.local_queue,
            priority=queues.high,
            namespace=queues.namespace,
            wait_for_completion=False,
            log_tail_lines=0,
        ).execute(task_context("urgent"))
        return pending

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        pending = await asyncio.to_thread(preempt_the_pending_cluster)
        return pending, await waiting

    pending, event = asyncio.run(scenario())

    assert event["status"] == "success", event
    story = trigger_log(capfd)
    # A PREEMPTED line whether the trigger looked while the cluster was torn down or only after Kueue had
    # requeued it (a burst of changes): it names the pending cluster and the one that keeps serving.
    preempted = [line for line in story if ": PREEMPTED (" in line]
    assert preempted, story
    assert (
        f"pending RayCluster {pending}" in preempted[0] and f"RayCluster {old} keeps serving" in preempted[0]
    ), preempted[0]
    assert event["timeline"]["preemption_count"] == 1
    result = op.execute_complete(context, event=event)
    assert result["replaced_cluster"] == old and result["active_cluster"] not in (None, old)


@STALLS_ON_REAL
def test_teardown_deletes_earlier_services_of_the_task_and_spares_the_one_just_deployed(queues, eventually):
    first = deploy_op(queues, service_body("/models/v1"), mode="new_service", deferrable=False).execute(
        run_context("manual__1")
    )
    second = deploy_op(
        queues, service_body("/models/v2"), mode="new_service", teardown_previous=True, deferrable=False
    ).execute(run_context("manual__2"))

    assert second["name"] != first["name"]
    assert second["torn_down"] == [first["name"]]
    # KubeRay's finalizer deletes a torn-down service's clusters before the service itself goes.
    wait_for(lambda: [s["metadata"]["name"] for s in rayservices(queues)] == [second["name"]])
    time.sleep(0.5)
    assert ready(queues, second["name"]), "the service just deployed keeps serving"


@STALLS_ON_REAL
def test_clearing_a_finished_deploy_rolls_the_service_out_again_without_downtime(queues, capfd):
    """Clear of ``deploy_serve`` after its rollout finished: the same spec, yet a new cluster and a traffic
    switch (the try is stamped into the cluster config), while a retry mid-rollout adopts instead."""
    first = deploy_op(queues, service_body("/models/v1"), deferrable=False).execute(run_context("manual__1"))
    name, old = first["name"], first["active_cluster"]
    capfd.readouterr()

    with Sampler(lambda: ready(queues, name)) as readiness:
        again = wait_deferred(
            deploy_op(queues, service_body("/models/v1")), run_context("manual__1", try_number=2)
        )

    assert again["active_cluster"] != old and again["replaced_cluster"] == old
    assert readiness.samples and all(readiness.samples), "the service was Ready throughout"
    log = capfd.readouterr().out
    assert "was rolled out to the end by try 1 of this run; try 2 rolls it out again" in log
    assert f"Traffic switched from RayCluster {old} to RayCluster {again['active_cluster']}" in log
    [service] = rayservices(queues)
    head = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"]["kueue-ray.airflow.apache.org/rollout"] == "manual__1 try 2"
