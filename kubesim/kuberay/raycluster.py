"""RayCluster: head and worker pods, a head Service, and the status KubeRay v1.7.0 computes from them.

Pods are created Pending and a simulated kubelet marks them Running and Ready ``DEFAULT_STARTUP``
simulated seconds later (tests may change that with the ``kubesim.dev/startup`` annotation, which KubeRay
copies from the RayJob / RayService onto the RayCluster). The status follows ``calculateStatus``: ``state: ready``
once every desired pod runs, ``suspended`` when ``spec.suspend`` and no pod is left, conditions
``HeadPodReady`` / ``RayClusterProvisioned`` / ``RayClusterSuspended`` / ``RayClusterSuspending``.
"""

from __future__ import annotations

import copy
from decimal import Decimal

from kubesim.errors import ApiError
from kubesim.kubelet import next_ip, pending_pod_status, start_pod_later
from kubesim.kuberay.context import (
    CREATED_BY,
    OPERATOR,
    PODS,
    RAYCLUSTERS,
    SERVICES,
    Context,
    owner_reference,
)
from kubesim.kuberay.dashboard import startup_seconds
from kubesim.quantity import format_quantity, parse_exact

CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
HEAD_GROUP = "headgroup"
MAX_INT32 = 2147483647
DEFAULT_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}
SERVE_PORT = 8000


def cluster_ports(cluster: dict) -> dict[str, int]:
    """The head's ports: a RayService's cluster also gets Serve's (``serve``, 8000) by default."""
    if (cluster["metadata"].get("labels") or {}).get("ray.io/originated-from-crd") == "RayService":
        return {**DEFAULT_PORTS, "serve": SERVE_PORT}
    return DEFAULT_PORTS


DASHBOARD_PORT = 8265


def head_service_name(cluster_name: str) -> str:
    return f"{cluster_name}-head-svc"


def dashboard_url(cluster_name: str, namespace: str) -> str:
    """``FetchHeadServiceURL``: ``<cluster>-head-svc.<ns>.svc.cluster.local:8265``."""
    return f"{head_service_name(cluster_name)}.{namespace}.svc.cluster.local:{DASHBOARD_PORT}"


# -- resources (pure) ------------------------------------------------------------------------------
def pod_resources(pod_spec: dict) -> dict[str, tuple[Decimal, bool]]:
    """``CalculatePodResource``: requests, limits where a request is missing, summed over containers."""
    total: dict[str, tuple[Decimal, bool]] = {}
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        merged = dict(resources.get("limits") or {})
        merged.update(resources.get("requests") or {})
        for name, quantity in merged.items():
            value = parse_exact(quantity)
            binary = str(quantity).endswith("i")
            old = total.get(name)
            total[name] = (old[0] + value, old[1]) if old else (value, binary)
    return total


def group_desired_replicas(group: dict) -> int:
    """``GetWorkerGroupDesiredReplicas``: replicas clamped into [min, max], times numOfHosts."""
    if group.get("suspend"):
        return 0
    minimum = group.get("minReplicas", 0) or 0
    maximum = group.get("maxReplicas", MAX_INT32)
    replicas = group.get("replicas")
    if replicas is None or replicas < minimum:
        wanted = minimum
    elif replicas > maximum:
        wanted = maximum
    else:
        wanted = replicas
    return wanted * (group.get("numOfHosts") or 1)


def desired_resources(spec: dict) -> dict[str, str]:
    """``CalculateDesiredResources`` → the four ``desired*`` status fields."""
    head_spec = ((spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    totals = pod_resources(head_spec)
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        pods = (group.get("replicas") or 0) * (group.get("numOfHosts") or 1)
        for name, (value, binary) in pod_resources(((group.get("template") or {}).get("spec")) or {}).items():
            old = totals.get(name)
            totals[name] = (old[0] + value * pods, old[1]) if old else (value * pods, binary)
    gpus = [v for k, v in totals.items() if k.endswith("/gpu") or k == "gpu"]
    gpu_total = sum((v[0] for v in gpus), Decimal(0))

    def show(name: str) -> str:
        value, binary = totals.get(name, (Decimal(0), False))
        return format_quantity(value, binary)

    return {
        "desiredCPU": show("cpu"),
        "desiredMemory": show("memory"),
        "desiredGPU": format_quantity(gpu_total, False),
        "desiredTPU": show("google.com/tpu"),
    }


# -- status (pure) ---------------------------------------------------------------------------------
def pod_running(pod: dict) -> bool:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return status.get("phase") == "Running" and ready


def set_condition(
    conditions: list[dict], now: str, type_: str, status: str, reason: str, message: str = ""
) -> None:
    """``meta.SetStatusCondition``: keep lastTransitionTime unless the status flips."""
    new = {"message": message, "type": type_, "status": status, "reason": reason}
    for existing in conditions:
        if existing["type"] == new["type"]:
            if existing["status"] != new["status"]:
                existing["lastTransitionTime"] = now
            existing.update({k: v for k, v in new.items() if k != "lastTransitionTime"})
            return
    conditions.append({**new, "lastTransitionTime": now})


def _is_true(conditions: list[dict], condition_type: str) -> bool:
    return any(c["type"] == condition_type and c["status"] == "True" for c in conditions)


def raycluster_status(cluster: dict, pods: list[dict], now: str, failure: PodRefused | None = None) -> dict:
    """The RayCluster status KubeRay would write, given its live (not terminating) pods and the refusal
    of a pod it tried to create (``ReplicaFailure``)."""
    spec = cluster.get("spec") or {}
    old = cluster.get("status") or {}
    status = copy.deepcopy(old)
    groups = spec.get("workerGroupSpecs") or []
    workers = [p for p in pods if p["metadata"]["labels"].get(NODE_TYPE_LABEL) == "worker"]
    heads = [p for p in pods if p["metadata"]["labels"].get(NODE_TYPE_LABEL) == "head"]
    desired = sum(group_desired_replicas(g) for g in groups)
    status["observedGeneration"] = cluster["metadata"].get("generation", 1)
    status["readyWorkerReplicas"] = sum(1 for p in workers if pod_running(p))
    status["availableWorkerReplicas"] = sum(
        1 for p in workers if (p.get("status") or {}).get("phase") == "Running"
    )
    status["desiredWorkerReplicas"] = desired
    status["minWorkerReplicas"] = min(
        MAX_INT32,
        sum(
            0 if g.get("suspend") else (g.get("minReplicas") or 0) * (g.get("numOfHosts") or 1)
            for g in groups
        ),
    )
    status["maxWorkerReplicas"] = min(
        MAX_INT32,
        sum(
            0 if g.get("suspend") else g.get("maxReplicas", MAX_INT32) * (g.get("numOfHosts") or 1)
            for g in groups
        ),
    )
    status.update(desired_resources(spec))
    all_running = bool(pods) and all(pod_running(p) for p in pods)
    if len(pods) == desired + 1 and all_running:
        status["state"] = "ready"
        status.pop("reason", None)

    conditions = status.setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c["type"] != REPLICA_FAILURE]
    if failure is not None:
        # KubeRay's ReplicaFailure: its message is the joined error (reason, newline, the API server's
        # message), as Go's errors.Join prints it.
        set_condition(conditions, now, REPLICA_FAILURE, "True", failure.reason, str(failure))
    if heads:
        head_ready = next(
            (c for c in (heads[0].get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None
        )
        if head_ready and head_ready["status"] == "True":
            set_condition(conditions, now, "HeadPodReady", "True", "HeadPodRunningAndReady")
        else:
            set_condition(
                conditions,
                now,
                "HeadPodReady",
                "False",
                "ContainersNotReady",
                "containers with unready status: [ray-head]",
            )
    else:
        set_condition(conditions, now, "HeadPodReady", "False", "HeadPodNotFound", "Head Pod not found")
    suspend = bool(spec.get("suspend"))
    was_suspended = _is_true(conditions, "RayClusterSuspended")
    if not _is_true(conditions, "RayClusterProvisioned") and not was_suspended:
        if all_running:
            provisioned = (
                "True",
                "AllPodRunningAndReadyFirstTime",
                "All Ray Pods are ready for the first time",
            )
        else:
            provisioned = (
                "False",
                "RayClusterPodsProvisioning",
                "RayCluster Pods are being provisioned for first time",
            )
        set_condition(conditions, now, "RayClusterProvisioned", *provisioned)
    if _is_true(conditions, "RayClusterSuspending"):
        if not pods:
            set_condition(
                conditions,
                now,
                "RayClusterProvisioned",
                "False",
                "RayClusterPodsProvisioning",
                "RayCluster has been suspended",
            )
            set_condition(conditions, now, "RayClusterSuspending", "False", "RayClusterSuspending")
            set_condition(conditions, now, "RayClusterSuspended", "True", "RayClusterSuspended")
    elif was_suspended:
        if not suspend:
            set_condition(conditions, now, "RayClusterSuspended", "False", "RayClusterSuspended")
    else:
        set_condition(conditions, now, "RayClusterSuspended", "False", "RayClusterSuspended")
        set_condition(
            conditions, now, "RayClusterSuspending", "True" if suspend else "False", "RayClusterSuspending"
        )
    if suspend and not pods:
        status["state"] = "suspended"

    name = cluster["metadata"]["name"]
    status["endpoints"] = {port: str(number) for port, number in cluster_ports(cluster).items()}
    head = status.setdefault("head", {})
    head.update(
        {"serviceName": head_service_name(name), "serviceIP": head.get("serviceIP") or next_ip("10.96")}
    )
    if heads:
        head["podName"] = heads[0]["metadata"]["name"]
        pod_ip = (heads[0].get("status") or {}).get("podIP")
        if pod_ip:
            head["podIP"] = pod_ip
        else:
            head.pop("podIP", None)
    else:
        head.pop("podName", None)
        head.pop("podIP", None)
    if status.get("state") != old.get("state") and status.get("state"):
        status.setdefault("stateTransitionTimes", {})[status["state"]] = now
    status["lastUpdateTime"] = old.get("lastUpdateTime", now)
    if _without_clock(status) != _without_clock(old):
        status["lastUpdateTime"] = now
    return status


REPLICA_FAILURE = "ReplicaFailure"


class PodRefused(Exception):
    """The API server refused a Ray pod; ``reason`` is KubeRay's (``FailedCreateHeadPod`` or
    ``FailedCreateWorkerPod``)."""

    def __init__(self, reason: str, error: ApiError):
        super().__init__(f"{reason}\n{error.message}")
        self.reason, self.error = reason, error


def _without_clock(status: dict) -> dict:
    return {k: v for k, v in status.items() if k != "lastUpdateTime"}


# -- pods ------------------------------------------------------------------------------------------
def build_pod(cluster: dict, template: dict, node_type: str, group: str) -> dict:
    """A Ray pod from a group's template, with the labels KubeRay puts on it, owned by the RayCluster."""
    name = cluster["metadata"]["name"]
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    labels.update(
        {
            CLUSTER_LABEL: name,
            NODE_TYPE_LABEL: node_type,
            GROUP_LABEL: group,
            "ray.io/is-ray-node": "yes",
            "ray.io/identifier": f"{name}-{node_type}",
            "app.kubernetes.io/name": "kuberay",
            CREATED_BY: OPERATOR,
        }
    )
    if (cluster["metadata"].get("labels") or {}).get("ray.io/originated-from-crd") == "RayService":
        # A RayService's worker takes traffic by its readiness probe, its head once the RayService
        # controller has found the head's Serve proxy healthy (BuildPod).
        labels["ray.io/serve"] = "false" if node_type == "head" else "true"
    prefix = f"{name}-head" if node_type == "head" else f"{name}-{group}-worker"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{prefix}-",
            "namespace": cluster["metadata"]["namespace"],
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(cluster)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _create_pod(ctx: Context, cluster: dict, template: dict, node_type: str, group: str) -> None:
    namespace = cluster["metadata"]["namespace"]
    try:
        pod = ctx.store.create(PODS, build_pod(cluster, template, node_type, group), namespace=namespace)
    except ApiError as exc:
        if exc.code != 422:
            raise
        # The API server validates the pod, not the RayCluster's template: e.g. a GPU request without an
        # equal limit. KubeRay reports it and tries again on its next reconcile.
        if node_type == "head":
            message = f"Failed to create head Pod {namespace}/, {exc.message}"
            ctx.event(cluster, "Warning", "FailedToCreateHeadPod", message)
            raise PodRefused("FailedCreateHeadPod", exc) from None
        message = f"Failed to create worker Pod for the cluster {namespace}/{cluster['metadata']['name']}, "
        ctx.event(cluster, "Warning", "FailedToCreateWorkerPod", message + exc.message)
        raise PodRefused("FailedCreateWorkerPod", exc) from None
    ctx.write_status(PODS, pod, pending_pod_status(pod, ctx.clock.timestamp()))
    start_pod_later(
        ctx,
        pod["metadata"]["namespace"],
        pod["metadata"]["name"],
        startup_seconds(cluster["metadata"].get("annotations")),
    )


def _ensure_head_service(ctx: Context, cluster: dict) -> None:
    name = cluster["metadata"]["name"]
    namespace = cluster["metadata"]["namespace"]
    try:
        ctx.store.get(SERVICES, head_service_name(name), namespace=namespace)
        return
    except ApiError as exc:
        if exc.code != 404:
            raise
    labels = {
        CLUSTER_LABEL: name,
        NODE_TYPE_LABEL: "head",
        "ray.io/identifier": f"{name}-head",
        CREATED_BY: OPERATOR,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": head_service_name(name),
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(cluster)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": {CLUSTER_LABEL: name, NODE_TYPE_LABEL: "head"},
            "ports": [
                {"name": port, "port": number, "targetPort": number, "protocol": "TCP"}
                for port, number in cluster_ports(cluster).items()
            ],
        },
    }
    ctx.store.create(SERVICES, service, namespace=namespace)


def live_pods(ctx: Context, namespace: str, cluster_name: str) -> list[dict]:
    pods, _ = ctx.store.list(PODS, namespace=namespace, label_selector=f"{CLUSTER_LABEL}={cluster_name}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


# -- reconcile -------------------------------------------------------------------------------------
def reconcile_raycluster(ctx: Context, namespace: str, name: str) -> None:
    cluster = ctx.store.get_or_none(RAYCLUSTERS, name, namespace=namespace)
    if cluster is None:
        ctx.dashboards.drop_cluster(namespace, name)
        return
    if cluster["metadata"].get("deletionTimestamp"):
        ctx.dashboards.drop_cluster(namespace, name)
        return
    spec = cluster.get("spec") or {}
    pods = live_pods(ctx, namespace, name)
    failure = None
    if spec.get("suspend"):
        for pod in pods:
            ctx.store.delete(PODS, pod["metadata"]["name"], namespace=namespace)
        ctx.dashboards.drop_cluster(namespace, name)
    else:
        _ensure_head_service(ctx, cluster)
        try:
            _reconcile_pods(ctx, cluster, pods)
        except PodRefused as refused:
            failure = refused
    pods = live_pods(ctx, namespace, name)
    status = raycluster_status(cluster, pods, ctx.clock.timestamp(), failure)
    if _without_clock(status) != _without_clock(cluster.get("status") or {}):
        ctx.write_status(RAYCLUSTERS, cluster, status)


def _reconcile_pods(ctx: Context, cluster: dict, pods: list[dict]) -> None:
    spec = cluster.get("spec") or {}
    namespace = cluster["metadata"]["namespace"]
    if not any(p["metadata"]["labels"].get(NODE_TYPE_LABEL) == "head" for p in pods):
        _create_pod(ctx, cluster, (spec.get("headGroupSpec") or {}).get("template") or {}, "head", HEAD_GROUP)
    for group in spec.get("workerGroupSpecs") or []:
        group_name = group.get("groupName", "")
        existing = [
            p
            for p in pods
            if p["metadata"]["labels"].get(NODE_TYPE_LABEL) == "worker"
            and p["metadata"]["labels"].get(GROUP_LABEL) == group_name
        ]
        wanted = group_desired_replicas(group)
        for _ in range(wanted - len(existing)):
            _create_pod(ctx, cluster, group.get("template") or {}, "worker", group_name)
        for pod in existing[wanted:]:
            ctx.store.delete(PODS, pod["metadata"]["name"], namespace=namespace)
