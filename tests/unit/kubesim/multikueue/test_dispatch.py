"""MultiKueue's Workload reconciler (``kubesim.multikueue.dispatch``) on bare stores: what it refuses, as
Kueue v0.19.2's ``wlReconciler.Reconcile`` does before any dispatch (``workload.go``), and Kueue's RayJob
webhook defaulting ``spec.managedBy`` only for a ClusterQueue with a MultiKueue check
(``jobframework.ApplyDefaultForManagedBy``)."""

from __future__ import annotations

import pytest

from kubesim.clock import Clock
from kubesim.cluster import Cluster
from kubesim.kueue.webhook import make_admission_hook
from kubesim.multikueue.dispatch import Dispatcher
from tests.rayjobs import rayjob_body

KUEUE = "kueue.x-k8s.io/v1beta2"
POD_SET = {"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}


def manager_store(*, multikueue: bool = True):
    store = Cluster(controllers=()).store
    store.add_admission_hook(make_admission_hook(store))
    controller = "kueue.x-k8s.io/multikueue" if multikueue else "kubesim.dev/admission-check"
    store.create(
        "admissionchecks.kueue.x-k8s.io",
        {
            "apiVersion": KUEUE,
            "kind": "AdmissionCheck",
            "metadata": {"name": "mk"},
            "spec": {
                "controllerName": controller,
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"},
            },
        },
    )
    store.create(
        "clusterqueues.kueue.x-k8s.io",
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": "mk"}]}},
        },
    )
    store.create(
        "localqueues.kueue.x-k8s.io",
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": "cq"},
        },
        namespace="default",
    )
    return store


def rayjob(name: str, **spec) -> dict:
    body = rayjob_body(name, requests={"cpu": "1"}, labels={"kueue.x-k8s.io/queue-name": "lq"})
    body["spec"].update(spec)
    return body


def workload(store, owner: dict | None) -> dict:
    meta: dict = {"name": "wl"}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    created = store.create(
        "workloads.kueue.x-k8s.io",
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": meta,
            "spec": {"queueName": "lq", "podSets": [POD_SET]},
        },
        namespace="default",
    )
    created["status"] = {
        "admissionChecks": [
            {"name": "mk", "state": "Pending", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]
    }
    return store.update("workloads.kueue.x-k8s.io", created, subresource="status")


def dispatcher(store) -> Dispatcher:
    return Dispatcher(store, Clock(), "multikueue", lambda check: ({}, []), 900.0, lambda name: 0.0)


def check_of(store) -> dict:
    wl = store.get("workloads.kueue.x-k8s.io", "wl", namespace="default")
    return wl["status"]["admissionChecks"][0]


def test_the_rayjob_webhook_defaults_managed_by_for_a_multikueue_cluster_queue():
    store = manager_store()
    created = store.create("rayjobs.ray.io", rayjob("a"), namespace="default")
    assert created["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    assert created["spec"]["suspend"] is True


@pytest.mark.parametrize(
    ("multikueue", "spec", "expected"),
    [
        (False, {}, None),  # the ClusterQueue's check is another controller's
        (True, {"managedBy": "kueue.x-k8s.io/multikueue"}, "kueue.x-k8s.io/multikueue"),
        (True, {"managedBy": "ray.io/kuberay-operator"}, "kueue.x-k8s.io/multikueue"),  # CanDefaultManagedBy
    ],
)
def test_managed_by_is_defaulted_only_where_upstream_defaults_it(multikueue, spec, expected):
    store = manager_store(multikueue=multikueue)
    created = store.create("rayjobs.ray.io", rayjob("a", **spec), namespace="default")
    assert created["spec"].get("managedBy") == expected


def test_a_workload_of_a_kind_without_an_adapter_gets_its_check_rejected():
    store = manager_store()
    job = store.create(
        "jobs.batch",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}
            },
        },
        namespace="default",
    )
    workload(store, job)
    dispatcher(store).reconcile("default", "wl")
    state = check_of(store)
    assert state["state"] == "Rejected"
    assert (
        state["message"]
        == 'No multikueue adapter found for owner kind "batch/v1, Kind=Job", Previously: "Pending"'
    )


def test_a_rayjob_kuberay_manages_gets_its_check_rejected():
    store = manager_store(multikueue=False)  # no defaulting: the RayJob keeps KubeRay as its manager
    job = store.create("rayjobs.ray.io", rayjob("a"), namespace="default")
    store.update(
        "admissionchecks.kueue.x-k8s.io",
        dict(
            store.get("admissionchecks.kueue.x-k8s.io", "mk"),
            spec={"controllerName": "kueue.x-k8s.io/multikueue"},
        ),
    )
    workload(store, job)
    dispatcher(store).reconcile("default", "wl")
    state = check_of(store)
    assert state["state"] == "Rejected"
    assert state["message"] == (
        'The owner is not managed by Kueue: Expecting spec.managedBy to be "kueue.x-k8s.io/multikueue" not "", '
        'Previously: "Pending"'
    )
