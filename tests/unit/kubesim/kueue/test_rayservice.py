"""Kueue v0.19 and KubeRay v1.7 together on a RayService, in-process (both controllers, one store).

Two ways Kueue can manage a RayService, chosen by its ``integrations.frameworks``:

* shipped (``ray.io/rayservice`` enabled): the RayService is the job, with one Workload
  (``kueue.x-k8s.io/job-uid`` = the RayService's uid). A new cluster config for a serving RayService no
  longer matches that Workload: Kueue deletes it and creates none while the old cluster still serves.
* without ``ray.io/rayservice``: every RayCluster KubeRay creates for it is the job (its own Workload,
  ``job-uid`` = the RayCluster's uid), so an upgrade's pending cluster is queued, admitted and preempted on
  its own while the active one serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Callable

from kubesim.cluster import Cluster
from kubesim.errors import ApiError
from kubesim.kueue.config import KueueConfig
from tests.unit.kubesim.kuberay.test_reconcilers import cluster_spec

NS = "serving"
KUEUE = "kueue.x-k8s.io"
RAYSERVICES = "rayservices.ray.io"
RAYCLUSTERS = "rayclusters.ray.io"
WORKLOADS = "workloads.kueue.x-k8s.io"
TIME_SCALE = 200.0
WAIT_REAL_SECONDS = 15.0
SERVE_CONFIG = (
    "applications:\n  - name: app\n    import_path: app:app\n    deployments:\n      - name: Model\n"
)
BY_CLUSTER = KueueConfig(frameworks=frozenset({"ray.io/rayjob", "ray.io/raycluster"}))


def setup(cluster: Cluster) -> None:
    """A ClusterQueue with room for two 4-CPU clusters, two priority classes, LocalQueue user-queue."""
    store = cluster.store
    with contextlib.suppress(ApiError):
        store.create("namespaces", {"metadata": {"name": NS}})
    store.create(f"resourceflavors.{KUEUE}", {"apiVersion": f"{KUEUE}/v1beta2", "metadata": {"name": "f"}})
    store.create(
        f"clusterqueues.{KUEUE}",
        {
            "apiVersion": f"{KUEUE}/v1beta2",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "f",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "8"},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    for name, value in (("low", 100), ("high", 1000)):
        store.create(
            f"workloadpriorityclasses.{KUEUE}",
            {"apiVersion": f"{KUEUE}/v1beta2", "metadata": {"name": name}, "value": value},
        )
    store.create(
        f"localqueues.{KUEUE}",
        {
            "apiVersion": f"{KUEUE}/v1beta2",
            "metadata": {"name": "user-queue", "namespace": NS},
            "spec": {"clusterQueue": "cq"},
        },
        namespace=NS,
    )


def four_cpus() -> dict:
    """A head of 1 CPU and two 500m workers (2 CPUs) per cluster, sized up to 4 CPUs with the head."""
    spec = copy.deepcopy(cluster_spec())
    spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    return spec


def rayservice(priority: str = "low", **spec) -> dict:
    body = {
        "serveConfigV2": SERVE_CONFIG,
        "rayClusterConfig": four_cpus(),
        "rayClusterDeletionDelaySeconds": 0,
    }
    body.update(spec)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": "serve",
            "namespace": NS,
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/priority-class": priority},
            "annotations": {"kubesim.dev/startup": "2"},
        },
        "spec": body,
    }


def scenario(body: Callable[[Cluster], object], config: KueueConfig | None = None) -> None:
    async def main() -> None:
        cluster = Cluster(time_scale=TIME_SCALE, kueue_config=config)
        await cluster.start()
        try:
            setup(cluster)
            await body(cluster)
        finally:
            await cluster.stop()

    asyncio.run(main())


async def until(check: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + WAIT_REAL_SECONDS
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def service(cluster: Cluster) -> dict:
    return cluster.store.get(RAYSERVICES, "serve", namespace=NS)


def workloads(cluster: Cluster) -> list[dict]:
    items, _ = cluster.store.list(WORKLOADS, namespace=NS)
    return items


def owner_of(workload: dict) -> tuple[str, str]:
    ref = workload["metadata"]["ownerReferences"][0]
    return ref["kind"], ref["name"]


def condition(workload: dict, kind: str) -> dict:
    return next((c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def serving_on(cluster: Cluster, *, other_than: str | None = None) -> Callable[[], str | None]:
    def check() -> str | None:
        status = service(cluster).get("status") or {}
        active = (status.get("activeServiceStatus") or {}).get("rayClusterName")
        apps = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
        running = apps and all(app["status"] == "RUNNING" for app in apps.values())
        if (
            status.get("serviceStatus") == "Running"
            and running
            and not (status.get("pendingServiceStatus") or {}).get("rayClusterName")
        ):
            return active if active != other_than else None
        return None

    return check


def pending_cluster(cluster: Cluster) -> Callable[[], dict | None]:
    """The RayService's pending RayCluster once it exists."""

    def check() -> dict | None:
        name = (service(cluster).get("status", {}).get("pendingServiceStatus") or {}).get("rayClusterName")
        if not name:
            return None
        try:
            return cluster.store.get(RAYCLUSTERS, name, namespace=NS)
        except ApiError:
            return None

    return check


def new_model(spec: dict) -> None:
    for template in [spec["rayClusterConfig"]["headGroupSpec"]["template"]] + [
        g["template"] for g in spec["rayClusterConfig"]["workerGroupSpecs"]
    ]:
        template["spec"]["containers"][0]["env"] = [{"name": "MODEL_PATH", "value": "/models/v2"}]


def update(cluster: Cluster, change: Callable[[dict], None]) -> None:
    obj = service(cluster)
    change(obj["spec"])
    cluster.store.update(RAYSERVICES, obj)


def test_shipped_config_admits_the_rayservice_as_one_workload():
    async def body(cluster: Cluster) -> None:
        created = cluster.store.create(RAYSERVICES, rayservice(), namespace=NS)
        assert created["spec"]["rayClusterConfig"]["suspend"] is True

        active = await until(serving_on(cluster), "serving")

        [workload] = workloads(cluster)
        assert owner_of(workload) == ("RayService", "serve")
        assert workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == created["metadata"]["uid"]
        assert condition(workload, "Admitted")["status"] == "True"
        ray_cluster = cluster.store.get(RAYCLUSTERS, active, namespace=NS)
        assert not ray_cluster["spec"].get("suspend")

    scenario(body)


def test_shipped_config_a_new_cluster_config_of_a_serving_rayservice_gets_no_workload():
    """What Kueue v0.19 does to an upgrade it admits as one job: the Workload no longer matches, Kueue
    deletes it and waits for the RayService to stop being active (Ready) before creating another, so the
    new cluster, created suspended, never starts while the old one serves."""

    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYSERVICES, rayservice(), namespace=NS)
        old = await until(serving_on(cluster), "serving")

        update(cluster, new_model)

        await until(lambda: not workloads(cluster), "the non-matching Workload deleted")
        await until(pending_cluster(cluster), "a pending cluster")
        await asyncio.sleep(60 / TIME_SCALE)  # a simulated minute later: still stalled
        assert workloads(cluster) == []
        assert service(cluster)["spec"]["rayClusterConfig"]["suspend"] is True
        # Kueue's stop restores the pod templates it had injected into, itself a new cluster config: when
        # KubeRay created a pending cluster in between, it replaces it, so the pending one is read now.
        pending = await until(pending_cluster(cluster), "the pending cluster")
        assert pending["spec"]["suspend"] is True
        assert service(cluster)["status"]["activeServiceStatus"]["rayClusterName"] == old
        reasons = [e["reason"] for e in cluster.store.list("events", namespace=NS)[0]]
        assert "DeletedWorkload" in reasons

    scenario(body)


def test_by_cluster_each_raycluster_is_queued_and_admitted_on_its_own_and_an_upgrade_switches():
    async def body(cluster: Cluster) -> None:
        created = cluster.store.create(RAYSERVICES, rayservice(), namespace=NS)
        assert not created["spec"]["rayClusterConfig"].get("suspend")
        old = await until(serving_on(cluster), "serving")
        [first] = workloads(cluster)
        assert owner_of(first) == ("RayCluster", old)

        update(cluster, new_model)

        new = await until(serving_on(cluster, other_than=old), "serving from the new cluster")
        owners = {owner_of(w) for w in workloads(cluster) if not condition(w, "Finished")}
        assert ("RayCluster", new) in owners
        await until(lambda: ("RayCluster", old) not in {owner_of(w) for w in workloads(cluster)}, "old gone")

    scenario(body, BY_CLUSTER)


def test_by_cluster_a_preempted_pending_cluster_is_suspended_while_the_active_one_serves():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYSERVICES, rayservice(), namespace=NS)
        old = await until(serving_on(cluster), "serving")
        update(cluster, new_model)
        pending = await until(
            lambda: (service(cluster).get("status", {}).get("pendingServiceStatus") or {}).get(
                "rayClusterName"
            ),
            "a pending cluster",
        )
        await until(
            lambda: any(
                owner_of(w) == ("RayCluster", pending) and condition(w, "Admitted").get("status") == "True"
                for w in workloads(cluster)
            ),
            "the pending cluster admitted",
        )
        # A high-priority cluster that needs the pending cluster's quota (the active one holds the rest).
        intruder = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {
                "name": "urgent",
                "namespace": NS,
                "labels": {
                    "kueue.x-k8s.io/queue-name": "user-queue",
                    "kueue.x-k8s.io/priority-class": "high",
                },
            },
            "spec": four_cpus(),
        }
        cluster.store.create(RAYCLUSTERS, intruder, namespace=NS)

        def preempted() -> dict | None:
            for w in workloads(cluster):
                if (
                    owner_of(w) == ("RayCluster", pending)
                    and condition(w, "Preempted").get("status") == "True"
                ):
                    return w
            return None

        await until(preempted, "the pending cluster's Workload preempted")
        await until(
            lambda: cluster.store.get(RAYCLUSTERS, pending, namespace=NS)["spec"].get("suspend") is True,
            "the pending cluster suspended",
        )
        status = service(cluster)["status"]
        assert status["activeServiceStatus"]["rayClusterName"] == old
        assert status["pendingServiceStatus"]["rayClusterName"] == pending
        assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"

    scenario(body, BY_CLUSTER)
