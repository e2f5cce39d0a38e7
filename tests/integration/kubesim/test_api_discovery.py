"""Discovery, Table output and aggregated APIs: what kubectl and dynamic clients read first."""

from __future__ import annotations

import json
import urllib.request

import pytest
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from kubesim.errors import ApiError

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def _get(url: str, accept: str = "application/json") -> dict:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_version_and_health(kubesim_api, api_client):
    info = client.VersionApi(api_client).get_code()
    assert info.git_version.startswith("v1.32.")
    assert "kubesim" in info.git_version
    for probe in ("/healthz", "/readyz", "/livez"):
        with urllib.request.urlopen(kubesim_api.url + probe) as response:
            assert response.read() == b"ok"


def test_groups_and_resources_are_discoverable(api_client):
    groups = {group.name: group for group in client.ApisApi(api_client).get_api_versions().groups}
    assert groups["ray.io"].preferred_version.group_version == "ray.io/v1"
    assert groups["kueue.x-k8s.io"].preferred_version.version == "v1beta2"

    core = {
        resource.name: resource for resource in client.CoreV1Api(api_client).get_api_resources().resources
    }
    assert core["pods"].namespaced and core["pods"].short_names == ["po"]
    assert core["pods/log"].verbs == ["get"]
    assert not core["namespaces"].namespaced

    ray = {
        resource.name: resource
        for resource in client.CustomObjectsApi(api_client).get_api_resources("ray.io", "v1").resources
    }
    assert ray["rayjobs"].kind == "RayJob"
    assert "watch" in ray["rayjobs"].verbs
    assert "all" in ray["rayjobs"].categories
    assert set(ray["rayjobs/status"].verbs) == {"get", "patch", "update"}


def test_dynamic_client_resolves_kinds_through_discovery(api_client):
    dyn = dynamic.DynamicClient(api_client)
    workloads = dyn.resources.get(api_version="kueue.x-k8s.io/v1beta2", kind="Workload")
    assert workloads.namespaced
    assert workloads.short_names == ["kwl", "kueueworkload", "kueueworkloads"]
    assert (
        dyn.resources.get(api_version="v1", kind="Namespace").get(name="default").metadata.name == "default"
    )


def test_unserved_version_is_404(api_client):
    with pytest.raises(ApiException) as missing:
        client.CustomObjectsApi(api_client).list_cluster_custom_object(
            "kueue.x-k8s.io", "v1alpha9", "clusterqueues"
        )
    assert missing.value.status == 404


def test_table_output_uses_crd_printer_columns(kubesim_api, api_client, unique_name):
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": unique_name},
        "value": 42,
    }
    custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", body)

    table = _get(
        f"{kubesim_api.url}/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses/{unique_name}", TABLE
    )
    assert table["kind"] == "Table"
    assert [column["name"] for column in table["columnDefinitions"]] == ["Name", "Value", "Age"]
    assert table["rows"][0]["cells"][:2] == [unique_name, 42]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    custom.delete_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", unique_name)


def test_table_output_for_rayjobs_shows_job_and_deployment_status(kubesim_api):
    table = _get(f"{kubesim_api.url}/apis/ray.io/v1/rayjobs", TABLE)
    names = [column["name"] for column in table["columnDefinitions"]]
    assert names[:3] == ["Name", "job status", "deployment status"]


def test_table_output_for_pods_has_ready_status_restarts(kubesim_api, api_client, unique_name):
    core = client.CoreV1Api(api_client)
    pod = {"metadata": {"name": unique_name}, "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    core.create_namespaced_pod("default", pod)
    table = _get(
        f"{kubesim_api.url}/api/v1/namespaces/default/pods?fieldSelector=metadata.name={unique_name}", TABLE
    )
    assert [column["name"] for column in table["columnDefinitions"]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert table["rows"][0]["cells"][:4] == [unique_name, "0/1", "Pending", "0"]
    core.delete_namespaced_pod(unique_name, "default")


def test_aggregated_api_is_discovered_and_routed(kubesim_api, api_client):
    def handler(path: str, query: dict) -> dict:
        if path != "widgets/w1/summary":
            raise ApiError(404, "NotFound", f"no {path}")
        return {"kind": "WidgetSummary", "apiVersion": "example.kubesim.dev/v1", "limit": query.get("limit")}

    resources = [{"name": "widgets/summary", "namespaced": False, "kind": "WidgetSummary", "verbs": ["get"]}]
    kubesim_api.call(kubesim_api.cluster.register_api, "example.kubesim.dev", "v1", resources, handler)

    groups = [group.name for group in client.ApisApi(api_client).get_api_versions().groups]
    assert "example.kubesim.dev" in groups
    listed = _get(f"{kubesim_api.url}/apis/example.kubesim.dev/v1")
    assert [resource["name"] for resource in listed["resources"]] == ["widgets/summary"]
    assert _get(f"{kubesim_api.url}/apis/example.kubesim.dev/v1/widgets/w1/summary?limit=3")["limit"] == "3"
    with pytest.raises(urllib.error.HTTPError) as missing:
        _get(f"{kubesim_api.url}/apis/example.kubesim.dev/v1/widgets/w2/summary")
    assert missing.value.code == 404


def test_table_evaluates_jsonpath_filters(kubesim_api, api_client, unique_name):
    custom = client.CustomObjectsApi(api_client)
    kueue = ("kueue.x-k8s.io", "v1beta2", "default", "workloads")
    pod_set = {
        "name": "main",
        "count": 1,
        "template": {"spec": {"containers": [{"name": "c", "image": "ray"}]}},
    }
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": unique_name},
        "spec": {"queueName": "user-queue", "podSets": [pod_set]},
    }
    custom.create_namespaced_custom_object(*kueue, workload)
    condition = {
        "type": "Admitted",
        "status": "True",
        "reason": "Admitted",
        "message": "The workload is admitted",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    custom.patch_namespaced_custom_object_status(*kueue, unique_name, {"status": {"conditions": [condition]}})

    table = _get(
        f"{kubesim_api.url}/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads/{unique_name}", TABLE
    )
    cells = dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"], strict=True))
    assert (cells["Queue"], cells["Admitted"], cells["Finished"]) == ("user-queue", "True", "<none>")
    custom.delete_namespaced_custom_object(*kueue, unique_name)
