"""The triggerer's read of starting Ray clusters' pods (``AsyncRayJobHook.clusters_pods``, what the task
log's "Ray cluster starting, pods: ..." line is made of) returns the pods of the clusters asked for and no
other, across pages, as the plain API dicts ``kueue_ray.pod_states`` reads."""

from __future__ import annotations

import asyncio

from kubernetes import client
from kueue_ray import async_hook
from kueue_ray.async_hook import AsyncRayJobHook
from kueue_ray.pod_states import CLUSTER_LABEL, pod_states


def pod(name: str, cluster: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {CLUSTER_LABEL: cluster, "ray.io/node-type": "head"}},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}],
        },
    }


def test_the_pods_of_the_asked_clusters_are_read_across_pages(queues, connection, monkeypatch):
    core = client.CoreV1Api(queues.core.api_client)
    for name, cluster in (("a-head", "a"), ("b-head", "b"), ("b-worker", "b"), ("c-head", "c")):
        core.create_namespaced_pod(queues.namespace, pod(name, cluster))
    # Pages of 2 (the project's page size is 500): three pods of the two clusters asked for take two pages.
    monkeypatch.setattr(async_hook, "PAGE_SIZE", 2)

    pods = asyncio.run(AsyncRayJobHook(conn_id=connection).clusters_pods(["a", "b"], queues.namespace))

    assert pods is not None
    assert sorted(p["metadata"]["name"] for p in pods) == ["a-head", "b-head", "b-worker"]
    assert {p["metadata"]["labels"][CLUSTER_LABEL] for p in pods} == {"a", "b"}
    assert len(pod_states(pods)) == 3  # what the task log's pod line is made of reads them as they are
