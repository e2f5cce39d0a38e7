"""A MultiKueue manager and two workers (``kubesim.testing.run_kubesim_clusters``) set up as an administrator
would set up real clusters, for the plugin's tests across clusters: the manager's ClusterQueue ``cq`` (LocalQueue
``lq`` in namespace ``default``) carries the ``multikueue`` AdmissionCheck whose MultiKueueConfig lists
``worker1`` and ``worker2``, each connected through a kubeconfig Secret; each worker has the same queues
without the check, with room for one RayJob of ``REQUESTS`` (head and submitter) at a time.

Airflow reaches the manager through ``kubernetes_default`` and a worker through ``kueue_worker_<name>``
(``kueue_ray.multikueue.worker_connection_id``), set as environment variables as in production.
Only kubesim serves several clusters: the real stack is one cluster, so these tests are kubesim-only.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kueue_ray.multikueue import worker_connection_id

from kubesim.testing import KubesimClusters, run_kubesim_clusters
from tests.integration.kubesim.support import multikueue_objects
from tests.integration.kueue_ray.conftest import wait_for
from tests.rayjobs import rayjob_body

KUEUE = ("kueue.x-k8s.io", "v1beta2")
RAY = ("ray.io", "v1")
NAMESPACE = "default"
LOCAL_QUEUE = "lq"
CHECK = "multikueue"
TIME_SCALE = 50.0
KUBESIM_ONLY = pytest.mark.kubesim_only("several clusters: the real stack is one cluster")
REQUESTS = {"cpu": "1", "memory": "1Gi"}
"""A RayJob head's requests: with the K8sJobMode submitter (500m) it fills one worker's quota of 2 CPUs."""


def queue_objects(*, check: bool, cpu: str, manager_gpus: str | None = None) -> list[dict]:
    resources = [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "64Gi"}]
    covered = ["cpu", "memory"]
    if manager_gpus is not None:
        resources.append({"name": "nvidia.com/gpu", "nominalQuota": manager_gpus})
        covered.append("nvidia.com/gpu")
    spec: dict = {
        "namespaceSelector": {},
        "resourceGroups": [
            {"coveredResources": covered, "flavors": [{"name": "default", "resources": resources}]}
        ],
    }
    if check:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": CHECK}]}
    kueue = "kueue.x-k8s.io/v1beta2"
    return [
        {"apiVersion": kueue, "kind": "WorkloadPriorityClass", "metadata": {"name": "low"}, "value": 1},
        {"apiVersion": kueue, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 100},
        {"apiVersion": kueue, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {"apiVersion": kueue, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec},
        {
            "apiVersion": kueue,
            "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": NAMESPACE},
            "spec": {"clusterQueue": "cq"},
        },
    ]


def manager_objects() -> list[dict]:
    """The manager's queues (quota for four RayJobs, and 8 GPUs no manager node has: the workers have the
    capacity), the check, the MultiKueueConfig and Kueue's namespace for the kubeconfig Secrets."""
    return queue_objects(check=True, cpu="8", manager_gpus="8") + multikueue_objects(CHECK)


@dataclass
class MultiKueue:
    sims: KubesimClusters
    manager: client.ApiClient
    workers: dict[str, client.ApiClient]

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.manager)

    def remote(self, worker: str) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.workers[worker])

    def rayjob(self, name: str, api: client.CustomObjectsApi | None = None) -> dict | None:
        try:
            return (api or self.custom).get_namespaced_custom_object(*RAY, NAMESPACE, "rayjobs", name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def workload(self, uid: str, api: client.CustomObjectsApi | None = None) -> dict | None:
        items = (api or self.custom).list_namespaced_custom_object(
            *KUEUE, NAMESPACE, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={uid}"
        )["items"]
        return items[0] if items else None

    def dispatched_to(self, uid: str) -> str | None:
        wl = self.workload(uid)
        return ((wl or {}).get("status") or {}).get("clusterName")

    def set_kubeconfig_server(self, worker: str, server: str | None) -> None:
        """Point the manager's kubeconfig Secret of ``worker`` at ``server`` (None: the worker itself), as
        upstream's ``util.BreakConnection`` breaks a worker's connection."""
        kubeconfig = yaml.safe_load(Path(self.sims.workers[worker].kubeconfig).read_text())
        if server is not None:
            for entry in kubeconfig["clusters"]:
                entry["cluster"]["server"] = server
        data = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
        client.CoreV1Api(self.manager).patch_namespaced_secret(
            f"{worker}-secret", "kueue-system", {"data": {"kubeconfig": data}}
        )

    def worker_connections(self, monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
        """Airflow's ``kueue_worker_<name>`` connections, each with its worker's dashboard URL template."""
        for name in names:
            extra = {
                "kube_config_path": self.sims.workers[name].kubeconfig,
                "ray_dashboard_url_template": DASHBOARD,
            }
            monkeypatch.setenv(
                f"AIRFLOW_CONN_{worker_connection_id(name).upper()}",
                json.dumps({"conn_type": "kubernetes", "extra": extra}),
            )


DASHBOARD = "https://ray.example/{worker_cluster}/{namespace}/{name}/#/jobs"
"""The Ray dashboard link a worker's connection renders (``ray_dashboard_url_template``)."""


def write_manifests(directory: Path, name: str, objects: list[dict]) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def start(directory: Path):
    """Context manager yielding a connected ``MultiKueue`` (the worker-lost grace: 60 simulated s)."""
    kueue_config = directory / "kueue-config.yaml"
    kueue_config.write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nmultiKueue:\n  workerLostTimeout: 1m\n"
    )
    return run_kubesim_clusters(
        kueue_config=kueue_config,
        workers=2,
        apply=[write_manifests(directory, "manager", manager_objects())],
        worker_apply=[write_manifests(directory, "worker", queue_objects(check=False, cpu="2"))],
        time_scale=TIME_SCALE,
    )


def connect(sims: KubesimClusters) -> MultiKueue:
    manager = config.new_client_from_config(config_file=sims.manager.kubeconfig)
    workers = {
        name: config.new_client_from_config(config_file=sim.kubeconfig) for name, sim in sims.workers.items()
    }
    core, custom = client.CoreV1Api(manager), client.CustomObjectsApi(manager)
    for name, sim in sims.workers.items():
        data = base64.b64encode(Path(sim.kubeconfig).read_bytes()).decode()
        core.create_namespaced_secret(
            "kueue-system", {"metadata": {"name": f"{name}-secret"}, "data": {"kubeconfig": data}}
        )
        custom.create_cluster_custom_object(
            *KUEUE,
            "multikueueclusters",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "MultiKueueCluster",
                "metadata": {"name": name},
                "spec": {"clusterSource": {"kubeConfig": {"location": f"{name}-secret"}}},
            },
        )

    def active() -> bool:
        check = custom.get_cluster_custom_object(*KUEUE, "admissionchecks", CHECK)
        return any(
            c["type"] == "Active" and c["status"] == "True" and c["reason"] == "Active"
            for c in (check.get("status") or {}).get("conditions") or ()
        )

    wait_for(active)
    return MultiKueue(sims, manager, workers)


def body(entrypoint: str = "sleep 20", requests: dict | None = None) -> dict:
    """A K8sJobMode RayJob template (its submitter pod's log is the driver log the task shows)."""
    return rayjob_body(
        "placeholder",
        requests=requests or REQUESTS,
        entrypoint=entrypoint,
        submission_mode="K8sJobMode",
        shutdown_after_job_finishes=None,
    )
