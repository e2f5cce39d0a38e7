"""What a watch cache keeps of a RayJob or a Kueue Workload (``essential_rayjob``,
``essential_workload``): the fields ``kueue_ray.status.observe`` and a waiting task read, without the pod
templates that make up most of an object's size.

Apart from ``kueue_ray.status`` because it serves the caches (``kueue_ray.hub.resources``), not the
status model; the model's tests check that ``observe`` reads the same from the trimmed objects.
"""

from __future__ import annotations

import sys
from typing import Any

RAYJOB_STATUS_FIELDS = (
    "jobDeploymentStatus",
    "jobStatus",
    "reason",
    "message",
    "failed",
    "succeeded",
    "jobId",
    "rayClusterName",
    "dashboardURL",
    "rayJobInfo",
    "startTime",
    "endTime",
)
"""What of a RayJob's status ``observe`` and the task's XComs read (not ``rayClusterStatus``)."""
_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",  # which RayService or RayCluster a Workload belongs to (service_status)
)
_DROPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})


def _essential_metadata(metadata: dict) -> dict:
    kept = {key: metadata[key] for key in _KEPT_METADATA if key in metadata}
    if metadata.get("labels"):
        kept["labels"] = metadata["labels"]
    annotations = metadata.get("annotations")
    if annotations:
        kept["annotations"] = {k: v for k, v in annotations.items() if k not in _DROPPED_ANNOTATIONS}
    return kept


def _shared(value: Any) -> Any:
    """One string object for values that thousands of objects repeat (reasons, Kueue's messages)."""
    return sys.intern(value) if isinstance(value, str) else value


def essential_rayjob(rayjob: dict) -> dict:
    """The part of a RayJob that ``observe`` and the waiting task read: what a watch cache keeps of it.

    A RayJob's spec (the Ray cluster's pod templates) is most of its size and none of its meaning for a
    waiter, who needs only ``spec.suspend``; ``observe(essential_rayjob(r), w) == observe(r, w)``.
    """
    spec = rayjob.get("spec") or {}
    status = rayjob.get("status") or {}
    slim: dict[str, Any] = {"metadata": _essential_metadata(rayjob.get("metadata") or {})}
    if "suspend" in spec:
        slim["spec"] = {"suspend": spec["suspend"]}
    if status:
        slim["status"] = {key: _shared(status[key]) for key in RAYJOB_STATUS_FIELDS if key in status}
    return slim


def essential_workload(workload: dict) -> dict:
    """The part of a Kueue Workload that ``observe`` reads: conditions, the admission's ClusterQueue,
    flavors and resource usage, scheduling and requeue stats, admission checks, ``spec.active``; not the
    pod sets (a copy of every pod template) nor the resource requests.
    ``observe(r, essential_workload(w)) == observe(r, w)``."""
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    slim: dict[str, Any] = {"metadata": _essential_metadata(workload.get("metadata") or {})}
    if "active" in spec:
        slim["spec"] = {"active": spec["active"]}
    kept: dict[str, Any] = {}
    if status.get("conditions"):
        kept["conditions"] = [{k: _shared(v) for k, v in c.items()} for c in status["conditions"]]
    admission = status.get("admission")
    if admission:
        kept["admission"] = {
            "clusterQueue": _shared(admission.get("clusterQueue")),
            "podSetAssignments": [
                {key: a[key] for key in ("name", "flavors", "resourceUsage") if key in a}
                for a in admission.get("podSetAssignments") or ()
            ],
        }
    for key in ("schedulingStats", "requeueState", "admissionChecks"):
        if status.get(key):
            kept[key] = status[key]
    if kept:
        slim["status"] = kept
    return slim
