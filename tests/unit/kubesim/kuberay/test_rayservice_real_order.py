"""What the real stack (KubeRay v1.6.2's RayService controller) showed and kubesim's model now does: the
finalizer pass before any status, the status's Go JSON shape, and readiness through the head pod's
``ray.io/serve`` label, the Serve Service's selector and the ready pods it selects."""

from __future__ import annotations

import copy

from kubesim.cluster import Cluster
from kubesim.kuberay.rayservice import REQUEUE_SECONDS, go_round_trip
from tests.unit.kubesim.kuberay.test_rayservice import RAYSERVICES, rayservice, service_status, serving
from tests.unit.kubesim.kuberay.test_reconcilers import NS, RAYCLUSTERS, cluster_spec, exists, scenario, until

ZERO_CLUSTER_STATUS = {
    "desiredCPU": "0",
    "desiredGPU": "0",
    "desiredMemory": "0",
    "desiredTPU": "0",
    "head": {},
}


def record(cluster: Cluster) -> list[tuple[float, dict]]:
    """Every RayService write: (simulated seconds since recording began, the object)."""
    start = cluster.clock.now()
    seen: list[tuple[float, dict]] = []
    cluster.store.subscribe(
        RAYSERVICES,
        lambda event: seen.append((cluster.clock.simulated_since(start), copy.deepcopy(event.object))),
        namespace=NS,
    )
    return seen


def test_the_first_pass_only_adds_the_finalizer_and_the_status_comes_at_the_requeue():
    """A spec already in Go's form (as KubeRay writes it back): the finalizer write changes no generation,
    so nothing reconciles the service until the requeue ServiceDefaultRequeueDuration later."""

    async def body(cluster: Cluster) -> None:
        writes = record(cluster)
        spec = go_round_trip({"rayClusterConfig": copy.deepcopy(cluster_spec())})
        cluster.store.create(RAYSERVICES, rayservice(config=spec["rayClusterConfig"]))
        await until(lambda: service_status(cluster).get("observedGeneration"), "a status")

        finalized = next(obj for _, obj in writes if obj["metadata"].get("finalizers"))
        assert finalized["metadata"]["finalizers"] == ["ray.io/rayservice-finalizer"]
        assert not finalized.get("status"), "the finalizer pass writes no status"
        assert finalized["metadata"]["generation"] == 1
        at_finalizer = next(t for t, obj in writes if obj["metadata"].get("finalizers"))
        at_status = next(t for t, obj in writes if obj.get("status"))
        assert at_status - at_finalizer >= REQUEUE_SECONDS * 0.9
        assert service_status(cluster)["observedGeneration"] == 1

    scenario(body)


def test_a_spec_kuberays_write_back_completes_is_a_new_generation_reconciled_at_once():
    """The real stack's case: a pod template without ``metadata`` comes back with ``metadata: {}``; the
    finalizer write is generation 2, and the status (observing 2) follows without waiting for the requeue."""

    async def body(cluster: Cluster) -> None:
        writes = record(cluster)
        cluster.store.create(RAYSERVICES, rayservice())
        await until(lambda: service_status(cluster).get("observedGeneration"), "a status")

        service = cluster.store.get(RAYSERVICES, "serve", namespace=NS)
        assert service["metadata"]["generation"] == 2
        assert service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["metadata"] == {}
        assert service_status(cluster)["observedGeneration"] == 2
        at_finalizer = next(t for t, obj in writes if obj["metadata"].get("finalizers"))
        at_status = next(t for t, obj in writes if obj.get("status"))
        assert at_status - at_finalizer < REQUEUE_SECONDS

    # At 1000x the 2 s requeue is 2 ms of real time, which a loaded machine's scheduling alone can exceed;
    # at 10x it is 200 ms, so "at once" and "at the requeue" stay apart.
    scenario(body, time_scale=10.0)


def test_an_empty_role_is_a_zeroed_status_object_and_zero_fields_are_left_out():
    async def body(cluster: Cluster) -> None:
        writes = record(cluster)
        cluster.store.create(RAYSERVICES, rayservice())
        await until(lambda: service_status(cluster).get("observedGeneration"), "a status")
        first = next(obj["status"] for _, obj in writes if obj.get("status"))
        assert first["activeServiceStatus"] == {"rayClusterStatus": ZERO_CLUSTER_STATUS}
        assert first["pendingServiceStatus"]["rayClusterStatus"] == ZERO_CLUSTER_STATUS
        assert "numServeEndpoints" not in first and "serviceStatus" not in first
        assert {c["observedGeneration"] for c in first["conditions"]} == {first["observedGeneration"]}

        status = await serving(cluster)
        assert status["pendingServiceStatus"] == {"rayClusterStatus": ZERO_CLUSTER_STATUS}
        app = status["activeServiceStatus"]["applicationStatuses"]["fruit"]
        assert app == {"status": "RUNNING", "serveDeploymentStatuses": {"MangoStand": {"status": "HEALTHY"}}}

    scenario(body)


def test_the_head_takes_traffic_once_its_serve_proxy_answers_and_endpoints_count_the_selected_ready_pods():
    async def body(cluster: Cluster) -> None:
        # Labels as each pod was created: the head's flips once its proxy answers, which at 1000x can come
        # before this coroutine next looks.
        created: dict[str, str] = {}
        cluster.store.subscribe(
            "pods",
            lambda event: (
                event.type == "ADDED"
                and created.setdefault(
                    event.object["metadata"]["name"], event.object["metadata"]["labels"]["ray.io/serve"]
                )
            ),
            namespace=NS,
        )
        cluster.store.create(RAYSERVICES, rayservice())
        name = await until(
            lambda: (service_status(cluster).get("pendingServiceStatus") or {}).get("rayClusterName"),
            "a name",
        )

        def pods() -> dict[str, str]:
            listed, _ = cluster.store.list("pods", namespace=NS, label_selector=f"ray.io/cluster={name}")
            return {
                p["metadata"]["labels"]["ray.io/node-type"] + p["metadata"]["name"][-5:]: p for p in listed
            }

        await until(lambda: len(pods()) == 3, "the cluster's pods")
        labels = sorted((key[:4], created[p["metadata"]["name"]]) for key, p in pods().items())
        assert labels == [("head", "false"), ("work", "true"), ("work", "true")]
        assert not exists(cluster, "services", "serve-serve-svc"), "no Service before Serve runs"

        status = await serving(cluster)
        assert status["activeServiceStatus"]["rayClusterName"] == name
        assert {p["metadata"]["labels"]["ray.io/serve"] for p in pods().values()} == {"true"}
        svc = cluster.store.get("services", "serve-serve-svc", namespace=NS)
        assert svc["spec"]["selector"] == {"ray.io/cluster": name, "ray.io/serve": "true"}
        assert svc["metadata"]["labels"] == {
            "ray.io/originated-from-cr-name": "serve",
            "ray.io/originated-from-crd": "RayService",
            "ray.io/serve": "serve-serve",
        }
        head_svc = cluster.store.get("services", "serve-head-svc", namespace=NS)
        assert head_svc["spec"]["selector"]["ray.io/cluster"] == name
        assert status["numServeEndpoints"] == 3

        # The head's label says whether the EndpointSlices list it: one taken out is one endpoint fewer.
        head = next(p for key, p in pods().items() if key.startswith("head"))
        service = cluster.store.get(RAYSERVICES, "serve", namespace=NS)
        service["spec"]["excludeHeadPodFromServeSvc"] = True
        cluster.store.update(RAYSERVICES, service)
        await until(lambda: service_status(cluster).get("numServeEndpoints") == 2, "the head excluded")
        assert (
            cluster.store.get("pods", head["metadata"]["name"], namespace=NS)["metadata"]["labels"][
                "ray.io/serve"
            ]
            == "false"
        )

    scenario(body)


def test_deleting_the_service_deletes_its_clusters_then_drops_the_finalizer():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYSERVICES, rayservice())
        name = (await serving(cluster))["activeServiceStatus"]["rayClusterName"]
        cluster.store.delete(RAYSERVICES, "serve", namespace=NS)

        await until(lambda: not exists(cluster, RAYSERVICES, "serve"), "the RayService gone")
        assert not exists(cluster, RAYCLUSTERS, name)

    scenario(body)
