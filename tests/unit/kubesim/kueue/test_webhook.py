"""Kueue's RayJob webhook as the API server runs it: defaulting and denials with upstream's messages."""

import copy

import pytest

from kubesim.clock import Clock
from kubesim.errors import ApiError
from kubesim.kueue.config import KueueConfig
from kubesim.kueue.jobs import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from kubesim.kueue.webhook import make_admission_hook
from kubesim.resources import CRDS_DIR, Registry
from kubesim.store import Store

RAYJOBS = "rayjobs.ray.io"
DENIED = 'admission webhook "vrayjob.kb.io" denied the request: '


@pytest.fixture
def store() -> Store:
    store = Store(Registry(CRDS_DIR), Clock())
    store.add_admission_hook(make_admission_hook(store))
    return store


def container(cpu: str = "1") -> dict:
    return {"name": "ray", "image": "rayproject/ray:2.46.0", "resources": {"requests": {"cpu": cpu}}}


def rayjob(name: str = "job", *, queue: str | None = "user-queue", **spec) -> dict:
    body = {
        "entrypoint": "python main.py",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container()]}}}
        },
    }
    body.update(spec)
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": body,
    }


def denial(store: Store, job: dict) -> str:
    with pytest.raises(ApiError) as caught:
        store.create(RAYJOBS, job)
    assert (caught.value.code, caught.value.reason) == (403, "Forbidden")
    return caught.value.message


def worker(group: str) -> dict:
    return {
        "groupName": group,
        "replicas": 1,
        "rayStartParams": {},
        "template": {"spec": {"containers": [container()]}},
    }


def test_managed_rayjob_is_created_suspended(store):
    created = store.create(RAYJOBS, rayjob())
    assert created["spec"]["suspend"] is True


def test_unmanaged_rayjob_is_left_alone(store):
    created = store.create(RAYJOBS, rayjob(queue=None, shutdownAfterJobFinishes=False))
    assert not created["spec"].get("suspend")


def test_queue_label_defaults_to_the_default_local_queue(store):
    store.create(
        "localqueues.kueue.x-k8s.io",
        {"metadata": {"name": "default", "namespace": "default"}, "spec": {"clusterQueue": "cq"}},
    )
    created = store.create(RAYJOBS, rayjob(queue=None))
    assert created["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert created["spec"]["suspend"] is True


def default_queue_in(store: Store, namespace: str) -> None:
    store.create("namespaces", {"metadata": {"name": namespace}})
    store.create(
        "localqueues.kueue.x-k8s.io",
        {"metadata": {"name": "default", "namespace": namespace}, "spec": {"clusterQueue": "cq"}},
    )


def ray_kinds(namespace: str) -> list[tuple[str, dict]]:
    job = rayjob(queue=None)
    job["metadata"]["namespace"] = namespace
    spec = job["spec"]["rayClusterSpec"]
    meta = {"name": "r", "namespace": namespace}
    return [
        (RAYJOBS, job),
        (
            "rayclusters.ray.io",
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta, "spec": spec},
        ),
        (
            "rayservices.ray.io",
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayService",
                "metadata": meta,
                "spec": {"rayClusterConfig": spec},
            },
        ),
    ]


@pytest.mark.parametrize("namespace", ["kube-system", "kueue-system"])
def test_the_default_managed_jobs_namespace_selector_leaves_kube_system_and_kueues_namespace_alone(
    store, namespace
):
    """``ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector``: in a namespace the selector leaves out,
    no Ray kind (nor Pod, nor Job) is put into its ``default`` LocalQueue."""
    if store.get_or_none("namespaces", namespace) is None:
        store.create("namespaces", {"metadata": {"name": namespace}})
    store.create(
        "localqueues.kueue.x-k8s.io",
        {"metadata": {"name": "default", "namespace": namespace}, "spec": {"clusterQueue": "cq"}},
    )
    for key, obj in ray_kinds(namespace):
        created = store.create(key, obj)
        assert QUEUE_LABEL not in (created["metadata"].get("labels") or {}), key
    pod = {"metadata": {"name": "p", "namespace": namespace}, "spec": {"containers": [{"name": "c"}]}}
    assert QUEUE_LABEL not in (store.create("pods", pod)["metadata"].get("labels") or {})
    managed = "team-a"
    default_queue_in(store, managed)
    for key, obj in ray_kinds(managed):
        assert store.create(key, obj)["metadata"]["labels"][QUEUE_LABEL] == "default", key


def test_a_configured_selector_decides_by_the_namespace_labels():
    """``managedJobsNamespaceSelector`` from Kueue's Configuration: only namespaces labelled for Kueue."""
    config = KueueConfig.from_configuration(
        {"managedJobsNamespaceSelector": {"matchLabels": {"kueue-managed": "true"}}}
    )
    store = Store(Registry(CRDS_DIR), Clock())
    store.add_admission_hook(
        make_admission_hook(store, config.frameworks, config.managed_jobs_namespace_selector)
    )
    default_queue_in(store, "plain")
    store.create("namespaces", {"metadata": {"name": "opted-in", "labels": {"kueue-managed": "true"}}})
    store.create(
        "localqueues.kueue.x-k8s.io",
        {"metadata": {"name": "default", "namespace": "opted-in"}, "spec": {"clusterQueue": "cq"}},
    )
    [(_, plain)] = ray_kinds("plain")[:1]
    assert QUEUE_LABEL not in (store.create(RAYJOBS, plain)["metadata"].get("labels") or {})
    [(_, opted)] = ray_kinds("opted-in")[:1]
    created = store.create(RAYJOBS, opted)
    assert created["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert created["spec"]["suspend"] is True
    # Kueue's own namespace, renamed in the Configuration, is the one the default selector leaves out.
    renamed = KueueConfig.from_configuration({"namespace": "queueing"})
    values = renamed.managed_jobs_namespace_selector["matchExpressions"][0]["values"]
    assert values == ["kube-system", "queueing"]


def test_ownerless_pods_and_jobs_in_a_namespace_with_a_default_local_queue_get_its_label(store):
    """Kueue 0.19's LocalQueueDefaulting: what lands in such a namespace waits for that queue."""
    pod = {"metadata": {"name": "debug", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    job = {"metadata": {"name": "etl", "namespace": "default"}, "spec": {"template": {"spec": {}}}}
    assert QUEUE_LABEL not in (store.create("pods", copy.deepcopy(pod))["metadata"].get("labels") or {})
    store.create(
        "localqueues.kueue.x-k8s.io",
        {"metadata": {"name": "default", "namespace": "default"}, "spec": {"clusterQueue": "cq"}},
    )
    pod["metadata"]["name"] = "debug-2"
    assert store.create("pods", pod)["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert store.create("jobs.batch", job)["metadata"]["labels"][QUEUE_LABEL] == "default"
    owned = {
        "metadata": {
            "name": "worker",
            "namespace": "default",
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "c", "uid": "u"}],
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    assert QUEUE_LABEL not in (store.create("pods", owned)["metadata"].get("labels") or {})
    chosen = {"metadata": {"name": "other", "namespace": "default", "labels": {QUEUE_LABEL: "team-a"}}}
    assert store.create("pods", chosen)["metadata"]["labels"][QUEUE_LABEL] == "team-a"


def test_shutdown_after_job_finishes_is_required(store):
    assert denial(store, rayjob(shutdownAfterJobFinishes=False)) == (
        DENIED
        + "spec.shutdownAfterJobFinishes: Invalid value: false: a kueue managed job should delete the cluster after finishing"
    )


def test_cluster_selector_with_cluster_spec_is_rejected(store):
    assert denial(store, rayjob(clusterSelector={"ray.io/cluster": "c1"})) == (
        DENIED
        + 'spec.clusterSelector: Invalid value: map[string]string{"ray.io/cluster":"c1"}: '
        + "a kueue managed job should not use an existing cluster"
    )


def test_missing_ray_cluster_spec_is_rejected(store):
    job = rayjob()
    del job["spec"]["rayClusterSpec"]
    assert denial(store, job) == (
        DENIED
        + "spec.rayClusterSpec: Required value: rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector"
    )


def test_cluster_selector_only_is_allowed_and_not_suspended(store):
    job = rayjob(clusterSelector={"ray.io/cluster": "c1"})
    del job["spec"]["rayClusterSpec"]
    assert not store.create(RAYJOBS, job)["spec"].get("suspend")


def test_autoscaling_needs_the_elastic_job_annotation(store):
    job = rayjob()
    job["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    assert denial(store, job) == (
        DENIED
        + "spec.rayClusterSpec.enableInTreeAutoscaling: Invalid value: true: "
        + "a kueue managed job should only use autoscaling when workload slicing is enabled"
    )
    job["metadata"]["annotations"] = {"kueue.x-k8s.io/elastic-job": "true"}
    assert store.create(RAYJOBS, job)["spec"]["suspend"] is True


def test_worker_group_named_head_and_too_many_pod_sets_are_reported_together(store):
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"] = [worker("head")] + [
        worker(f"g{i}") for i in range(17)
    ]
    assert denial(store, job) == (
        DENIED
        + "[spec.rayClusterSpec.workerGroupSpecs: Too many: 19: must have at most 18 items, "
        + 'spec.rayClusterSpec.workerGroupSpecs[0].groupName: Forbidden: "head" is reserved for the head group]'
    )


def test_priority_class_cannot_be_added_to_a_running_job(store):
    created = store.create(RAYJOBS, rayjob())
    created["spec"]["suspend"] = False
    running = store.update(RAYJOBS, created)
    running["metadata"]["labels"][PRIORITY_CLASS_LABEL] = "prod"
    with pytest.raises(ApiError) as caught:
        store.update(RAYJOBS, running)
    assert caught.value.message == (
        DENIED
        + 'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "prod": '
        + "WorkloadPriorityClass cannot be added to a non-suspended workload"
    )


def test_priority_class_may_be_added_while_suspended(store):
    created = store.create(RAYJOBS, rayjob())
    created["metadata"]["labels"][PRIORITY_CLASS_LABEL] = "prod"
    assert store.update(RAYJOBS, created)["metadata"]["labels"][PRIORITY_CLASS_LABEL] == "prod"


CLUSTER_QUEUES = "clusterqueues.kueue.x-k8s.io"


def cluster_queue(fungibility: dict) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"namespaceSelector": {}, "flavorFungibility": fungibility},
    }


def test_fungibility_preference_needs_both_policies_to_try_the_next_flavor(store):
    # whenCanBorrow defaults to MayStopSearch, which the CRD's CEL rule sees after defaulting.
    with pytest.raises(ApiError) as caught:
        store.create(CLUSTER_QUEUES, cluster_queue({"preference": "PreemptionOverBorrowing"}))
    assert (caught.value.code, caught.value.message) == (
        422,
        'ClusterQueue.kueue.x-k8s.io "cq" is invalid: spec.flavorFungibility: Invalid value: "object": '
        "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
    )
    both = {
        "whenCanBorrow": "TryNextFlavor",
        "whenCanPreempt": "TryNextFlavor",
        "preference": "BorrowingOverPreemption",
    }
    created = store.create(CLUSTER_QUEUES, cluster_queue(both))
    created["spec"]["flavorFungibility"]["whenCanPreempt"] = "MayStopSearch"
    with pytest.raises(ApiError) as caught:
        store.update(CLUSTER_QUEUES, created)
    assert caught.value.details["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "object": preference can only be set when both whenCanBorrow and '
            "whenCanPreempt are TryNextFlavor",
            "field": "spec.flavorFungibility",
        }
    ]
