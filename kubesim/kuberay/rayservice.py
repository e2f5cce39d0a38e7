"""RayService (KubeRay v1.7.0): a serving RayCluster, its Serve applications, and the upgrade switch.

What ``RayServiceReconciler.Reconcile`` does, reduced to the default ``NewCluster`` upgrade strategy:

* **Clusters.** ``status.pendingServiceStatus.rayClusterName`` names the cluster being prepared,
  ``activeServiceStatus.rayClusterName`` the one serving. A cluster is built from ``spec.rayClusterConfig``
  and carries the hash of that config *without* ``suspend`` and the worker groups' ``replicas``
  (``rayClusterSpecForHashing`` / ``GenerateHashWithoutReplicasAndWorkersToDelete``). ``suspend`` reaches a
  cluster only when it is created; afterwards it is Kueue's to change. When the goal hash differs from the
  pending (else the active) cluster's, a new pending cluster is prepared (``shouldPrepareNewCluster``); an
  outdated pending cluster is simply dropped.
* **Serve.** Once a cluster's head is ready, the Serve config is submitted to it (the pending cluster if
  there is one, else the active one, so a ``serveConfigV2`` change alone is an in-place update). Serve
  reports every application ``DEPLOYING`` (deployments ``UPDATING``) for ``SERVE_DEPLOY_SECONDS``, then
  ``RUNNING`` / ``HEALTHY``. During an upgrade the active cluster's applications are not read, so its
  ``applicationStatuses`` are empty, as KubeRay writes them.
* **Switch.** When every application of the pending cluster is ``RUNNING``, the Serve Service
  ``<name>-serve-svc`` is pointed at it and it becomes the active cluster (traffic switched, no downtime);
  the old one, now owned but unused, is deleted ``rayClusterDeletionDelaySeconds`` later (default 60 s).
* **Conditions.** ``Ready`` (``NonZeroServeEndpoints`` / ``ZeroServeEndpoints``), ``UpgradeInProgress``
  (``BothActivePendingClustersExist`` / ``NoPendingCluster``), exactly as ``calculateConditions`` writes
  them; ``numServeEndpoints`` counts the running pods of the cluster the Serve Service selects.
* ``spec.suspend`` deletes every owned cluster and walks ``Suspending`` -> ``Suspended``; clearing it
  starts over.

Test-only annotations (on the RayService; never in the project's templates): ``kubesim.dev/serve-status``
``DEPLOY_FAILED`` or ``UNHEALTHY`` makes every Serve deployment of this RayService end that way instead of
``RUNNING``, with ``kubesim.dev/serve-message`` as Serve's message.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime

import yaml

from kubesim.errors import ApiError
from kubesim.kuberay.context import (
    CREATED_BY,
    OPERATOR,
    RAYCLUSTERS,
    RAYSERVICES,
    SERVICES,
    Context,
    owner_reference,
    random_suffix,
)
from kubesim.kuberay.raycluster import CLUSTER_LABEL, live_pods, pod_running, set_condition
from kubesim.kuberay.validation import validate_rayservice

INITIALIZING = "RayService is initializing"
CLUSTER_HASH = "ray.io/hash-without-replicas-and-workers-to-delete"
NUM_WORKER_GROUPS = "ray.io/num-worker-groups"
KUBERAY_VERSION = "ray.io/kuberay-version"
SERVE_PORT = 8000
SERVE_DEPLOY_SECONDS = 10.0
"""Simulated seconds Serve takes to deploy an application (replicas start, the model loads)."""
DELETION_DELAY_SECONDS = 60.0
"""``RayClusterDeletionDelayDuration``: how long an unused cluster is kept (``rayClusterDeletionDelaySeconds``)."""
SERVE_STATUS_ANNOTATION = "kubesim.dev/serve-status"
SERVE_MESSAGE_ANNOTATION = "kubesim.dev/serve-message"
FAILED_OUTCOMES = ("DEPLOY_FAILED", "UNHEALTHY")


@dataclass(frozen=True)
class ServeDeployment:
    """A Serve config submitted to one cluster: what Serve reports depends on it and on the time since."""

    config: str
    submitted_at: datetime
    outcome: str
    """``RUNNING``, or one of ``FAILED_OUTCOMES`` (test annotation)."""
    message: str


def serve_service_name(service_name: str) -> str:
    """``GenerateServeServiceName``: the Service clients send requests to."""
    return f"{service_name}-serve-svc"


def goal_hash(service: dict) -> str:
    """The hash KubeRay compares clusters by: the cluster config without ``suspend`` and replicas."""
    config = copy.deepcopy((service.get("spec") or {}).get("rayClusterConfig") or {})
    config.pop("suspend", None)
    for group in config.get("workerGroupSpecs") or []:
        group.pop("replicas", None)
        (group.get("scaleStrategy") or {}).pop("workersToDelete", None)
    return hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()


def application_deployments(serve_config: str | None) -> dict[str, list[str]]:
    """Application name -> its deployment names, from ``serveConfigV2``."""
    try:
        config = yaml.safe_load(serve_config or "") or {}
    except yaml.YAMLError:
        return {}
    if not isinstance(config, dict):
        return {}
    return {
        app.get("name") or "default": [d["name"] for d in app.get("deployments") or [] if d.get("name")]
        for app in config.get("applications") or []
        if isinstance(app, dict)
    }


def serve_statuses(deployment: ServeDeployment, elapsed: float) -> dict:
    """``applicationStatuses`` as Serve reports them ``elapsed`` simulated seconds after the submission."""
    applications = {}
    deploying = elapsed < SERVE_DEPLOY_SECONDS
    for app, names in application_deployments(deployment.config).items():
        if deploying:
            app_status, app_message = "DEPLOYING", ""
            deployments = {name: {"status": "UPDATING", "message": ""} for name in names}
        elif deployment.outcome == "RUNNING":
            app_status, app_message = "RUNNING", ""
            deployments = {name: {"status": "HEALTHY", "message": ""} for name in names}
        else:
            app_status = deployment.outcome
            message = deployment.message or "The deployment failed to start."
            if deployment.outcome == "DEPLOY_FAILED":
                app_message = f"Deploying application {app} failed with exception:\n{message}"
            else:
                app_message = f"The deployments {names} are UNHEALTHY."
            deployments = {name: {"status": deployment.outcome, "message": message} for name in names}
        applications[app] = {
            "status": app_status,
            "message": app_message,
            "serveDeploymentStatuses": deployments,
        }
    return applications


def reconcile_rayservice(ctx: Context, namespace: str, name: str) -> None:
    service = ctx.store.get_or_none(RAYSERVICES, name, namespace=namespace)
    if service is None:
        return
    if service["metadata"].get("deletionTimestamp"):
        return
    original = service.get("status") or {}
    status = copy.deepcopy(original)
    status["observedGeneration"] = service["metadata"].get("generation", 1)
    now = ctx.clock.timestamp()
    conditions = status.setdefault("conditions", [])
    error = validate_rayservice(service)
    if error:
        set_condition(conditions, now, "Ready", "False", "ValidationFailed", error)
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
    owned = _owned_clusters(ctx, service)
    _clean_up_unused(ctx, service, owned, {active.get("rayClusterName"), pending.get("rayClusterName")})
    if pending.get("rayClusterName") and pending["rayClusterName"] not in owned:
        owned[pending["rayClusterName"]] = _create_cluster(ctx, service, pending["rayClusterName"])
    active_cluster = owned.get(active.get("rayClusterName") or "")
    pending_cluster = owned.get(pending.get("rayClusterName") or "")

    pending_ready, pending_apps = False, None
    if pending_cluster is not None:
        pending_ready, pending_apps = _reconcile_serve(ctx, service, pending_cluster)
    active_ready, active_apps = False, None
    if (
        active_cluster is not None
        and pending_cluster is None
        and not _needs_new_cluster(service, active_cluster)
    ):
        active_ready, active_apps = _reconcile_serve(ctx, service, active_cluster)

    serving = _serve_target(ctx, service)
    if pending_ready or active_ready:
        target = pending_cluster if pending_ready else active_cluster
        serving = _point_serve_service(ctx, service, target["metadata"]["name"])

    active["rayClusterStatus"] = (active_cluster or {}).get("status") or {}
    pending["rayClusterStatus"] = (pending_cluster or {}).get("status") or {}
    _set_applications(active, active_apps)
    _set_applications(pending, pending_apps)
    if (
        serving is not None
        and serving != active.get("rayClusterName")
        and serving == pending.get("rayClusterName")
    ):
        # reconcilePromotionAndServingStatus: traffic goes to the pending cluster, so it is the active one.
        ctx.event(service, "Normal", "PromotedPendingCluster", _promotion(namespace, active, pending))
        active, pending = pending, {}
        active_cluster, pending_cluster = pending_cluster, None
    newest = pending_cluster or active_cluster
    if newest is None or _needs_new_cluster(service, newest):
        # shouldPrepareNewCluster: name it now; the reconcile its status write triggers creates it.
        pending = {"rayClusterName": f"{name}-{random_suffix()}"}
    status["activeServiceStatus"] = _clean(active)
    status["pendingServiceStatus"] = _clean(pending)

    endpoints = 0
    if serving is not None and serving == active.get("rayClusterName"):
        endpoints = sum(1 for pod in live_pods(ctx, namespace, serving) if pod_running(pod))
    status["numServeEndpoints"] = endpoints
    conditions = status["conditions"]
    if not conditions:
        set_condition(conditions, now, "Ready", "False", "Initializing", INITIALIZING)
        set_condition(conditions, now, "UpgradeInProgress", "False", "Initializing", INITIALIZING)
    if endpoints > 0:
        set_condition(
            conditions,
            now,
            "Ready",
            "True",
            "NonZeroServeEndpoints",
            "Number of serve endpoints is greater than 0",
        )
    elif _is_true(conditions, "Ready"):
        set_condition(
            conditions, now, "Ready", "False", "ZeroServeEndpoints", "Number of serve endpoints dropped to 0"
        )
    if active.get("rayClusterName") and pending.get("rayClusterName"):
        set_condition(
            conditions, now, "UpgradeInProgress", "True", "BothActivePendingClustersExist",
            "Both active and pending Ray clusters exist",
        )  # fmt: skip
    elif active.get("rayClusterName"):
        set_condition(
            conditions, now, "UpgradeInProgress", "False", "NoPendingCluster",
            "Active Ray cluster exists and no pending Ray cluster",
        )  # fmt: skip
    if _is_true(conditions, "Ready"):
        status["serviceStatus"] = "Running"
    else:
        status.pop("serviceStatus", None)


def _promotion(namespace: str, active: dict, pending: dict) -> str:
    old = active.get("rayClusterName")
    new = pending["rayClusterName"]
    if old:
        return f"Switched traffic from RayCluster {namespace}/{old} to {namespace}/{new}"
    return f"RayCluster {namespace}/{new} serves"


def _set_applications(role: dict, applications: dict | None) -> None:
    if applications:
        role["applicationStatuses"] = applications
    else:
        role.pop("applicationStatuses", None)


def _clean(role: dict) -> dict:
    """A role with no cluster is written as KubeRay's zero value: nothing."""
    return role if role.get("rayClusterName") else {}


def _needs_new_cluster(service: dict, cluster: dict) -> bool:
    """``shouldPrepareNewCluster`` for an existing cluster: its config is not the goal any more (and the
    upgrade strategy allows a new cluster)."""
    strategy = ((service.get("spec") or {}).get("upgradeStrategy") or {}).get("type") or "NewCluster"
    if strategy == "None":
        return False
    return (cluster["metadata"].get("annotations") or {}).get(CLUSTER_HASH) != goal_hash(service)


def _reconcile_serve(ctx: Context, service: dict, cluster: dict) -> tuple[bool, dict | None]:
    """``reconcileServe``: submit the Serve config to a cluster whose head is ready, if it has not got it;
    (all applications RUNNING, their statuses)."""
    conditions = (cluster.get("status") or {}).get("conditions") or []
    if not _is_true(conditions, "HeadPodReady"):
        return False, None
    namespace = service["metadata"]["namespace"]
    cluster_name = cluster["metadata"]["name"]
    config = (service.get("spec") or {}).get("serveConfigV2") or ""
    deployed = ctx.serve_deployments.get((namespace, cluster_name))
    key = ("rayservice", namespace, service["metadata"]["name"])
    if not isinstance(deployed, ServeDeployment) or deployed.config != config:
        annotations = service["metadata"].get("annotations") or {}
        outcome = annotations.get(SERVE_STATUS_ANNOTATION, "RUNNING")
        deployed = ServeDeployment(
            config=config,
            submitted_at=ctx.clock.now(),
            outcome=outcome if outcome in FAILED_OUTCOMES else "RUNNING",
            message=annotations.get(SERVE_MESSAGE_ANNOTATION, ""),
        )
        ctx.serve_deployments[(namespace, cluster_name)] = deployed
        ctx.event(
            service,
            "Normal",
            "UpdatedServeApplications",
            f"Updated serve applications to the RayCluster {namespace}/{cluster_name}",
        )
    elapsed = ctx.clock.simulated_since(deployed.submitted_at)
    if elapsed < SERVE_DEPLOY_SECONDS:
        ctx.requeue_after(key, SERVE_DEPLOY_SECONDS - elapsed + 0.001)
    applications = serve_statuses(deployed, elapsed)
    ready = bool(applications) and all(app["status"] == "RUNNING" for app in applications.values())
    return ready, applications


def _owned_clusters(ctx: Context, service: dict) -> dict[str, dict]:
    namespace = service["metadata"]["namespace"]
    clusters, _ = ctx.store.list(RAYCLUSTERS, namespace=namespace)
    uid = service["metadata"]["uid"]
    return {
        c["metadata"]["name"]: c
        for c in clusters
        if any(r.get("uid") == uid for r in c["metadata"].get("ownerReferences") or [])
        and not c["metadata"].get("deletionTimestamp")
    }


def _clean_up_unused(ctx: Context, service: dict, owned: dict[str, dict], in_use: set) -> None:
    """``cleanUpRayClusterInstance``: an owned cluster that is neither active nor pending is deleted once
    its deletion delay has passed (the delay starts when it is first found unused)."""
    namespace = service["metadata"]["namespace"]
    delay = (service.get("spec") or {}).get("rayClusterDeletionDelaySeconds")
    delay = DELETION_DELAY_SECONDS if delay is None else float(delay)
    for cluster_name in [n for n in owned if n not in in_use]:
        unused_since = ctx.cluster_deletions.setdefault((namespace, cluster_name), ctx.clock.now())
        waited = ctx.clock.simulated_since(unused_since)
        if waited >= delay:
            _delete_cluster(ctx, namespace, cluster_name)
            ctx.cluster_deletions.pop((namespace, cluster_name), None)
            ctx.serve_deployments.pop((namespace, cluster_name), None)
            del owned[cluster_name]
            ctx.event(
                service, "Normal", "DeletedRayCluster", f"Deleted the RayCluster {namespace}/{cluster_name}"
            )
        else:
            key = ("rayservice", namespace, service["metadata"]["name"])
            ctx.requeue_after(key, delay - waited + 0.001)


def _serve_target(ctx: Context, service: dict) -> str | None:
    """The cluster the Serve Service selects now, None before there is one."""
    meta = service["metadata"]
    svc = ctx.store.get_or_none(SERVICES, serve_service_name(meta["name"]), namespace=meta["namespace"])
    if svc is None:
        return None
    return ((svc.get("spec") or {}).get("selector") or {}).get(CLUSTER_LABEL)


def _point_serve_service(ctx: Context, service: dict, cluster_name: str) -> str:
    """``reconcileServices``: create ``<name>-serve-svc`` or switch its selector to ``cluster_name``."""
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    selector = {CLUSTER_LABEL: cluster_name, "ray.io/serve": "true"}
    try:
        current = ctx.store.get(SERVICES, serve_service_name(name), namespace=namespace)
    except ApiError as exc:
        if exc.code != 404:
            raise
        body = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": serve_service_name(name),
                "namespace": namespace,
                "labels": {"ray.io/originated-from-cr-name": name, CREATED_BY: OPERATOR},
                "ownerReferences": [owner_reference(service)],
            },
            "spec": {
                "type": "ClusterIP",
                "selector": selector,
                "ports": [{"name": "serve", "port": SERVE_PORT, "targetPort": SERVE_PORT, "protocol": "TCP"}],
            },
        }
        ctx.store.create(SERVICES, body, namespace=namespace)
        return cluster_name
    if (current.get("spec") or {}).get("selector") != selector:
        current = copy.deepcopy(current)
        current["spec"]["selector"] = selector
        ctx.store.update(SERVICES, current)
    return cluster_name


def _handle_suspend(ctx: Context, service: dict, status: dict, now: str) -> bool:
    """``handleSuspend``; True while suspend drives the RayService (the normal path must not run)."""
    conditions = status["conditions"]
    suspend = bool((service.get("spec") or {}).get("suspend"))
    if _is_true(conditions, "Suspended"):
        if suspend:
            return True
        set_condition(
            conditions,
            now,
            "Suspended",
            "False",
            "RayServiceResumed",
            "Spec.Suspend is false; RayService has resumed.",
        )
        set_condition(conditions, now, "Ready", "False", "Initializing", INITIALIZING)
        set_condition(conditions, now, "UpgradeInProgress", "False", "Initializing", INITIALIZING)
        return False
    if not _is_true(conditions, "Suspending"):
        if not suspend:
            return False
        set_condition(
            conditions, now, "Suspending", "True", "SuspendRequested",
            "Spec.Suspend is true; will delete all Kubernetes resources owned by this RayService.",
        )  # fmt: skip
        set_condition(conditions, now, "Ready", "False", "SuspendInProgress", "RayService is suspending.")
        set_condition(
            conditions, now, "UpgradeInProgress", "False", "SuspendInProgress", "RayService is suspending."
        )
        status["activeServiceStatus"], status["pendingServiceStatus"] = {}, {}
        status["numServeEndpoints"] = 0
        status.pop("serviceStatus", None)
        return True
    namespace = service["metadata"]["namespace"]
    owned = _owned_clusters(ctx, service)
    for cluster_name in owned:
        ctx.store.delete(RAYCLUSTERS, cluster_name, namespace=namespace)
    _delete(ctx, SERVICES, namespace, serve_service_name(service["metadata"]["name"]))
    if owned:
        return True  # their DELETED events bring us back
    set_condition(
        conditions, now, "Suspending", "False", "SuspendComplete", "All owned resources have been deleted."
    )
    set_condition(
        conditions, now, "Suspended", "True", "SuspendComplete", "All owned resources have been deleted."
    )
    set_condition(conditions, now, "Ready", "False", "SuspendComplete", "RayService is suspended.")
    set_condition(
        conditions, now, "UpgradeInProgress", "False", "SuspendComplete", "RayService is suspended."
    )
    return True


def _delete_cluster(ctx: Context, namespace: str, name: str) -> None:
    _delete(ctx, RAYCLUSTERS, namespace, name)


def _delete(ctx: Context, key: str, namespace: str, name: str) -> None:
    try:
        ctx.store.delete(key, name, namespace=namespace)
    except ApiError as exc:
        if exc.code != 404:
            raise


def _create_cluster(ctx: Context, service: dict, cluster_name: str) -> dict:
    """``constructRayClusterForRayService``: the RayService's labels and annotations, the config hash, and
    the config itself, ``suspend`` included (the only time it is copied)."""
    namespace = service["metadata"]["namespace"]
    config = (service.get("spec") or {}).get("rayClusterConfig") or {}
    labels = dict(service["metadata"].get("labels") or {})
    labels.update(
        {
            "ray.io/originated-from-cr-name": service["metadata"]["name"],
            "ray.io/originated-from-crd": "RayService",
        }
    )
    annotations = dict(service["metadata"].get("annotations") or {})
    annotations[CLUSTER_HASH] = goal_hash(service)
    annotations[NUM_WORKER_GROUPS] = str(len(config.get("workerGroupSpecs") or []))
    annotations[KUBERAY_VERSION] = "v1.7.0"
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
        "spec": copy.deepcopy(config),
    }
    created = ctx.store.create(RAYCLUSTERS, cluster, namespace=namespace)
    ctx.event(service, "Normal", "CreatedRayCluster", f"Created the RayCluster {namespace}/{cluster_name}")
    return created


def _is_true(conditions: list[dict], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


def _changed(old: dict, new: dict) -> bool:
    strip = lambda s: {k: v for k, v in s.items() if k != "lastUpdateTime"}  # noqa: E731
    return strip(old) != strip(new)
