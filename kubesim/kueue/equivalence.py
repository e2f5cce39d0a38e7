"""Kueue's scheduling equivalence (feature gate ``SchedulingEquivalenceHashing``, on by default since
v0.18): under BestEffortFIFO, when a ClusterQueue's head does not fit (no quota, no preemption
candidates), every pending Workload of the same shape in that queue is parked with it without being
evaluated, so it gets no ``QuotaReserved`` condition; a Workload of that shape arriving later is parked
on arrival. The classes are forgotten whenever parked Workloads are requeued (any cluster event that may
free quota), and each is then evaluated again as it becomes the head.

    >>> pod_set = {"name": "head", "count": 1, "template": {"spec": {"containers": [
    ...     {"name": "ray-head", "image": "a", "resources": {"requests": {"cpu": "1"}}}]}}}
    >>> one = {"spec": {"priority": 100, "podSets": [pod_set]}}
    >>> other_image = {"spec": {"priority": 100, "podSets": [{**pod_set, "template": {"spec": {"containers": [
    ...     {"name": "c", "image": "b", "resources": {"requests": {"cpu": "1"}}}]}}}]}}
    >>> scheduling_shape(one) == scheduling_shape(other_image)   # names and images do not count
    True
    >>> scheduling_shape(one) == scheduling_shape({"spec": {"priority": 1000, "podSets": [pod_set]}})
    False
"""

from __future__ import annotations

import json
from collections.abc import Iterable

POD_SHAPE_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "runtimeClassName",
    "priority",
    "topologySpreadConstraints",
    "overhead",
    "resourceClaims",
)
"""``utilpod.SpecShape``: what of a pod template besides its containers' requests and ports counts."""


def _containers_shape(containers: list[dict] | None) -> list[dict]:
    return [
        {"requests": (c.get("resources") or {}).get("requests"), "ports": c.get("ports")}
        for c in containers or []
    ]


def scheduling_shape(workload: dict) -> str:
    """``computeSchedulingHash``: the effective priority and, per pod set, its name, count, minimum count,
    topology request and the pod template's shape."""
    spec = workload.get("spec") or {}
    pod_sets = []
    for pod_set in spec.get("podSets") or []:
        pod = (pod_set.get("template") or {}).get("spec") or {}
        shape = {field: pod.get(field) for field in POD_SHAPE_FIELDS}
        shape["containers"] = _containers_shape(pod.get("containers"))
        shape["initContainers"] = _containers_shape(pod.get("initContainers"))
        if pod.get("resources"):
            shape["resources"] = (pod["resources"] or {}).get("requests")
        pod_sets.append(
            {
                "name": pod_set.get("name"),
                "count": pod_set.get("count", 1),
                "minCount": pod_set.get("minCount"),
                "topologyRequest": pod_set.get("topologyRequest"),
                "spec": shape,
            }
        )
    return json.dumps({"priority": spec.get("priority", 0), "podSets": pod_sets}, sort_keys=True)


class Parked(set):
    """The uids of parked (inadmissible) Workloads, and ``shapes``: the (ClusterQueue, scheduling shape)
    classes parked with them. Clearing it (requeueing every parked Workload) forgets both, as upstream's
    ``queueInadmissibleWorkloads`` does."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: set[tuple[str, str]] = set()
        self.clears = 0
        """How many times it was cleared: a pass that gathered its queues before a clear gathers again."""
        self.additions = 0
        """How many times uids were added: whoever keeps the unparked Workloads apart knows when to look."""

    def add(self, uid: str) -> None:
        super().add(uid)
        self.additions += 1

    def update(self, *uids: Iterable[str]) -> None:
        super().update(*uids)
        self.additions += 1

    def clear(self) -> None:
        super().clear()
        self.shapes.clear()
        self.clears += 1
