"""The simulated kube-scheduler and kubelet for the pods KubeRay and the Job controller create.

A real cluster places and starts the Ray pods and every Job's pods itself; the controllers only create
them. The RayCluster reconciler (``kubesim.kuberay.raycluster``) and the Job controller
(``kubesim.batch.controller``) hand their pods to ``schedule_pod`` / ``start_pod_later``, which place them
by ``kubesim.scheduling`` and report the statuses a kubelet writes. ``ctx`` is either controller: its
store, clock, ``write_status`` and ``call_after``. It belongs to neither, as a node belongs to no
controller, so neither controller package imports the other.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from kubesim.images import PULL_ATTEMPT, PULL_RETRY, image_pull_status
from kubesim.pod_strategy import PODS
from kubesim.scheduling import NODES, unschedulable_message, unschedulable_pod_status

Process = Callable[[Callable[[str], None]], Awaitable[int]]
"""A running container: given where to write its log lines, it runs and returns its exit code."""
ContainerProgram = Callable[[dict, dict], Process | None]
"""What an image runs, offered to the kubelet (``Cluster.container_programs``): given (pod, container), the
container's ``Process``, or None when the container is not this program's."""
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff"})
SCHEDULE_RETRY = 10.0  # simulated seconds between two scheduling attempts of an unschedulable pod

_ip_counter = 0


def next_ip(prefix: str) -> str:
    """A pod or Service IP in ``prefix``, unique in this process, as the cluster's IP allocation hands out."""
    global _ip_counter
    _ip_counter += 1
    return f"{prefix}.{(_ip_counter // 250) % 250}.{_ip_counter % 250 + 2}"


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
        "podIP": next_ip("10.244"),
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


def schedule_pod(ctx, namespace: str, pod_name: str, seconds: float, start: Callable[[], None]) -> None:
    """The simulated kube-scheduler, then the kubelet: place the pod on a node (``kubesim.scheduling``) and
    run ``start`` ``seconds`` later. A pod no node takes stays Pending (``PodScheduled=False`` /
    ``Unschedulable``) and is tried again every ``SCHEDULE_RETRY`` simulated seconds, as the scheduler
    retries unschedulable pods."""

    def attempt() -> None:
        pod = ctx.store.get_or_none(PODS, pod_name, namespace=namespace)
        if pod is None:
            return
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Pending":
            return
        nodes, _ = ctx.store.list(NODES)
        message = unschedulable_message(pod.get("spec") or {}, nodes)
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
        if message is None:
            waiting = next(
                (
                    c["state"]["waiting"]
                    for c in status.get("containerStatuses") or ()
                    if "waiting" in c["state"]
                ),
                {},
            )
            # A failed attempt, then the back-off, then the next attempt: the kubelet alternates.
            backoff = waiting.get("reason") == "ErrImagePull"
            failing = image_pull_status(pod, ctx.store.images, ctx.clock.timestamp(), backoff=backoff)
            if failing is not None:  # the kubelet retries the pull with back-off until it succeeds
                ctx.write_status(PODS, pod, failing)
                ctx.call_after(PULL_RETRY if backoff else PULL_ATTEMPT, attempt)
                return
            if scheduled.get("status") == "False" or waiting.get("reason") in PULL_FAILURES:
                ctx.write_status(PODS, pod, pending_pod_status(pod, ctx.clock.timestamp()))
            if seconds != float("inf"):
                ctx.call_after(seconds, start)
            return
        if scheduled.get("message") != message:
            ctx.write_status(PODS, pod, unschedulable_pod_status(pod, message, ctx.clock.timestamp()))
        ctx.call_after(SCHEDULE_RETRY, attempt)

    attempt()


def start_pod_later(ctx, namespace: str, pod_name: str, seconds: float) -> None:
    """Once scheduled, the simulated kubelet: after ``seconds`` the pod is Running and Ready (unless gone)."""

    def start() -> None:
        pod = ctx.store.get_or_none(PODS, pod_name, namespace=namespace)
        if pod is None:
            return
        if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") != "Pending":
            return
        ctx.write_status(PODS, pod, running_pod_status(pod, ctx.clock.timestamp()))

    schedule_pod(ctx, namespace, pod_name, seconds, start)
