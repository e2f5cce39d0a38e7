"""What Kueue v0.19.2's webhooks and job reconciler write into the Ray objects themselves, the same on kubesim
and on real Kueue: a ``default`` LocalQueue labels RayJobs, RayClusters and RayServices only in the
namespaces ``managedJobsNamespaceSelector`` selects (by default not ``kube-system`` nor Kueue's own), and
the K8sJobMode submitter template Kueue writes on admission runs the head's image."""

from __future__ import annotations

import copy

from kubernetes import client
from kueue_ray.operators import SubmitRayJobOperator

from tests import rayjobs
from tests.integration.kueue_ray.serve_support import service_body

KUEUE = ("kueue.x-k8s.io", "v1beta2")
RAY = ("ray.io", "v1")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def ray_objects(name: str) -> list[tuple[str, dict]]:
    """(plural, body) of a RayJob, a RayCluster and a RayService without a queue label."""
    job = rayjobs.rayjob_body(name, requests={"cpu": "1"}, entrypoint="sleep 1")
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name},
        "spec": copy.deepcopy(job["spec"]["rayClusterSpec"]),
    }
    service = service_body()
    service["metadata"]["name"] = name
    return [("rayjobs", job), ("rayclusters", cluster), ("rayservices", service)]


def default_local_queue(custom, namespace: str, cluster_queue: str) -> None:
    body = {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": "default"},
        "spec": {"clusterQueue": cluster_queue},
    }
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", body)


def labelled_on_create(custom, namespace: str, name: str) -> dict[str, str | None]:
    """plural -> the queue label each Ray kind gets when created (a dry run: nothing is kept)."""
    found = {}
    for plural, body in ray_objects(name):
        created = custom.create_namespaced_custom_object(*RAY, namespace, plural, body, dry_run="All")
        found[plural] = (created["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    return found


def test_a_default_local_queue_labels_ray_objects_only_in_managed_namespaces(queues, unique_name, eventually):
    custom = queues.custom
    default_local_queue(custom, queues.namespace, queues.cluster_queue)
    everything = {"rayjobs": "default", "rayclusters": "default", "rayservices": "default"}
    eventually(lambda: labelled_on_create(custom, queues.namespace, unique_name) == everything)
    default_local_queue(custom, "kube-system", queues.cluster_queue)
    try:
        # Kueue has seen kube-system's `default` LocalQueue once it would label there, were it allowed to:
        # the test namespace's answer came after its own LocalQueue was seen, so wait as long again.
        eventually(lambda: labelled_on_create(custom, queues.namespace, unique_name) == everything)
        assert labelled_on_create(custom, "kube-system", unique_name) == dict.fromkeys(everything)
    finally:
        custom.delete_namespaced_custom_object(*KUEUE, "kube-system", "localqueues", "default")


def test_the_submitter_template_kueue_writes_on_admission_runs_the_head_image(
    queues, task_context, eventually
):
    body = rayjobs.rayjob_body(
        "placeholder",
        requests={"cpu": "1", "memory": "1G"},
        entrypoint="sleep 1",
        image="rayproject/ray:2.52.0",
        submission_mode="K8sJobMode",
    )
    uid = SubmitRayJobOperator(
        task_id="train",
        template=body,
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(task_context("train"))["uid"]

    def admitted() -> dict | None:
        job = next(j for j in queues.rayjobs() if j["metadata"]["uid"] == uid)
        return job if job["spec"].get("submitterPodTemplate") else None

    job = eventually(admitted, timeout=60)
    [submitter] = job["spec"]["submitterPodTemplate"]["spec"]["containers"]
    assert submitter["image"] == "rayproject/ray:2.52.0"
    workload = queues.workload(uid)
    [pod_set] = [p for p in workload["spec"]["podSets"] if p["name"] == "submitter"]
    assert pod_set["template"]["spec"]["containers"][0]["image"] == "rayproject/ray:2.52.0"
    # KubeRay's submitter Job, made from that template.
    batch = client.BatchV1Api(queues.custom.api_client)
    created = eventually(
        lambda: next(iter(batch.list_namespaced_job(queues.namespace).items), None), timeout=60
    )
    assert created.spec.template.spec.containers[0].image == "rayproject/ray:2.52.0"
