"""`make run CLUSTER=multikueue`: a MultiKueue manager and its worker clusters in one kubesim process, set up
from include/manifests/kueue/multikueue/ as an administrator sets up real clusters.

kubesim creates nothing MultiKueue needs by itself, so this does the administrator's part: Kueue's
namespace (``kueue-system``, which Kueue's installation creates on a real cluster), then, once the
clusters answer, one Secret per worker in the manager holding that worker's kubeconfig under the key
``kubeconfig``, named as its MultiKueueCluster's ``spec.clusterSource.kubeConfig.location`` says. Airflow
gets the manager as ``kubernetes_default`` and each worker as the ``kubernetes`` connection
``kueue_worker_<MultiKueueCluster name>`` (its driver logs live there).

Then the showcase (``start_showcase``): three runs of the shipped text classifier on the manager's
MultiKueue LocalQueue, so that a newcomer sees two RayJobs running at once on different workers while a
third waits on the manager, without triggering anything.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from pathlib import Path

import httpx
import yaml

from devtools.airflow import kubernetes_connection_uri
from devtools.airflow_api import AirflowApi
from devtools.kubesim_process import KUEUE_MANIFESTS

MULTIKUEUE_MANIFESTS = KUEUE_MANIFESTS / "multikueue"
MANAGER_MANIFESTS = MULTIKUEUE_MANIFESTS / "manager"
WORKER_MANIFESTS = MULTIKUEUE_MANIFESTS / "worker"
KUEUE_NAMESPACE = "kueue-system"
"""Where Kueue runs, and so where MultiKueue reads the workers' kubeconfig Secrets."""
WORKER_CONNECTION_PREFIX = "kueue_worker_"
"""An Airflow ``kubernetes`` connection per worker cluster is named this plus its MultiKueueCluster name."""
KUEUE = ("kueue.x-k8s.io", "v1beta2")
SHOWCASE_DAG = "text_classifier_finetune"
SHOWCASE_CONF = {"queue": "multikueue-queue", "epochs": 10}
"""Three runs of the shipped text classifier on the manager's MultiKueue queue, 10 epochs (200 simulated
seconds) each, so that two visibly run at once, one per worker, while the third waits on the manager."""
SHOWCASE_RUNS = 3


def manager_documents(manifests: Path = MANAGER_MANIFESTS) -> list[dict]:
    return [
        doc
        for path in sorted(manifests.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def worker_secrets(manifests: Path = MANAGER_MANIFESTS) -> dict[str, str]:
    """MultiKueueCluster name -> the Secret (in ``kueue-system``) its kubeconfig is read from.

    >>> worker_secrets()
    {'worker1': 'worker1-secret', 'worker2': 'worker2-secret'}
    """
    return {
        doc["metadata"]["name"]: doc["spec"]["clusterSource"]["kubeConfig"]["location"]
        for doc in manager_documents(manifests)
        if doc["kind"] == "MultiKueueCluster"
    }


def worker_connection_id(cluster: str) -> str:
    """The Airflow connection of a worker cluster, named as the plugin looks it up
    (``kueue_ray.multikueue.worker_connection_id``, which this process cannot import: plugins/ is on the
    path of Airflow's components only; tests/unit/devtools/test_multikueue_names.py holds the two equal).

    >>> worker_connection_id("worker1"), worker_connection_id("gpu-east.eu")
    ('kueue_worker_worker1', 'kueue_worker_gpu_east_eu')
    """
    return WORKER_CONNECTION_PREFIX + re.sub(r"[^0-9A-Za-z_]", "_", cluster)


def connection_environment(worker_kubeconfigs: dict[str, Path]) -> dict[str, str]:
    """``AIRFLOW_CONN_*`` variables defining each worker's connection from its kubeconfig file.

    >>> connection_environment({"worker1": Path("/k/w1")})
    {'AIRFLOW_CONN_KUEUE_WORKER_WORKER1': '{"conn_type": "kubernetes", "extra": {"kube_config_path": "/k/w1"}}'}
    """
    return {
        f"AIRFLOW_CONN_{worker_connection_id(name).upper()}": kubernetes_connection_uri(path)
        for name, path in worker_kubeconfigs.items()
    }


def kueue_namespace_manifest(workdir: Path) -> Path:
    """A manifest of Kueue's namespace, applied first on every cluster (Kueue's installation creates it on
    a real one; the workers' ServiceAccount for the manager and the manager's Secrets live there)."""
    path = workdir / "kueue-system-namespace.yaml"
    path.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}})
    )
    return path


def create_worker_secrets(manager_kubeconfig: Path, worker_kubeconfigs: dict[str, Path]) -> list[str]:
    """In the manager, the Secret each MultiKueueCluster names, holding that worker's kubeconfig; returns
    their names. A MultiKueueCluster of the manifests without a worker kubeconfig is an error naming it."""
    from kubernetes import client, config

    secrets = worker_secrets()
    missing = sorted(set(secrets) - set(worker_kubeconfigs))
    if missing:
        raise ValueError(
            f"MultiKueueCluster(s) {missing} of {MANAGER_MANIFESTS} have no worker cluster "
            f"(workers: {sorted(worker_kubeconfigs)}); name them as the workers are"
        )
    api = config.new_client_from_config(config_file=str(manager_kubeconfig))
    try:
        core = client.CoreV1Api(api)
        for cluster, secret in secrets.items():
            data = base64.b64encode(worker_kubeconfigs[cluster].read_bytes()).decode()
            core.create_namespaced_secret(
                KUEUE_NAMESPACE, {"metadata": {"name": secret}, "data": {"kubeconfig": data}}
            )
    finally:
        api.close()
    return list(secrets.values())


def wait_connected(manager_kubeconfig: Path, timeout: float = 60) -> None:
    """Until every MultiKueueCluster is ``Active`` (connected); TimeoutError with their conditions else."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(manager_kubeconfig))
    try:
        custom = client.CustomObjectsApi(api)
        deadline = time.monotonic() + timeout
        while True:
            clusters = custom.list_cluster_custom_object(*KUEUE, "multikueueclusters")["items"]
            active = {
                mkc["metadata"]["name"]: next(
                    (c for c in (mkc.get("status") or {}).get("conditions") or [] if c["type"] == "Active"),
                    None,
                )
                for mkc in clusters
            }
            if active and all(c and c["status"] == "True" for c in active.values()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker clusters did not connect within {timeout:g}s: {active}")
            time.sleep(0.5)
    finally:
        api.close()


def kubesim_options(workdir: Path) -> dict:
    """What ``start_kubesim`` takes beside the queue setups to serve the manager and its workers: the
    manager's MultiKueue objects, and on every worker the shared base and the worker's queue."""
    namespace = kueue_namespace_manifest(workdir)
    return {
        "extra_apply": [namespace, MANAGER_MANIFESTS],
        "workers": len(worker_secrets()),
        "worker_apply": [namespace, *sorted(KUEUE_MANIFESTS.glob("*.yaml")), WORKER_MANIFESTS],
    }


def connect_workers(manager_kubeconfig: Path, worker_kubeconfigs: dict[str, Path]) -> dict[str, str]:
    """The administrator's last step: the Secrets, then wait until MultiKueue is connected to every worker;
    returns the Airflow connections (``AIRFLOW_CONN_*``) of the workers."""
    create_worker_secrets(manager_kubeconfig, worker_kubeconfigs)
    wait_connected(manager_kubeconfig)
    return connection_environment(worker_kubeconfigs)


class _Api(AirflowApi):
    """A REST client of its own for the showcase's thread (``make run`` keeps using its own)."""

    def __init__(self, url: str, log_path: Path) -> None:
        self.client = httpx.Client(base_url=url, timeout=120)
        self.log_path = log_path
        self.login()


def trigger_showcase(api: AirflowApi, *, timeout: float = 600) -> list[str]:
    """Trigger ``SHOWCASE_RUNS`` runs of ``SHOWCASE_DAG`` on the MultiKueue queue; returns their run ids.

    The DAG allows 3 active runs and its scheduled first run starts with `make run`, so they are
    triggered once no run of it is active, and all three take the slots together."""
    api.wait_for_dags([SHOWCASE_DAG], timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        response = api.api("GET", f"/dags/{SHOWCASE_DAG}/dagRuns", params={"state": ["queued", "running"]})
        if response.is_success and not response.json()["dag_runs"]:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{SHOWCASE_DAG} still has active runs after {timeout:g}s")
        time.sleep(2)
    return [api.trigger_dag_run(SHOWCASE_DAG, dict(SHOWCASE_CONF)) for _ in range(SHOWCASE_RUNS)]


def start_showcase(url: str, log_path: Path) -> threading.Thread:
    """``trigger_showcase`` in a daemon thread (`make run` goes on supervising meanwhile); prints what it
    triggered, or why it could not."""

    def run() -> None:
        try:
            api = _Api(url, log_path)
        except httpx.HTTPError as exc:
            print(f"MultiKueue showcase: not triggered ({exc})", flush=True)
            return
        try:
            run_ids = trigger_showcase(api)
        except (httpx.HTTPError, TimeoutError) as exc:
            print(f"MultiKueue showcase: not triggered ({exc})", flush=True)
            return
        finally:
            api.client.close()
        print(
            f"MultiKueue showcase: triggered {len(run_ids)} runs of {SHOWCASE_DAG} on "
            f"{SHOWCASE_CONF['queue']} ({', '.join(run_ids)}): two run at once, one per worker cluster, "
            "the third waits in ClusterQueue multikueue-cq (the Kueue queues page shows which worker runs what)",
            flush=True,
        )

    thread = threading.Thread(target=run, name="multikueue-showcase", daemon=True)
    thread.start()
    return thread
