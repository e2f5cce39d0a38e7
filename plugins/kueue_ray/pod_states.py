"""What a Ray cluster's pods are doing between Kueue's admission and the Ray job running (pure).

Between admission and RUNNING, KubeRay and Kueue say only "the Ray cluster is starting" until Kueue's
waitForPodsReady timeout evicts the workload; what actually holds it is in the pods: a pod the
scheduler cannot place (``PodScheduled=False``, reason ``Unschedulable``, "0/3 nodes are available: 1
node(s) had untolerated taint {…}"), or a container the kubelet cannot start (waiting with
``ErrImagePull`` / ``ImagePullBackOff`` / ``CreateContainerConfigError`` …). ``pod_states`` reads those
from the pods as the API returns them (plain dicts, KubeRay's ``ray.io/node-type`` label naming head and
worker), and ``describe_pods`` says them in one line for the task log.

Example::

    >>> pod = {"metadata": {"name": "rc-head-x", "labels": {"ray.io/node-type": "head"}},
    ...        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
    ...            "reason": "Unschedulable", "message": "0/1 nodes are available: 1 node(s) had untolerated taint {sku: gpu}."}]}}
    >>> print(describe_pods(pod_states([pod])))
    head rc-head-x Pending (Unschedulable: 0/1 nodes are available: 1 node(s) had untolerated taint {sku: gpu}.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

NODE_TYPE_LABEL = "ray.io/node-type"
CLUSTER_LABEL = "ray.io/cluster"
ROLE_ORDER = {"head": 0, "worker": 1}


@dataclass(frozen=True)
class PodState:
    role: str
    """KubeRay's node type: head or worker (else the pod's own label value)."""
    name: str
    phase: str
    reason: str | None
    """The scheduler's (``Unschedulable``) or a container's waiting reason (``ImagePullBackOff``)."""
    message: str | None

    def describe(self) -> str:
        text = f"{self.role} {self.name} {self.phase}"
        if self.reason:
            text += f" ({self.reason}: {self.message})" if self.message else f" ({self.reason})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pod_state(pod: dict) -> PodState:
    """One pod's phase and the first reason it is not running: unscheduled, then a container waiting."""
    metadata, status = pod.get("metadata") or {}, pod.get("status") or {}
    reason = message = None
    scheduled: dict = next((c for c in status.get("conditions") or () if c.get("type") == "PodScheduled"), {})
    if scheduled.get("status") == "False":
        reason, message = scheduled.get("reason"), scheduled.get("message")
    else:
        for container in [
            *(status.get("initContainerStatuses") or ()),
            *(status.get("containerStatuses") or ()),
        ]:
            waiting = (container.get("state") or {}).get("waiting")
            terminated = (container.get("state") or {}).get("terminated")
            if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
                reason, message = waiting.get("reason"), waiting.get("message")
                break
            if terminated and terminated.get("exitCode"):
                reason, message = terminated.get("reason"), terminated.get("message")
                break
    if metadata.get("deletionTimestamp"):
        reason = reason or "Terminating"
    return PodState(
        role=(metadata.get("labels") or {}).get(NODE_TYPE_LABEL) or "pod",
        name=metadata.get("name", ""),
        phase=status.get("phase") or "Pending",
        reason=reason,
        message=message,
    )


def pod_states(pods: Iterable[dict]) -> list[PodState]:
    """The pods, head first then workers, each with its phase and reason."""
    states = [pod_state(pod) for pod in pods]
    return sorted(states, key=lambda s: (ROLE_ORDER.get(s.role, 2), s.name))


def describe_pods(states: list[PodState]) -> str:
    """One line for the task log: every pod that is not running with its reason; running ones counted."""
    running = [s for s in states if s.phase == "Running" and not s.reason]
    told = [s.describe() for s in states if s not in running]
    if running:
        told.append(f"{len(running)} running")
    return "; ".join(told) if told else "no pods yet"
