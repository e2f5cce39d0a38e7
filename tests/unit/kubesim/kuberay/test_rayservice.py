"""KubeRay's RayService controller in kubesim: clusters, Serve applications and the upgrade switch.

Driven through the store with only the KubeRay controller running (Kueue's part is played by the test:
it suspends and admits through ``spec.rayClusterConfig`` as Kueue v0.19 does).
"""

from __future__ import annotations

import copy

from kubesim.cluster import Cluster
from tests.unit.kubesim.kuberay.test_reconcilers import (
    NS,
    RAYCLUSTERS,
    cluster_spec,
    events,
    exists,
    scenario,
    until,
)

RAYSERVICES = "rayservices.ray.io"
SERVE_CONFIG = (
    "applications:\n  - name: fruit\n    import_path: fruit:app\n    deployments:\n      - name: MangoStand\n"
)


def rayservice(*, annotations: dict | None = None, config: dict | None = None, **spec) -> dict:
    body = {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": config or copy.deepcopy(cluster_spec())}
    body.update(spec)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": "serve",
            "namespace": NS,
            "annotations": {"kubesim.dev/startup": "2", **(annotations or {})},
        },
        "spec": body,
    }


def service_status(cluster: Cluster) -> dict:
    return cluster.store.get(RAYSERVICES, "serve", namespace=NS).get("status") or {}


def conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def apps(role: dict) -> dict[str, str]:
    return {name: app["status"] for name, app in (role.get("applicationStatuses") or {}).items()}


async def serving(cluster: Cluster, *, other_than: str | None = None) -> dict:
    """Wait until the service serves with every application RUNNING (on a cluster other than ``other_than``)."""

    def check() -> dict | None:
        status = service_status(cluster)
        active = status.get("activeServiceStatus") or {}
        if status.get("serviceStatus") != "Running" or pending_name(status):
            return None
        if active.get("rayClusterName") == other_than or apps(active) != {"fruit": "RUNNING"}:
            return None
        return status

    return await until(check, "serving")


def pending_name(status: dict) -> str | None:
    return (status.get("pendingServiceStatus") or {}).get("rayClusterName")


def serve_selector(cluster: Cluster) -> str:
    svc = cluster.store.get("services", "serve-serve-svc", namespace=NS)
    return svc["spec"]["selector"]["ray.io/cluster"]


def update_spec(cluster: Cluster, change) -> None:
    service = cluster.store.get(RAYSERVICES, "serve", namespace=NS)
    change(service["spec"])
    cluster.store.update(RAYSERVICES, service)


def with_model(model: str):
    """A new model reaches the pods through their environment: a change of the cluster config."""

    def change(spec: dict) -> None:
        for template in [spec["rayClusterConfig"]["headGroupSpec"]["template"]] + [
            group["template"] for group in spec["rayClusterConfig"]["workerGroupSpecs"]
        ]:
            template["spec"]["containers"][0]["env"] = [{"name": "MODEL_PATH", "value": model}]

    return change


def test_a_new_rayservice_deploys_serve_on_a_pending_cluster_then_serves_from_it():
    async def body(cluster: Cluster) -> None:
        # Every status the service goes through. KubeRay reads Serve every 2 s: at a time scale of 100,
        # Serve's 10 s of DEPLOYING (100 ms) span several of those reads even on a loaded machine.
        statuses: list[dict] = []
        cluster.store.subscribe(
            RAYSERVICES, lambda event: statuses.append(event.object.get("status") or {}), namespace=NS
        )
        cluster.store.create(RAYSERVICES, rayservice())

        def deploying_seen() -> dict | None:
            return next(
                (s for s in statuses if apps(s.get("pendingServiceStatus") or {}) == {"fruit": "DEPLOYING"}),
                None,
            )

        deploying = await until(deploying_seen, "DEPLOYING on the pending cluster")
        assert conditions(deploying)["Ready"] == ("False", "Initializing")
        status = await serving(cluster)

        assert conditions(status)["Ready"] == ("True", "NonZeroServeEndpoints")
        assert conditions(status)["UpgradeInProgress"] == ("False", "NoPendingCluster")
        active = status["activeServiceStatus"]
        assert active["rayClusterName"] == deploying["pendingServiceStatus"]["rayClusterName"]
        assert active["rayClusterStatus"]["state"] == "ready"
        assert active["applicationStatuses"]["fruit"]["serveDeploymentStatuses"] == {
            "MangoStand": {"status": "HEALTHY"}
        }
        assert status["numServeEndpoints"] == 3
        assert serve_selector(cluster) == active["rayClusterName"]

    scenario(body, time_scale=100.0)


def test_a_new_cluster_config_brings_up_a_pending_cluster_switches_traffic_then_deletes_the_old_one():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYSERVICES, rayservice(rayClusterDeletionDelaySeconds=30))
        old = (await serving(cluster))["activeServiceStatus"]["rayClusterName"]

        update_spec(cluster, with_model("/models/v2"))

        upgrading = await until(lambda: pending_name(s := service_status(cluster)) and s, "a pending cluster")
        assert conditions(upgrading)["UpgradeInProgress"] == ("True", "BothActivePendingClustersExist")
        assert conditions(upgrading)["Ready"] == ("True", "NonZeroServeEndpoints")  # the old one serves
        assert upgrading["activeServiceStatus"]["rayClusterName"] == old
        assert serve_selector(cluster) == old
        new = upgrading["pendingServiceStatus"]["rayClusterName"]

        status = await serving(cluster, other_than=old)
        assert status["activeServiceStatus"]["rayClusterName"] == new
        assert serve_selector(cluster) == new
        assert ("PromotedPendingCluster", f"Switched traffic from RayCluster {NS}/{old} to {NS}/{new}") in (
            events(cluster)
        )
        assert exists(cluster, RAYCLUSTERS, old), "the old cluster is kept for the deletion delay"
        await until(lambda: not exists(cluster, RAYCLUSTERS, old), "the old cluster deleted")
        assert exists(cluster, RAYCLUSTERS, new)

    scenario(body)


def test_suspend_and_replicas_are_not_part_of_the_cluster_config_hash():
    """Kueue flips rayClusterConfig.suspend and an autoscaler moves replicas; neither prepares a new
    cluster, as in KubeRay (rayClusterSpecForHashing, GenerateHashWithoutReplicasAndWorkersToDelete)."""

    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYSERVICES, rayservice())
        active = (await serving(cluster))["activeServiceStatus"]["rayClusterName"]

        def flip(spec: dict) -> None:
            spec["rayClusterConfig"]["suspend"] = False
            spec["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] = 3

        update_spec(cluster, flip)
        generation = cluster.store.get(RAYSERVICES, "serve", namespace=NS)["metadata"]["generation"]
        await until(
            lambda: service_status(cluster).get("observedGeneration") == generation, "the flip observed"
        )

        status = service_status(cluster)
        assert not pending_name(status)
        assert status["activeServiceStatus"]["rayClusterName"] == active

    scenario(body)


def test_kueue_admission_rewrites_the_config_so_the_suspended_pending_cluster_is_replaced():
    """Kueue suspends a queued RayService through rayClusterConfig.suspend and, on admission, clears it and
    injects its pod labels and node selectors: that new config gets a new (running) cluster, and the
    suspended one is dropped."""

    async def body(cluster: Cluster) -> None:
        config = copy.deepcopy(cluster_spec())
        config["suspend"] = True
        cluster.store.create(RAYSERVICES, rayservice(config=config, rayClusterDeletionDelaySeconds=0))
        queued = await until(
            lambda: (service_status(cluster).get("pendingServiceStatus") or {}).get("rayClusterName"),
            "pending",
        )
        # The status names the pending cluster a pass before KubeRay creates it (shouldPrepareNewCluster).
        await until(
            lambda: (
                exists(cluster, RAYCLUSTERS, queued)
                and cluster.store.get(RAYCLUSTERS, queued, namespace=NS).get("status", {}).get("state")
                == "suspended"
            ),
            "the queued cluster suspended",
        )

        def admit(spec: dict) -> None:
            spec["rayClusterConfig"]["suspend"] = False
            head = spec["rayClusterConfig"]["headGroupSpec"]["template"]
            head.setdefault("metadata", {})["labels"] = {"kueue.x-k8s.io/podset": "head"}

        update_spec(cluster, admit)

        status = await serving(cluster)
        assert status["activeServiceStatus"]["rayClusterName"] != queued
        await until(lambda: not exists(cluster, RAYCLUSTERS, queued), "the suspended cluster deleted")

    scenario(body)


def test_a_serve_config_change_alone_updates_the_applications_in_place():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYSERVICES, rayservice())
        active = (await serving(cluster))["activeServiceStatus"]["rayClusterName"]

        update_spec(cluster, lambda spec: spec.update(serveConfigV2=SERVE_CONFIG + "    route_prefix: /v2\n"))

        redeploying = await until(
            lambda: (
                apps((s := service_status(cluster)).get("activeServiceStatus") or {})
                == {"fruit": "DEPLOYING"}
                and s
            ),
            "redeploying in place",
        )
        assert conditions(redeploying)["Ready"] == ("True", "NonZeroServeEndpoints")
        status = await serving(cluster)
        assert status["activeServiceStatus"]["rayClusterName"] == active
        assert not pending_name(status)

    scenario(body, time_scale=100.0)  # DEPLOYING lasts 100 ms: several of KubeRay's 2 s reads


def test_an_application_serve_cannot_import_fails_on_the_pending_cluster_and_never_takes_traffic():
    """The failure comes from the config Ray is sent (a module name Python can never import), so the real
    stack's Serve stand-in fails the same config."""

    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYSERVICES, rayservice())
        old = (await serving(cluster))["activeServiceStatus"]["rayClusterName"]
        service = cluster.store.get(RAYSERVICES, "serve", namespace=NS)
        service["spec"]["serveConfigV2"] = SERVE_CONFIG.replace("fruit:app", "no-such-fruit:app")
        with_model("/models/broken")(service["spec"])
        cluster.store.update(RAYSERVICES, service)

        failed = await until(
            lambda: (
                apps((s := service_status(cluster)).get("pendingServiceStatus") or {})
                == {"fruit": "DEPLOY_FAILED"}
                and s
            ),
            "DEPLOY_FAILED on the pending cluster",
        )
        app = failed["pendingServiceStatus"]["applicationStatuses"]["fruit"]
        assert app["message"] == (
            "Deploying application fruit failed with exception:\n"
            "ModuleNotFoundError: No module named 'no-such-fruit'"
        )
        assert "serveDeploymentStatuses" not in app, "Serve never built a deployment"
        assert failed["activeServiceStatus"]["rayClusterName"] == old
        assert conditions(failed)["Ready"] == ("True", "NonZeroServeEndpoints")
        assert serve_selector(cluster) == old

    scenario(body)
