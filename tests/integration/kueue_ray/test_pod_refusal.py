"""A GPU request without a limit: refused by the submit operator before anything is created, and what the
cluster does with such a RayJob created by hand (same on kubesim and the real stack).

The API server validates pods, not the pod templates inside a RayJob (a custom resource): the RayJob is
accepted and Kueue admits it, holding its quota, and then KubeRay's every attempt to create the head pod
is refused with ``Limit must be set for non overcommitable resources``.
"""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException
from kueue_ray.naming import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from kueue_ray.operators import SubmitRayJobOperator

REFUSAL = "Limit must be set for non overcommitable resources"


def gpu_without_limit(rayjob_body) -> dict:
    body = rayjob_body(duration="inf", submission_mode="HTTPMode")
    body["spec"]["shutdownAfterJobFinishes"] = True  # as Kueue requires of the RayJobs it manages
    head = body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["resources"]["limits"] = {"cpu": "2", "memory": "8G"}  # nvidia.com/gpu requested, no limit
    return body


def test_the_operator_refuses_a_gpu_request_without_a_limit_and_creates_nothing(
    queues, rayjob_body, task_context
):
    operator = SubmitRayJobOperator(
        task_id="train",
        template=gpu_without_limit(rayjob_body),
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        deferrable=False,
    )
    with pytest.raises(AirflowFailException) as error:
        operator.execute(task_context("train"))
    message = str(error.value)
    assert "headGroupSpec.template.spec.containers[0].resources.limits[nvidia.com/gpu]" in message
    assert "Fix: set limits nvidia.com/gpu: 1" in message
    assert queues.rayjobs() == []


def test_a_rayjob_created_by_hand_is_admitted_and_its_head_pod_refused(queues, rayjob_body, eventually):
    body = gpu_without_limit(rayjob_body)
    body["metadata"] = {
        "name": "gpu-no-limit",
        "labels": {QUEUE_LABEL: queues.local_queue, PRIORITY_CLASS_LABEL: queues.low},
    }
    created = queues.custom.create_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayjobs", body)

    def admitted() -> bool:
        workload = queues.workload(created["metadata"]["uid"]) or {}
        conditions = (workload.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)

    eventually(admitted)

    def replica_failure() -> dict | None:
        clusters = queues.custom.list_namespaced_custom_object(
            "ray.io", "v1", queues.namespace, "rayclusters"
        )
        for cluster in clusters["items"]:
            for condition in (cluster.get("status") or {}).get("conditions") or []:
                if condition["type"] == "ReplicaFailure" and condition["status"] == "True":
                    return condition
        return None

    failure = eventually(replica_failure)
    assert failure["reason"] == "FailedCreateHeadPod"
    assert failure["message"].startswith("FailedCreateHeadPod\nPod ")
    assert f"spec.containers[0].resources.limits: Required value: {REFUSAL}" in failure["message"]
    assert queues.core.list_namespaced_pod(queues.namespace).items == []
    job = queues.custom.get_namespaced_custom_object(
        "ray.io", "v1", queues.namespace, "rayjobs", "gpu-no-limit"
    )
    assert job["status"]["jobDeploymentStatus"] == "Initializing"
