"""RayCluster: head and worker pods, a head Service, and the status KubeRay v1.7.0 computes from them.

Pods are created Pending and a simulated kubelet marks them Running and Ready ``DEFAULT_STARTUP``
simulated seconds later (tests may change that with the ``kubesim.dev/startup`` annotation, which KubeRay
copies from the RayJob / RayService onto the RayCluster). The status follows ``calculateStatus``: ``state: ready``
once every desired pod runs, ``suspended`` when ``spec.suspend`` and no pod is left, conditions
``HeadPodReady`` / ``RayClusterProvisioned`` / ``RayClusterSuspended`` / ``RayClusterSuspending``.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

from kubesim.errors import ApiError
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
from kubesim.scheduling import NODES, unschedulable_message, unschedulable_pod_status

CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
HEAD_GROUP = "headgroup"
MAX_INT32 = 2147483647
DEFAULT_PORTS = {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}
DASHBOARD_PORT = 8265
SCHEDULE_RETRY = 10.0  # simulated seconds between two scheduling attempts of an unschedulable pod

_ip_counter = 0


def _next_ip(prefix: str) -> str:
    global _ip_counter
    _ip_counter += 1
    return f"{prefix}.{(_ip_counter // 250) % 250}.{_ip_counter % 250 + 2}"


def head_service_name(cluster_name: str) -> str:
    return f"{cluster_name}-head-svc"


def dashboard_url(cluster_name: str, namespace: str) -> str:
    """``FetchHeadServiceURL``: ``<cluster>-head-svc.<ns>.svc.cluster.local:8265``."""
    return f"{head_service_name(cluster_name)}.{namespace}.svc.cluster.local:{DASHBOARD_PORT}"


# -- resources (pure) ------------------------------------------------------------------------------
_BINARY = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def format_quantity(value: Decimal, binary: bool) -> str:
    """apimachinery's canonical string for a summed quantity (format of the first addend)."""
    if value == 0:
        return "0"
    if binary and value == value.to_integral_value() and abs(value) >= 1024:
        mantissa, times = int(value), 0
        while mantissa % 1024 == 0 and times < 6:
            mantissa //= 1024
            times += 1
        return f"{mantissa}{_BINARY[times]}"
    exponent = 18
    while (
        exponent > -9
        and (value / (Decimal(10) ** exponent)) != (value / (Decimal(10) ** exponent)).to_integral_value()
    ):
        exponent -= 3
    mantissa = value / (Decimal(10) ** exponent)
    return f"{int(mantissa.to_integral_value())}{_DECIMAL[exponent]}"


def pod_resources(pod_spec: dict) -> dict[str, tuple[Decimal, bool]]:
    """``CalculatePodResource``: requests, limits where a request is missing, summed over containers."""
    total: dict[str, tuple[Decimal, bool]] = {}
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        merged = dict(resources.get("limits") or {})
        merged.update(resources.get("requests") or {})
        for name, quantity in merged.items():
            value = Decimal(str(parse_quantity(quantity)))
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


def set_condition(conditions: list[dict], new: dict, now: str) -> None:
    """``meta.SetStatusCondition``: keep lastTransitionTime unless the status flips."""
    new = {"message": "", **new}
    for existing in conditions:
        if existing["type"] == new["type"]:
            if existing["status"] != new["status"]:
                existing["lastTransitionTime"] = now
            existing.update({k: v for k, v in new.items() if k != "lastTransitionTime"})
            return
    conditions.append({**new, "lastTransitionTime": now})


def _is_true(conditions: list[dict], condition_type: str) -> bool:
    return any(c["type"] == condition_type and c["status"] == "True" for c in conditions)


def raycluster_status(cluster: dict, pods: list[dict], now: str) -> dict:
    """The RayCluster status KubeRay would write, given its live (not terminating) pods."""
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
    if heads:
        head_ready = next(
            (c for c in (heads[0].get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None
        )
        if head_ready and head_ready["status"] == "True":
            set_condition(
                conditions,
                {"type": "HeadPodReady", "status": "True", "reason": "HeadPodRunningAndReady"},
                now,
            )
        else:
            set_condition(
                conditions,
                {
                    "type": "HeadPodReady",
                    "status": "False",
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: [ray-head]",
                },
                now,
            )
    else:
        set_condition(
            conditions,
            {
                "type": "HeadPodReady",
                "status": "False",
                "reason": "HeadPodNotFound",
                "message": "Head Pod not found",
            },
            now,
        )
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
        set_condition(
            conditions,
            {
                "type": "RayClusterProvisioned",
                "status": provisioned[0],
                "reason": provisioned[1],
                "message": provisioned[2],
            },
            now,
        )
    if _is_true(conditions, "RayClusterSuspending"):
        if not pods:
            set_condition(
                conditions,
                {
                    "type": "RayClusterProvisioned",
                    "status": "False",
                    "reason": "RayClusterPodsProvisioning",
                    "message": "RayCluster has been suspended",
                },
                now,
            )
            set_condition(
                conditions,
                {"type": "RayClusterSuspending", "status": "False", "reason": "RayClusterSuspending"},
                now,
            )
            set_condition(
                conditions,
                {"type": "RayClusterSuspended", "status": "True", "reason": "RayClusterSuspended"},
                now,
            )
    elif was_suspended:
        if not suspend:
            set_condition(
                conditions,
                {"type": "RayClusterSuspended", "status": "False", "reason": "RayClusterSuspended"},
                now,
            )
    else:
        set_condition(
            conditions,
            {"type": "RayClusterSuspended", "status": "False", "reason": "RayClusterSuspended"},
            now,
        )
        set_condition(
            conditions,
            {
                "type": "RayClusterSuspending",
                "status": "True" if suspend else "False",
                "reason": "RayClusterSuspending",
            },
            now,
        )
    if suspend and not pods:
        status["state"] = "suspended"

    name = cluster["metadata"]["name"]
    status["endpoints"] = {port: str(number) for port, number in DEFAULT_PORTS.items()}
    head = status.setdefault("head", {})
    head.update(
        {"serviceName": head_service_name(name), "serviceIP": head.get("serviceIP") or _next_ip("10.96")}
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


def pending_pod_status(pod: dict, now: str) -> dict:
    names = [c.get("name", "") for c in pod["spec"].get("containers") or []]
    return {
        "phase": "Pending",
        "qosClass": "Burstable",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {
                "type": "Ready",
                "status": "False",
                "reason": "ContainersNotReady",
                "message": f"containers with unready status: [{' '.join(names)}]",
                "lastTransitionTime": now,
            },
        ],
        "containerStatuses": [
            {
                "name": n,
                "ready": False,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": "",
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
            for n, c in zip(names, pod["spec"].get("containers") or [], strict=True)
        ],
    }


def running_pod_status(pod: dict, now: str) -> dict:
    containers = pod["spec"].get("containers") or []
    return {
        "phase": "Running",
        "qosClass": "Burstable",
        "hostIP": "172.18.0.2",
        "podIP": _next_ip("10.244"),
        "startTime": now,
        "conditions": [
            {"type": cond, "status": "True", "lastTransitionTime": now}
            for cond in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ],
        "containerStatuses": [
            {
                "name": c.get("name", ""),
                "ready": True,
                "started": True,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": f"docker.io/{c.get('image', '')}@sha256:{'0' * 64}",
                "containerID": f"containerd://{uuid.uuid4().hex}",
                "state": {"running": {"startedAt": now}},
            }
            for c in containers
        ],
    }


def schedule_pod(
    ctx: Context, namespace: str, pod_name: str, seconds: float, start: Callable[[], None]
) -> None:
    """The simulated kube-scheduler, then the kubelet: place the pod on a node (``kubesim.scheduling``) and
    run ``start`` ``seconds`` later. A pod no node takes stays Pending (``PodScheduled=False`` /
    ``Unschedulable``) and is tried again every ``SCHEDULE_RETRY`` simulated seconds, as the scheduler
    retries unschedulable pods."""

    def attempt() -> None:
        try:
            pod = ctx.store.get(PODS, pod_name, namespace=namespace)
        except ApiError as exc:
            if exc.code == 404:
                return
            raise
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Pending":
            return
        nodes, _ = ctx.store.list(NODES)
        message = unschedulable_message(pod.get("spec") or {}, nodes)
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
        if message is None:
            if scheduled.get("status") == "False":
                ctx.write_status(PODS, pod, pending_pod_status(pod, ctx.clock.timestamp()))
            if seconds != float("inf"):
                ctx.call_after(seconds, start)
            return
        if scheduled.get("message") != message:
            ctx.write_status(PODS, pod, unschedulable_pod_status(pod, message, ctx.clock.timestamp()))
        ctx.call_after(SCHEDULE_RETRY, attempt)

    attempt()


def start_pod_later(ctx: Context, namespace: str, pod_name: str, seconds: float) -> None:
    """Once scheduled, the simulated kubelet: after ``seconds`` the pod is Running and Ready (unless gone)."""

    def start() -> None:
        try:
            pod = ctx.store.get(PODS, pod_name, namespace=namespace)
        except ApiError as exc:
            if exc.code == 404:
                return
            raise
        if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Pending":
            return
        ctx.write_status(PODS, pod, running_pod_status(pod, ctx.clock.timestamp()))

    schedule_pod(ctx, namespace, pod_name, seconds, start)


def _create_pod(ctx: Context, cluster: dict, template: dict, node_type: str, group: str) -> None:
    pod = ctx.store.create(
        PODS, build_pod(cluster, template, node_type, group), namespace=cluster["metadata"]["namespace"]
    )
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
                for port, number in DEFAULT_PORTS.items()
            ],
        },
    }
    ctx.store.create(SERVICES, service, namespace=namespace)


def live_pods(ctx: Context, namespace: str, cluster_name: str) -> list[dict]:
    pods, _ = ctx.store.list(PODS, namespace=namespace, label_selector=f"{CLUSTER_LABEL}={cluster_name}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


# -- reconcile -------------------------------------------------------------------------------------
def reconcile_raycluster(ctx: Context, namespace: str, name: str) -> None:
    try:
        cluster = ctx.store.get(RAYCLUSTERS, name, namespace=namespace)
    except ApiError as exc:
        if exc.code == 404:
            ctx.dashboards.drop_cluster(namespace, name)
            return
        raise
    if cluster["metadata"].get("deletionTimestamp"):
        ctx.dashboards.drop_cluster(namespace, name)
        return
    spec = cluster.get("spec") or {}
    pods = live_pods(ctx, namespace, name)
    if spec.get("suspend"):
        for pod in pods:
            ctx.store.delete(PODS, pod["metadata"]["name"], namespace=namespace)
        ctx.dashboards.drop_cluster(namespace, name)
    else:
        _ensure_head_service(ctx, cluster)
        _reconcile_pods(ctx, cluster, pods)
    pods = live_pods(ctx, namespace, name)
    status = raycluster_status(cluster, pods, ctx.clock.timestamp())
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
