"""include/manifests/kueue/multikueue/: a manager and its workers wired as Kueue v0.19's MultiKueue requires,
sized so that two text-classifier RayJobs run at once, one per worker, and a third waits on the manager.
(Schema validation of every manifest is test_manifests.py's.)"""

from __future__ import annotations

from pathlib import Path

import yaml
from kueue_ray.capacity import find_shortfall, max_capacity
from kueue_ray.manifests import AirflowIdentity, build_rayjob
from kueue_ray.params import LOCAL_QUEUES, NAMESPACE, PRIORITY_CLASSES

from devtools.kubesim_process import queue_setups
from devtools.multikueue import MANAGER_MANIFESTS, WORKER_MANIFESTS, worker_secrets

ROOT = Path(__file__).resolve().parents[3]
BASE = sorted((ROOT / "include/manifests/kueue").glob("*.yaml"))
IDENTITY = AirflowIdentity(dag_id="d", task_id="t", run_id="manual__1", map_index=-1, try_number=1)


def documents(folder: Path) -> list[dict]:
    return [
        doc for path in sorted(folder.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc
    ]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


MANAGER = documents(MANAGER_MANIFESTS)
WORKER = documents(WORKER_MANIFESTS)


def text_classifiers(count: int) -> list[dict]:
    one = build_rayjob(
        "text-classifier",
        name="tc",
        namespace=NAMESPACE,
        queue="multikueue-queue",
        priority="dev-priority",
        identity=IDENTITY,
    ).pod_sets
    return [dict(ps, count=ps["count"] * count) for ps in one]


def test_the_managers_cluster_queue_dispatches_through_a_multikueue_check_to_both_workers():
    checks = by_kind(MANAGER, "AdmissionCheck")
    assert set(checks) == {"multikueue"}
    check = checks["multikueue"]["spec"]
    assert check["controllerName"] == "kueue.x-k8s.io/multikueue"
    configs = by_kind(MANAGER, "MultiKueueConfig")
    assert check["parameters"] == {
        "apiGroup": "kueue.x-k8s.io",
        "kind": "MultiKueueConfig",
        "name": "gpu-workers",
    }
    assert configs["gpu-workers"]["spec"]["clusters"] == ["worker1", "worker2"]
    assert set(by_kind(MANAGER, "MultiKueueCluster")) == {"worker1", "worker2"}
    assert worker_secrets() == {"worker1": "worker1-secret", "worker2": "worker2-secret"}
    queue = by_kind(MANAGER, "ClusterQueue")["multikueue-cq"]["spec"]
    assert queue["admissionChecksStrategy"]["admissionChecks"] == [{"name": "multikueue"}]


def test_every_managers_local_queue_exists_on_the_workers_by_name_and_namespace():
    """MultiKueue creates the Workload copy in the manager's LocalQueue name and namespace on the worker."""
    manager_queues = {(q["metadata"]["namespace"], n) for n, q in by_kind(MANAGER, "LocalQueue").items()}
    worker_queues = {(q["metadata"]["namespace"], n) for n, q in by_kind(WORKER, "LocalQueue").items()}
    assert manager_queues == worker_queues == {(NAMESPACE, "multikueue-queue")}
    assert "multikueue-queue" in LOCAL_QUEUES
    assert set(by_kind(WORKER, "ClusterQueue")) == {
        q["spec"]["clusterQueue"] for q in by_kind(WORKER, "LocalQueue").values()
    }


def test_the_manager_admits_two_text_classifiers_and_each_worker_runs_one():
    manager = max_capacity(by_kind(MANAGER, "ClusterQueue")["multikueue-cq"])
    worker = max_capacity(by_kind(WORKER, "ClusterQueue")["worker-cq"])
    assert find_shortfall(text_classifiers(2), manager) is None
    assert find_shortfall(text_classifiers(3), manager) is not None  # the third waits on the manager
    assert find_shortfall(text_classifiers(1), worker) is None
    assert find_shortfall(text_classifiers(2), worker) is not None


def test_the_flavors_and_priority_classes_the_queues_use_are_in_the_shared_base():
    """The workers get the shared base too: the copies name the manager's WorkloadPriorityClass."""
    base = [doc for path in BASE for doc in yaml.safe_load_all(path.read_text()) if doc]
    flavors = set(by_kind(base, "ResourceFlavor"))
    for queue in [*by_kind(MANAGER, "ClusterQueue").values(), *by_kind(WORKER, "ClusterQueue").values()]:
        used = {f["name"] for group in queue["spec"]["resourceGroups"] for f in group["flavors"]}
        assert used <= flavors
    assert set(by_kind(base, "WorkloadPriorityClass")) == set(PRIORITY_CLASSES)


def test_the_worker_lets_the_managers_account_manage_workload_and_rayjob_copies_only():
    role = by_kind(WORKER, "ClusterRole")["multikueue-sa-role"]
    granted = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert set(granted) == {
        ("kueue.x-k8s.io", "workloads"),
        ("kueue.x-k8s.io", "workloads/status"),
        ("ray.io", "rayjobs"),
        ("ray.io", "rayjobs/status"),
    }
    assert {"create", "delete", "watch"} <= granted[("ray.io", "rayjobs")]
    binding = by_kind(WORKER, "ClusterRoleBinding")["multikueue-sa-crb"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "multikueue-sa", "namespace": "kueue-system"}
    ]
    token = by_kind(WORKER, "Secret")["multikueue-sa"]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "multikueue-sa"


def test_the_multikueue_folder_is_no_queue_setup_of_a_lone_cluster():
    """`make run` installs every queue setup side by side in one cluster; the manager's and workers' objects
    belong to different clusters (CLUSTER=multikueue)."""
    assert "multikueue" not in queue_setups()
    assert {"single-queue", "team-queues"} <= set(queue_setups())


def test_the_setup_helpers_examples_hold():
    import doctest

    import devtools.multikueue

    assert doctest.testmod(devtools.multikueue).failed == 0


def test_the_readme_section_names_the_files_secrets_and_connections_that_exist():
    import re

    from devtools.multikueue import worker_connection_id

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Several GPU clusters (MultiKueue)") :]
    section = section[: section.index("\n## ", 1)]
    paths = set(re.findall(r"include/manifests/kueue/[\w/-]*", section))
    assert {
        "include/manifests/kueue/multikueue/manager/",
        "include/manifests/kueue/multikueue/worker/",
    } <= paths
    assert all((ROOT / path).exists() for path in paths), paths
    for cluster, secret in worker_secrets().items():
        assert f"create secret generic {secret} --from-file=kubeconfig={cluster}.kubeconfig" in section
    assert worker_connection_id("worker1") in section and "CLUSTER=multikueue make run" in section
    token = by_kind(WORKER, "Secret")["multikueue-sa"]["metadata"]
    assert f"-n {token['namespace']} get secret {token['name']}" in section
