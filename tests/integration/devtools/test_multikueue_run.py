"""`make run CLUSTER=multikueue`'s clusters, without Airflow's components: kubesim started as `make run`
starts it (a manager with every queue setup and include/manifests/kueue/multikueue/manager/, two workers
with the shared base and multikueue/worker/), connected as devtools.multikueue does, then three
text-classifier RayJobs on ``multikueue-queue``: two run at once on different workers, the third waits on
the manager and runs once one has finished. Each worker's Airflow connection reaches that worker.

The third waits long enough to be parked as inadmissible; MultiKueue, not the manager's job reconciler,
finishes the first two, and Kueue requeues the parked one on that update as on any finished Workload
(``workload_controller.go`` Update): kubesim once left it pending for good."""

from __future__ import annotations

import time

import pytest
from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from kubernetes import client, config
from kueue_ray.manifests import AirflowIdentity, build_rayjob

from devtools.kubesim_process import ALL_SETUPS, start_kubesim
from devtools.multikueue import connect_workers, kubesim_options
from devtools.run import KUEUE_CONFIG

TIME_SCALE = 10.0
KUEUE = ("kueue.x-k8s.io", "v1beta2")
RAY = ("ray.io", "v1")
NAMESPACE = "ray"


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("multikueue-run")
    sim = start_kubesim(
        workdir,
        queues=ALL_SETUPS,
        time_scale=TIME_SCALE,
        kueue_config=KUEUE_CONFIG,
        tls=True,
        **kubesim_options(workdir),
    )
    try:
        connections = connect_workers(sim.kubeconfig, sim.workers)
        yield sim, connections
    finally:
        sim.stop()


def rayjob(name: str) -> dict:
    identity = AirflowIdentity(dag_id="d", task_id="t", run_id=name, map_index=-1, try_number=1)
    return build_rayjob(
        "text-classifier",
        name=name,
        namespace=NAMESPACE,
        queue="multikueue-queue",
        priority="dev-priority",
        identity=identity,
        values={"num_epochs": 10},  # 200 simulated seconds: 20 s here
    ).body


def workloads(custom) -> dict[str, dict]:
    """The manager's Workloads by their RayJob's name."""
    items = custom.list_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads")["items"]
    return {wl["metadata"]["ownerReferences"][0]["name"]: wl for wl in items}


def reserved(wl: dict) -> bool:
    return any(
        c["type"] == "QuotaReserved" and c["status"] == "True"
        for c in (wl.get("status") or {}).get("conditions", [])
    )


def test_two_rayjobs_run_on_different_workers_while_a_third_waits_on_the_manager(clusters, monkeypatch):
    sim, connections = clusters
    api = config.new_client_from_config(config_file=str(sim.kubeconfig))
    custom = client.CustomObjectsApi(api)
    names = ["tc-1", "tc-2", "tc-3"]
    for name in names:
        custom.create_namespaced_custom_object(*RAY, NAMESPACE, "rayjobs", rayjob(name))
        time.sleep(0.3)  # creation order is queue order (same priority)

    deadline = time.monotonic() + 60
    seen_at_once: dict[str, str] = {}
    while time.monotonic() < deadline:
        wls = workloads(custom)
        running = {
            name: wl["status"]["clusterName"]
            for name, wl in wls.items()
            if (wl.get("status") or {}).get("clusterName")
            and custom.get_namespaced_custom_object(*RAY, NAMESPACE, "rayjobs", name)
            .get("status", {})
            .get("jobDeploymentStatus")
            == "Running"
        }
        if len(running) == 2:
            seen_at_once = running
            waiting = [wls[name] for name in names if name not in running]
            break
        time.sleep(0.2)
    assert sorted(seen_at_once.values()) == ["worker1", "worker2"], workloads(custom)
    assert len(waiting) == 1 and not reserved(waiting[0]), waiting
    # The manager runs none of them: KubeRay leaves RayJobs managed by MultiKueue alone.
    assert custom.list_namespaced_custom_object(*RAY, NAMESPACE, "rayclusters")["items"] == []

    # Each worker's Airflow connection (kueue_worker_<cluster>) reaches the worker running its RayJob.
    for variable, value in connections.items():
        monkeypatch.setenv(variable, value)
    for name, cluster in seen_at_once.items():
        worker_api = KubernetesHook(conn_id=f"kueue_worker_{cluster}").api_client
        copy = client.CustomObjectsApi(worker_api).get_namespaced_custom_object(
            *RAY, NAMESPACE, "rayjobs", name
        )
        assert copy["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"

    def all_done() -> bool:
        jobs = custom.list_namespaced_custom_object(*RAY, NAMESPACE, "rayjobs")["items"]
        return len(jobs) == 3 and all(j.get("status", {}).get("jobStatus") == "SUCCEEDED" for j in jobs)

    deadline = time.monotonic() + 90
    while not all_done():
        assert time.monotonic() < deadline, custom.list_namespaced_custom_object(*RAY, NAMESPACE, "rayjobs")
        time.sleep(0.5)
    third = workloads(custom)["tc-3"]
    assert third["status"]["clusterName"] in ("worker1", "worker2")
    api.close()
