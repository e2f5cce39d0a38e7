"""Which jobs Kueue's job reconciler acts on: only in the namespaces ``managedJobsNamespaceSelector`` selects,
and a child Job under a job Kueue admits (KubeRay's submitter Job under its RayJob) is suspended once that
ancestor's Workload is finished or not admitted (``shouldSuspendChildJob``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kubesim.cluster import Cluster
from kubesim.kueue import jobs
from tests.unit.kubesim.support import until

JOBS = "jobs.batch"
RAYJOBS = "rayjobs.ray.io"
WORKLOADS = "workloads.kueue.x-k8s.io"


def rayjob(name: str, namespace: str) -> dict:
    container = {
        "name": "ray-head",
        "image": "rayproject/ray:2.52.0",
        "resources": {"requests": {"cpu": "1"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {jobs.QUEUE_LABEL: "user-queue"}},
        "spec": {
            "entrypoint": "sleep 60",
            "submissionMode": "HTTPMode",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}}
            },
        },
    }


def child_job(parent: dict) -> dict:
    """A Job owned by the RayJob, as KubeRay's submitter Job is: no queue label of its own."""
    ref = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "name": parent["metadata"]["name"],
        "uid": parent["metadata"]["uid"],
        "controller": True,
    }
    container = {"name": "ray-job-submitter", "image": "rayproject/ray:2.52.0", "command": ["sleep", "600"]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": parent["metadata"]["name"], "ownerReferences": [ref]},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def run(body: Callable, namespaces: tuple[str, ...]) -> None:
    """kubesim's Kueue and Job controllers, no KubeRay: the test plays KubeRay's part."""

    async def main() -> None:
        cluster = Cluster(time_scale=1000.0, controllers=("kubesim.batch", "kubesim.kueue"))
        store = cluster.store
        store.create("resourceflavors.kueue.x-k8s.io", {"metadata": {"name": "f"}})
        quota = [{"name": "cpu", "nominalQuota": "8"}]
        spec = {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": quota}]}],
        }
        store.create("clusterqueues.kueue.x-k8s.io", {"metadata": {"name": "cq"}, "spec": spec})
        for namespace in namespaces:
            if store.get_or_none("namespaces", namespace) is None:
                store.create("namespaces", {"metadata": {"name": namespace}})
            lq = {"metadata": {"name": "user-queue", "namespace": namespace}, "spec": {"clusterQueue": "cq"}}
            store.create("localqueues.kueue.x-k8s.io", lq)
        await cluster.start()
        try:
            await asyncio.wait_for(body(cluster), 10)
        finally:
            await cluster.stop()

    asyncio.run(main())


def workloads(cluster: Cluster, namespace: str) -> list[dict]:
    return cluster.store.list(WORKLOADS, namespace=namespace)[0]


def test_a_child_job_is_suspended_once_its_ancestors_workload_finished():
    async def body(cluster: Cluster) -> None:
        store = cluster.store
        parent = store.create(RAYJOBS, rayjob("train", "ml"))
        await until(lambda: not store.get(RAYJOBS, "train", namespace="ml")["spec"]["suspend"], "admitted")
        store.create(JOBS, child_job(parent), namespace="ml")

        def running() -> bool:
            return (store.get(JOBS, "train", namespace="ml").get("status") or {}).get("active") == 1

        await until(running, "the child Job runs under an admitted ancestor")
        assert store.get(JOBS, "train", namespace="ml")["spec"].get("suspend") is False
        # KubeRay gives up on the RayJob (a deadline), with its submitter still running.
        parent = store.get(RAYJOBS, "train", namespace="ml")
        parent["status"] = {"jobDeploymentStatus": "Failed", "jobStatus": "", "reason": "DeadlineExceeded"}
        store.update(RAYJOBS, parent, subresource="status")
        await until(lambda: store.get(JOBS, "train", namespace="ml")["spec"]["suspend"], "child suspended")
        events = store.list("events", namespace="ml")[0]
        assert any(
            (e["reason"], e["message"], e["involvedObject"]["kind"])
            == ("Suspended", "Kueue managed child job suspended", "Job")
            for e in events
        )
        assert [w["metadata"]["ownerReferences"][0]["kind"] for w in workloads(cluster, "ml")] == ["RayJob"]

    run(body, ("ml",))


def test_a_queue_labelled_rayjob_outside_the_managed_namespaces_stays_suspended_without_a_workload():
    """The webhook suspends a job with a queue label wherever it is; the reconciler ignores it in a
    namespace the selector leaves out (kube-system, Kueue's own), so it never runs."""

    async def body(cluster: Cluster) -> None:
        store = cluster.store
        store.create(RAYJOBS, rayjob("outside", "kube-system"))
        store.create(RAYJOBS, rayjob("inside", "ml"))
        await until(lambda: workloads(cluster, "ml"), "a Workload in a managed namespace")
        await until(lambda: not store.get(RAYJOBS, "inside", namespace="ml")["spec"]["suspend"], "admitted")
        assert workloads(cluster, "kube-system") == []
        assert store.get(RAYJOBS, "outside", namespace="kube-system")["spec"]["suspend"] is True

    run(body, ("ml", "kube-system"))
