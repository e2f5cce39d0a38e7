"""The Cluster seam: apply() of manifest trees, and the shared session cluster's controllers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client, config

from kubesim.cluster import Cluster
from kubesim.errors import ApiError


def test_apply_orders_namespaces_and_cluster_kinds_first_and_replaces(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ignored.yaml").write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: not-applied}\nspec: {}\n"
    )
    (tmp_path / "1-queue.yaml").write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq, namespace: team}\n"
        "spec: {clusterQueue: cq}\n---\n"
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm}\n"
    )
    (tmp_path / "b.yml").write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: cq}\nspec: {}\n---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n"
    )
    (tmp_path / "notes.txt").write_text("not a manifest")
    cluster = Cluster(controllers=())

    applied = cluster.apply(tmp_path)
    # like kubectl apply -f DIR without -R: the subfolder a/ is not applied
    assert [obj["kind"] for obj in applied] == ["Namespace", "ClusterQueue", "LocalQueue", "ConfigMap"]
    assert cluster.store.get("configmaps", "cm", namespace="default")["metadata"]["namespace"] == "default"

    (tmp_path / "1-queue.yaml").write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: lq, namespace: team}\n"
        "spec: {clusterQueue: other}\n"
    )
    cluster.apply(tmp_path / "1-queue.yaml")
    replaced = cluster.store.get("localqueues.kueue.x-k8s.io", "lq", namespace="team")
    assert replaced["spec"]["clusterQueue"] == "other"
    assert replaced["metadata"]["generation"] == 2


def test_apply_rejects_unknown_kinds_and_invalid_objects(tmp_path):
    cluster = Cluster(controllers=())
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
    with pytest.raises(ValueError, match="Deployment"):
        cluster.apply(unknown)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata: {name: p}\nvalue: x\n"
    )
    with pytest.raises(ApiError) as rejected:
        cluster.apply(invalid)
    assert rejected.value.code == 422


def test_session_cluster_runs_the_controllers(kubesim, unique_name):
    """The shared `kubesim` fixture is the whole cluster: KubeRay acts on a RayJob, Kueue serves its
    visibility API."""
    api = config.new_client_from_config(config_file=kubesim.kubeconfig)
    custom = client.CustomObjectsApi(api)
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": unique_name,
            "annotations": {"kubesim.dev/startup": "1"},
        },
        "spec": {
            "entrypoint": "sleep 1",
            "rayClusterSpec": {
                "headGroupSpec": {
                    "template": {"spec": {"containers": [{"name": "ray-head", "image": "ray"}]}}
                }
            },
        },
    }
    custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", rayjob)
    deadline = time.monotonic() + 30
    status = {}
    while time.monotonic() < deadline and not status.get("jobDeploymentStatus"):
        time.sleep(0.1)
        status = custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", unique_name).get(
            "status", {}
        )
    assert status.get("jobDeploymentStatus")
    custom.delete_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", unique_name)
    api.close()

    url = f"{kubesim.url}/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{unique_name}/pendingworkloads"
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url, timeout=10)
    assert missing.value.code == 404
    assert json.loads(missing.value.read())["reason"] == "NotFound"
