"""RayService (KubeRay v1.7.0), reduced to what a client waits for: a serving RayCluster.

A new RayService gets a pending RayCluster ``<name>-<5 rand>``; once it is ready, the Serve
applications named in ``spec.serveConfigV2`` are reported RUNNING (their deployments HEALTHY), the
cluster becomes the active one and ``Ready`` turns True with ``NonZeroServeEndpoints``, exactly the
conditions ``calculateConditions`` writes. ``spec.suspend`` (new in 1.7) deletes the cluster and
walks ``Suspending`` → ``Suspended``; clearing it starts over.

Each cluster carries the hash of the ``rayClusterConfig`` it was built from. When the goal config changes
(Kueue admitting the service rewrites ``rayClusterConfig``: ``suspend: false`` plus the flavor's node
selectors), a new pending cluster is prepared from it, as KubeRay's ``shouldPrepareNewCluster`` does; the
old active cluster is deleted once the new one is ready and takes over.
"""

from __future__ import annotations

import copy
import hashlib
import json

import yaml

from kubesim.kuberay_context import RAYCLUSTERS, RAYSERVICES, Context, owner_reference, random_suffix
from kubesim.kuberay_raycluster import live_pods, pod_running, set_condition
from kubesim.kuberay_validation import validate_rayservice
from kubesim.store import ApiError

INITIALIZING = "RayService is initializing"
CLUSTER_HASH = "ray.io/hash-without-replicas-and-workers-to-delete"


def goal_hash(service: dict) -> str:
    config = (service.get("spec") or {}).get("rayClusterConfig") or {}
    return hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()


def serve_applications(serve_config: str | None) -> dict:
    """``applicationStatuses`` for a deployed Serve config: every application RUNNING."""
    try:
        config = yaml.safe_load(serve_config or "") or {}
    except yaml.YAMLError:
        return {}
    applications = {}
    for app in config.get("applications") or [] if isinstance(config, dict) else []:
        deployments = {
            d["name"]: {"status": "HEALTHY", "message": ""}
            for d in app.get("deployments") or []
            if d.get("name")
        }
        applications[app.get("name") or "default"] = {
            "status": "RUNNING",
            "message": "",
            "serveDeploymentStatuses": deployments,
        }
    return applications


def reconcile_rayservice(ctx: Context, namespace: str, name: str) -> None:
    try:
        service = ctx.store.get(RAYSERVICES, name, namespace=namespace)
    except ApiError as exc:
        if exc.code == 404:
            return
        raise
    if service["metadata"].get("deletionTimestamp"):
        return
    original = service.get("status") or {}
    status = copy.deepcopy(original)
    status["observedGeneration"] = service["metadata"].get("generation", 1)
    now = ctx.clock.timestamp()
    conditions = status.setdefault("conditions", [])
    error = validate_rayservice(service)
    if error:
        _condition(conditions, now, "Ready", "False", "ValidationFailed", error)
        if _changed(original, status):
            ctx.event(service, "Warning", "InvalidRayServiceSpec", f"{namespace}/{name}: {error}")
    elif not _handle_suspend(ctx, service, status, now):
        _serve(ctx, service, status, now)
    if _changed(original, status):
        status["lastUpdateTime"] = now
        ctx.write_status(RAYSERVICES, service, status)


def _serve(ctx: Context, service: dict, status: dict, now: str) -> None:
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    active = status.get("activeServiceStatus") or {}
    pending = status.get("pendingServiceStatus") or {}
    if not active.get("rayClusterName") and not pending.get("rayClusterName"):
        pending = {"rayClusterName": f"{name}-{random_suffix()}"}
    cluster_name = pending.get("rayClusterName") or active["rayClusterName"]
    goal = goal_hash(service)
    cluster = _get_or_create_cluster(ctx, service, cluster_name, goal)
    if (cluster["metadata"].get("annotations") or {}).get(CLUSTER_HASH) != goal:
        if pending.get("rayClusterName"):  # an outdated pending cluster is replaced, never promoted
            _delete_cluster(ctx, namespace, pending["rayClusterName"])
        pending = {"rayClusterName": f"{name}-{random_suffix()}"}
        cluster = _get_or_create_cluster(ctx, service, pending["rayClusterName"], goal)
    cluster_status = cluster.get("status") or {}
    ready = cluster_status.get("state") == "ready"
    if pending.get("rayClusterName"):
        pending["rayClusterStatus"] = cluster_status
        if ready:
            pending["applicationStatuses"] = serve_applications(
                (service.get("spec") or {}).get("serveConfigV2")
            )
            if active.get("rayClusterName"):
                _delete_cluster(ctx, namespace, active["rayClusterName"])
            active, pending = pending, {}
    else:
        active["rayClusterStatus"] = cluster_status
    status["activeServiceStatus"] = active
    status["pendingServiceStatus"] = pending
    endpoints = 0
    if active.get("rayClusterName"):
        endpoints = sum(1 for pod in live_pods(ctx, namespace, active["rayClusterName"]) if pod_running(pod))
    status["numServeEndpoints"] = endpoints
    conditions = status["conditions"]
    if not conditions:
        _condition(conditions, now, "Ready", "False", "Initializing", INITIALIZING)
        _condition(conditions, now, "UpgradeInProgress", "False", "Initializing", INITIALIZING)
    if endpoints > 0:
        _condition(
            conditions,
            now,
            "Ready",
            "True",
            "NonZeroServeEndpoints",
            "Number of serve endpoints is greater than 0",
        )
    elif _is_true(conditions, "Ready"):
        _condition(
            conditions, now, "Ready", "False", "ZeroServeEndpoints", "Number of serve endpoints dropped to 0"
        )
    if active.get("rayClusterName") and pending.get("rayClusterName"):
        _condition(
            conditions, now, "UpgradeInProgress", "True", "BothActivePendingClustersExist",
            "Both active and pending Ray clusters exist",
        )  # fmt: skip
    elif active.get("rayClusterName"):
        _condition(
            conditions, now, "UpgradeInProgress", "False", "NoPendingCluster",
            "Active Ray cluster exists and no pending Ray cluster",
        )  # fmt: skip
    if _is_true(conditions, "Ready"):
        status["serviceStatus"] = "Running"
    else:
        status.pop("serviceStatus", None)


def _handle_suspend(ctx: Context, service: dict, status: dict, now: str) -> bool:
    """``handleSuspend``; True while suspend drives the RayService (the normal path must not run)."""
    conditions = status["conditions"]
    suspend = bool((service.get("spec") or {}).get("suspend"))
    if _is_true(conditions, "Suspended"):
        if suspend:
            return True
        _condition(
            conditions,
            now,
            "Suspended",
            "False",
            "RayServiceResumed",
            "Spec.Suspend is false; RayService has resumed.",
        )
        _condition(conditions, now, "Ready", "False", "Initializing", INITIALIZING)
        _condition(conditions, now, "UpgradeInProgress", "False", "Initializing", INITIALIZING)
        return False
    if not _is_true(conditions, "Suspending"):
        if not suspend:
            return False
        _condition(
            conditions, now, "Suspending", "True", "SuspendRequested",
            "Spec.Suspend is true; will delete all Kubernetes resources owned by this RayService.",
        )  # fmt: skip
        _condition(conditions, now, "Ready", "False", "SuspendInProgress", "RayService is suspending.")
        _condition(
            conditions, now, "UpgradeInProgress", "False", "SuspendInProgress", "RayService is suspending."
        )
        status["activeServiceStatus"], status["pendingServiceStatus"] = {}, {}
        status["numServeEndpoints"] = 0
        status.pop("serviceStatus", None)
        return True
    namespace = service["metadata"]["namespace"]
    clusters, _ = ctx.store.list(RAYCLUSTERS, namespace=namespace)
    owned = [
        c
        for c in clusters
        if any(r.get("uid") == service["metadata"]["uid"] for r in c["metadata"].get("ownerReferences") or [])
    ]
    for cluster in owned:
        if not cluster["metadata"].get("deletionTimestamp"):
            ctx.store.delete(RAYCLUSTERS, cluster["metadata"]["name"], namespace=namespace)
    if owned:
        return True  # their DELETED events bring us back
    _condition(
        conditions, now, "Suspending", "False", "SuspendComplete", "All owned resources have been deleted."
    )
    _condition(
        conditions, now, "Suspended", "True", "SuspendComplete", "All owned resources have been deleted."
    )
    _condition(conditions, now, "Ready", "False", "SuspendComplete", "RayService is suspended.")
    _condition(conditions, now, "UpgradeInProgress", "False", "SuspendComplete", "RayService is suspended.")
    return True


def _delete_cluster(ctx: Context, namespace: str, name: str) -> None:
    try:
        ctx.store.delete(RAYCLUSTERS, name, namespace=namespace)
    except ApiError as exc:
        if exc.code != 404:
            raise


def _get_or_create_cluster(ctx: Context, service: dict, cluster_name: str, goal: str) -> dict:
    namespace = service["metadata"]["namespace"]
    try:
        return ctx.store.get(RAYCLUSTERS, cluster_name, namespace=namespace)
    except ApiError as exc:
        if exc.code != 404:
            raise
    labels = dict(service["metadata"].get("labels") or {})
    labels.update(
        {
            "ray.io/originated-from-cr-name": service["metadata"]["name"],
            "ray.io/originated-from-crd": "RayService",
        }
    )
    annotations = dict(service["metadata"].get("annotations") or {})
    annotations["ray.io/kuberay-version"] = "v1.7.0"
    annotations[CLUSTER_HASH] = goal
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": cluster_name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(service)],
        },
        "spec": copy.deepcopy((service.get("spec") or {}).get("rayClusterConfig") or {}),
    }
    return ctx.store.create(RAYCLUSTERS, cluster, namespace=namespace)


def _condition(conditions: list[dict], now: str, kind: str, status: str, reason: str, message: str) -> None:
    set_condition(conditions, {"type": kind, "status": status, "reason": reason, "message": message}, now)


def _is_true(conditions: list[dict], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _changed(old: dict, new: dict) -> bool:
    strip = lambda s: {k: v for k, v in s.items() if k != "lastUpdateTime"}  # noqa: E731
    return strip(old) != strip(new)
