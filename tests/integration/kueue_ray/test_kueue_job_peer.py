"""The cncf-kubernetes provider's own Kueue job path against kubesim, as the benchmark's peer runs it:
``KubernetesHook.create_job`` submits a suspended batch Job to a LocalQueue, Kueue admits it, the Job
controller runs its pod, and ``AsyncKubernetesHook.wait_until_job_complete`` (what ``KubernetesJobTrigger``
awaits) returns the completed Job."""

from __future__ import annotations

import asyncio
import time

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from kubernetes.client import models as k8s


def kueue_job(name: str, namespace: str, queue: str, priority: str) -> k8s.V1Job:
    container = k8s.V1Container(
        name="base",
        image="busybox",
        command=["sh", "-c", "echo pi is 3.14; sleep 5"],
        # A real API server requires a limit for an extended resource (422 without it).
        resources=k8s.V1ResourceRequirements(
            requests={"cpu": "2", "memory": "8G", "nvidia.com/gpu": "1"}, limits={"nvidia.com/gpu": "1"}
        ),
    )
    labels = {"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": priority}
    return k8s.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=k8s.V1JobSpec(
            suspend=True,
            parallelism=1,
            template=k8s.V1PodTemplateSpec(
                spec=k8s.V1PodSpec(restart_policy="Never", containers=[container])
            ),
        ),
    )


def test_the_providers_hooks_submit_a_kueue_job_and_wait_for_it_to_complete(queues, connection):
    hook = KubernetesHook(conn_id=connection)
    name = f"job-{queues.namespace}"
    created = hook.create_job(kueue_job(name, queues.namespace, queues.local_queue, queues.low))
    assert created.spec.suspend is True

    done = asyncio.run(
        asyncio.wait_for(
            AsyncKubernetesHook(conn_id=connection).wait_until_job_complete(
                name=name, namespace=queues.namespace, poll_interval=0.2
            ),
            30,
        )
    )

    assert hook.is_job_successful(done) and not hook.is_job_failed(done)
    assert [c.type for c in done.status.conditions if c.status == "True"] == [
        "SuccessCriteriaMet",
        "Complete",
    ]
    # Kueue marks the Workload finished once it has seen the Job complete: a moment after, not with it.
    deadline = time.monotonic() + 10
    while True:
        workload = queues.workload(created.metadata.uid)
        status = (workload or {}).get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if conditions.get("Finished") == "True" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert workload["metadata"]["name"].startswith(f"job-{name}-")
    assert conditions.get("Finished") == "True", conditions
    pods = queues.core.list_namespaced_pod(queues.namespace, label_selector=f"job-name={name}").items
    assert [p.status.phase for p in pods] == ["Succeeded"]
    log = queues.core.read_namespaced_pod_log(
        pods[0].metadata.name, queues.namespace, container="base", _preload_content=False
    )
    assert log.data.decode() == "pi is 3.14\n"
