"""RayService (KubeRay v1.7.0): a serving RayCluster, its Serve applications, and the upgrade switch.

What ``RayServiceReconciler.Reconcile`` does, reduced to the default ``NewCluster`` upgrade strategy:

* **Clusters.** ``status.pendingServiceStatus.rayClusterName`` names the cluster being prepared,
  ``activeServiceStatus.rayClusterName`` the one serving. A cluster is built from ``spec.rayClusterConfig``
  and carries the hash of that config *without* ``suspend`` and the worker groups' ``replicas``
  (``rayClusterSpecForHashing`` / ``GenerateHashWithoutReplicasAndWorkersToDelete``). ``suspend`` reaches a
  cluster only when it is created; afterwards it is Kueue's to change. When the goal hash differs from the
  pending (else the active) cluster's, a new pending cluster is prepared (``shouldPrepareNewCluster``); an
  outdated pending cluster is simply dropped.
* **Passes.** The first reconcile of a RayService only adds the ``ray.io/rayservice-finalizer``, writing
  the object back as Go's types do (``go_round_trip``: a spec the client wrote without those empty
  fields changes, so its generation does, and that write brings the next reconcile at once; else it
  comes ``REQUEUE_SECONDS`` later). Every later reconcile ends with a requeue ``REQUEUE_SECONDS`` on: the
  controller sees changes of a RayService's spec, labels and annotations, and of its RayClusters and
  Services, but not its own status writes, pods or Serve, which it polls. A RayService being deleted
  has every cluster deleted, and its finalizer removed once none is left.
* **Serve.** Once a cluster's head is ready, Serve's applications are read from it, then the Serve config
  is submitted to it if it has not got it (the pending cluster if there is one, else the active one, so
  a ``serveConfigV2`` change alone is an in-place update). What Serve reports is ``kubesim.kuberay.serve``.
  During an upgrade the active cluster's applications are not read, so its ``applicationStatuses`` are
  empty, as KubeRay writes them.
* **Switch.** When every application of the pending cluster is ``RUNNING``, the Services ``<name>-head-svc``
  and ``<name>-serve-svc`` are pointed at it and it becomes the active cluster (traffic switched, no
  downtime); the old one, now unused, is deleted ``rayClusterDeletionDelaySeconds`` later (default 60 s).
  Which pods take traffic: ``kubesim.kuberay.rayservice_traffic``.
* **Conditions.** ``Ready`` (``NonZeroServeEndpoints`` / ``ZeroServeEndpoints``), ``UpgradeInProgress``
  (``BothActivePendingClustersExist`` / ``NoPendingCluster``), exactly as ``calculateConditions`` writes
  them; the status's JSON shape: ``kubesim.kuberay.rayservice_status``.
* ``spec.suspend`` deletes every owned cluster and walks ``Suspending`` -> ``Suspended``; clearing it
  starts over.
"""

from __future__ import annotations

import copy
import hashlib
import json

from kubesim.errors import ApiError
from kubesim.kuberay.context import (
    PODS,
    RAYCLUSTERS,
    RAYSERVICES,
    SERVICES,
    Context,
    owner_reference,
    random_suffix,
)
from kubesim.kuberay.rayservice_status import ROLES, go_status, is_true, set_service_condition
from kubesim.kuberay.rayservice_traffic import (
    ORIGINATED_FROM_CRD,
    ORIGINATED_FROM_NAME,
    NoHeadPod,
    point_services,
    serve_endpoints,
    serve_service_name,
    serve_target,
    update_head_serve_label,
)
from kubesim.kuberay.serve import ServeDeployment, serve_statuses
from kubesim.kuberay.validation import validate_rayservice

INITIALIZING = "RayService is initializing"
CLUSTER_HASH = "ray.io/hash-without-replicas-and-workers-to-delete"
NUM_WORKER_GROUPS = "ray.io/num-worker-groups"
KUBERAY_VERSION = "ray.io/kuberay-version"
FINALIZER = "ray.io/rayservice-finalizer"
REQUEUE_SECONDS = 2.0
"""``ServiceDefaultRequeueDuration``: every reconcile looks again this much later (KubeRay polls Serve,
the head's proxy and the EndpointSlices; none of them is watched)."""
DELETION_DELAY_SECONDS = 60.0
"""``RayClusterDeletionDelayDuration``: how long an unused cluster is kept (``rayClusterDeletionDelaySeconds``)."""


def goal_hash(service: dict) -> str:
    """The hash KubeRay compares clusters by: the cluster config without ``suspend`` and replicas."""
    config = copy.deepcopy((service.get("spec") or {}).get("rayClusterConfig") or {})
    config.pop("suspend", None)
    for group in config.get("workerGroupSpecs") or []:
        group.pop("replicas", None)
        (group.get("scaleStrategy") or {}).pop("workersToDelete", None)
    return hashlib.sha1(json.dumps(config, sort_keys=True).encode()).hexdigest()


def reconcile_rayservice(ctx: Context, namespace: str, name: str) -> None:
    service = ctx.store.get_or_none(RAYSERVICES, name, namespace=namespace)
    if service is None:
        return
    key = ("rayservice", namespace, name)
    meta = service["metadata"]
    has_clusters_to_clean = _clean_up_clusters(ctx, service)
    if meta.get("deletionTimestamp"):
        if has_clusters_to_clean:
            ctx.requeue_within(key, REQUEUE_SECONDS)
        else:
            _update_finalizers(ctx, service, [f for f in meta.get("finalizers") or [] if f != FINALIZER])
        return
    if FINALIZER not in (meta.get("finalizers") or []):
        # The first pass only adds the finalizer, writing the object back through KubeRay's Go types.
        _update_finalizers(ctx, service, [*(meta.get("finalizers") or []), FINALIZER])
        ctx.requeue_within(key, REQUEUE_SECONDS)
        return
    original = service.get("status") or {}
    status = copy.deepcopy(original)
    now = ctx.clock.timestamp()
    error = validate_rayservice(service)
    if error:
        # Validation comes before calculateStatus: the status keeps the generation it observed before.
        set_service_condition(status, now, "Ready", "False", "ValidationFailed", error)
        ctx.event(service, "Warning", "InvalidRayServiceSpec", f"{namespace}/{name}: {error}")
        status["lastUpdateTime"] = now
        ctx.write_status(RAYSERVICES, service, go_status(status))
        return  # no requeue: only a change of the spec brings it back
    status["observedGeneration"] = meta.get("generation", 1)
    try:
        if not _handle_suspend(ctx, service, status, now):
            _serve(ctx, service, status, now)
    except NoHeadPod:
        ctx.requeue_failed(key)  # an error: the status is not written
        return
    ctx.forget(key)
    status = go_status(status)
    if _changed(original, status):
        status["lastUpdateTime"] = now
        ctx.write_status(RAYSERVICES, service, status)
    ctx.requeue_within(key, REQUEUE_SECONDS)


def _update_finalizers(ctx: Context, service: dict, finalizers: list[str]) -> None:
    """``r.Update`` of the whole RayService: the finalizers changed, and the spec as Go's types write it."""
    body = copy.deepcopy(service)
    body["metadata"]["finalizers"] = finalizers
    go_round_trip(body.get("spec") or {})
    try:
        ctx.store.update(RAYSERVICES, body)
    except ApiError as exc:
        if exc.code not in (404, 409):
            raise
        ctx.requeue_within(("rayservice", *_namespaced(service)), REQUEUE_SECONDS)


def _namespaced(service: dict) -> tuple[str, str]:
    return service["metadata"]["namespace"], service["metadata"]["name"]


def go_round_trip(spec: dict) -> dict:
    """A RayService spec read into KubeRay's Go structs and written back: the struct-typed fields a client
    may leave out come back as ``{}`` (``encoding/json`` never omits a struct), which makes the write a
    spec change and a new ``generation``.

    >>> go_round_trip({"rayClusterConfig": {"headGroupSpec": {"template": {"spec": {"containers": [{}]}}}}})
    {'rayClusterConfig': {'headGroupSpec': {'template': {'spec': {'containers': [{'resources': {}}]}, 'metadata': {}}}}}
    """
    config = spec.get("rayClusterConfig")
    if not isinstance(config, dict):
        return spec
    workers = [g for g in config.get("workerGroupSpecs") or [] if isinstance(g, dict)]
    for group in [config.get("headGroupSpec"), *workers]:
        if not isinstance(group, dict) or not isinstance(group.get("template"), dict):
            continue
        template = group["template"]
        template.setdefault("metadata", {})
        pod_spec = template.get("spec") or {}
        for container in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
            if isinstance(container, dict):
                container.setdefault("resources", {})
    for group in workers:
        group.setdefault("scaleStrategy", {})
    return spec


def _serve(ctx: Context, service: dict, status: dict, now: str) -> None:
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    active = dict(status.get("activeServiceStatus") or {})
    pending = dict(status.get("pendingServiceStatus") or {})
    owned = _owned_clusters(ctx, service)
    if pending.get("rayClusterName") and pending["rayClusterName"] not in owned:
        owned[pending["rayClusterName"]] = _create_cluster(ctx, service, pending["rayClusterName"])
    active_cluster = owned.get(active.get("rayClusterName") or "")
    pending_cluster = owned.get(pending.get("rayClusterName") or "")

    # What the EndpointSlices show this pass: the pods and the Serve Service as they were before it.
    pods, _ = ctx.store.list(PODS, namespace=namespace)
    _, selector = serve_target(ctx, service)
    update_head_serve_label(ctx, service, active_cluster, pods)
    update_head_serve_label(ctx, service, pending_cluster, pods)

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

    serving = None
    if pending_ready or active_ready:
        target = pending_cluster if pending_ready else active_cluster
        serving = target["metadata"]["name"]
        point_services(ctx, service, serving)

    active["rayClusterStatus"] = (active_cluster or {}).get("status") or {}
    pending["rayClusterStatus"] = (pending_cluster or {}).get("status") or {}
    active["applicationStatuses"] = active_apps or {}
    pending["applicationStatuses"] = pending_apps or {}
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
        # shouldPrepareNewCluster: name it now; a later reconcile creates it.
        pending = {"rayClusterName": f"{name}-{random_suffix()}"}
    status["activeServiceStatus"] = active
    status["pendingServiceStatus"] = pending
    status["numServeEndpoints"] = serve_endpoints(pods, selector)
    _calculate_conditions(status, now)
    if is_true(status, "Ready"):
        status["serviceStatus"] = "Running"
    else:
        status.pop("serviceStatus", None)


def _calculate_conditions(status: dict, now: str) -> None:
    """``calculateConditions`` (without the initializing timeout, which the project never sets)."""
    if not status.get("conditions"):
        set_service_condition(status, now, "Ready", "False", "Initializing", INITIALIZING)
        set_service_condition(status, now, "UpgradeInProgress", "False", "Initializing", INITIALIZING)
    if status["numServeEndpoints"] > 0:
        message = "Number of serve endpoints is greater than 0"
        set_service_condition(status, now, "Ready", "True", "NonZeroServeEndpoints", message)
    elif is_true(status, "Ready"):
        message = "Number of serve endpoints dropped to 0"
        set_service_condition(status, now, "Ready", "False", "ZeroServeEndpoints", message)
    active = status["activeServiceStatus"].get("rayClusterName")
    pending = status["pendingServiceStatus"].get("rayClusterName")
    if active and pending:
        message = "Both active and pending Ray clusters exist"
        set_service_condition(
            status, now, "UpgradeInProgress", "True", "BothActivePendingClustersExist", message
        )
    elif active:
        message = "Active Ray cluster exists and no pending Ray cluster"
        set_service_condition(status, now, "UpgradeInProgress", "False", "NoPendingCluster", message)
    else:
        upgrade = next((c for c in status["conditions"] if c["type"] == "UpgradeInProgress"), None)
        if upgrade is None or upgrade["reason"] not in ("Initializing", "InitializingTimeout"):
            message = (
                "No active Ray cluster exists, and the RayService is not initializing. "
                "Please open a GitHub issue in the KubeRay repository."
            )
            set_service_condition(status, now, "UpgradeInProgress", "Unknown", "NoActiveCluster", message)


def _promotion(namespace: str, active: dict, pending: dict) -> str:
    old = active.get("rayClusterName")
    new = pending["rayClusterName"]
    if old:
        return f"Switched traffic from RayCluster {namespace}/{old} to {namespace}/{new}"
    return f"RayCluster {namespace}/{new} serves"


def _needs_new_cluster(service: dict, cluster: dict) -> bool:
    """``shouldPrepareNewCluster`` for an existing cluster: its config is not the goal any more (and the
    upgrade strategy allows a new cluster)."""
    strategy = ((service.get("spec") or {}).get("upgradeStrategy") or {}).get("type") or "NewCluster"
    if strategy == "None":
        return False
    return (cluster["metadata"].get("annotations") or {}).get(CLUSTER_HASH) != goal_hash(service)


def _reconcile_serve(ctx: Context, service: dict, cluster: dict) -> tuple[bool, dict | None]:
    """``reconcileServe``: once a cluster's head is ready, read Serve's applications from it, then submit
    the Serve config if it has not got it; (all applications RUNNING, the statuses read)."""
    conditions = (cluster.get("status") or {}).get("conditions") or []
    if not any(c["type"] == "HeadPodReady" and c["status"] == "True" for c in conditions):
        return False, None
    namespace = service["metadata"]["namespace"]
    cluster_name = cluster["metadata"]["name"]
    config = (service.get("spec") or {}).get("serveConfigV2") or ""
    deployed = ctx.serve_deployments.get((namespace, cluster_name))
    applications: dict = {}
    if isinstance(deployed, ServeDeployment):
        applications = serve_statuses(deployed, ctx.clock.simulated_since(deployed.submitted_at))
    if not isinstance(deployed, ServeDeployment) or deployed.config != config:
        ctx.serve_deployments[(namespace, cluster_name)] = ServeDeployment(config, ctx.clock.now())
        ctx.event(
            service,
            "Normal",
            "UpdatedServeApplications",
            f"Updated serve applications to the RayCluster {namespace}/{cluster_name}",
        )
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


def _clean_up_clusters(ctx: Context, service: dict) -> bool:
    """``cleanUpRayClusterInstance``: a cluster of the RayService's that is neither active nor pending is
    deleted at the first reconcile after its deletion delay (the delay starts when it is first found
    unused); every one, at once, when the RayService is being deleted. True while any is left to clean."""
    meta = service["metadata"]
    namespace = meta["namespace"]
    status = service.get("status") or {}
    in_use = {(status.get(role) or {}).get("rayClusterName") for role in ROLES}
    deleting = bool(meta.get("deletionTimestamp"))
    delay = (service.get("spec") or {}).get("rayClusterDeletionDelaySeconds")
    delay = DELETION_DELAY_SECONDS if delay is None else float(delay)
    clusters, _ = ctx.store.list(
        RAYCLUSTERS,
        namespace=namespace,
        label_selector=f"{ORIGINATED_FROM_NAME}={meta['name']},{ORIGINATED_FROM_CRD}=RayService",
    )
    to_clean = False
    for cluster in clusters:
        cluster_name = cluster["metadata"]["name"]
        if not deleting and cluster_name in in_use:
            continue
        to_clean = True
        unused_since = ctx.cluster_deletions.get((namespace, cluster_name))
        if unused_since is None and not deleting:
            ctx.cluster_deletions[(namespace, cluster_name)] = ctx.clock.now()
        elif deleting or ctx.clock.simulated_since(unused_since) >= delay:
            _delete(ctx, RAYCLUSTERS, namespace, cluster_name)
            ctx.serve_deployments.pop((namespace, cluster_name), None)
            ctx.event(
                service, "Normal", "DeletedRayCluster", f"Deleted the RayCluster {namespace}/{cluster_name}"
            )
    return to_clean


def _handle_suspend(ctx: Context, service: dict, status: dict, now: str) -> bool:
    """``handleSuspend`` (KubeRay v1.7.0); True while suspend drives the RayService (the normal path must
    not run)."""
    suspend = bool((service.get("spec") or {}).get("suspend"))
    if is_true(status, "Suspended"):
        if suspend:
            return True
        message = "Spec.Suspend is false; RayService has resumed."
        set_service_condition(status, now, "Suspended", "False", "RayServiceResumed", message)
        set_service_condition(status, now, "Ready", "False", "Initializing", INITIALIZING)
        set_service_condition(status, now, "UpgradeInProgress", "False", "Initializing", INITIALIZING)
        return False
    if not is_true(status, "Suspending"):
        if not suspend:
            return False
        message = "Spec.Suspend is true; will delete all Kubernetes resources owned by this RayService."
        set_service_condition(status, now, "Suspending", "True", "SuspendRequested", message)
        set_service_condition(status, now, "Ready", "False", "SuspendInProgress", "RayService is suspending.")
        message = "RayService is suspending."
        set_service_condition(status, now, "UpgradeInProgress", "False", "SuspendInProgress", message)
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
    done = "All owned resources have been deleted."
    set_service_condition(status, now, "Suspending", "False", "SuspendComplete", done)
    set_service_condition(status, now, "Suspended", "True", "SuspendComplete", done)
    set_service_condition(status, now, "Ready", "False", "SuspendComplete", "RayService is suspended.")
    set_service_condition(
        status, now, "UpgradeInProgress", "False", "SuspendComplete", "RayService is suspended."
    )
    return True


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


def _changed(old: dict, new: dict) -> bool:
    strip = lambda s: {k: v for k, v in s.items() if k != "lastUpdateTime"}  # noqa: E731
    return strip(old) != strip(new)
