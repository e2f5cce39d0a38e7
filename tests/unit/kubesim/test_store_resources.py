"""The registry serves the built-in kinds and takes CRD schemas and printer columns from the real CRDs."""

from kubesim.resources import CRDS_DIR, Registry


def test_builtin_kinds_without_crds():
    registry = Registry(crds_dir=None)
    pods = registry.get("pods")
    assert (pods.api_version, pods.kind, pods.namespaced, pods.subresources) == (
        "v1",
        "Pod",
        True,
        {"status", "log"},
    )
    assert registry.get("namespaces").namespaced is False
    assert registry.get("clusterqueues.kueue.x-k8s.io").short_names == ["cq"]
    assert registry.get("rayjobs.ray.io").schema is None
    assert registry.by_kind("batch/v1", "Job").key == "jobs.batch"
    assert {rt.kind for rt in registry.by_group_version("rbac.authorization.k8s.io", "v1")} == {
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    assert registry.get("widgets.example.com") is None
    assert registry.get("events").list_kind == "EventList"


def test_crds_attach_schema_and_printer_columns_of_the_served_version():
    registry = Registry(CRDS_DIR)
    rayjobs = registry.get("rayjobs.ray.io")
    assert rayjobs.schema["properties"]["spec"]["properties"]["entrypoint"]["type"] == "string"
    assert [c["name"] for c in rayjobs.printer_columns][:2] == ["job status", "deployment status"]
    assert rayjobs.categories == ["all"]
    workloads = registry.get("workloads.kueue.x-k8s.io")
    assert workloads.version == "v1beta2" and workloads.subresources == {"status"}
    assert workloads.schema is not None and workloads.printer_columns
    assert registry.get("resourceflavors.kueue.x-k8s.io").subresources == set()
    assert registry.get("workloadpriorityclasses.kueue.x-k8s.io").schema is not None
