"""What a watch cache keeps of a RayJob or a Kueue Workload (``essential_rayjob``,
``essential_workload``): the fields ``kueue_ray.status.observe`` and a waiting task read, without the pod
templates that make up most of an object's size.

Apart from ``kueue_ray.status`` because it serves the caches (``kueue_ray.hub.resources``), not the
status model; the model's tests check that ``observe`` reads the same from the trimmed objects.
"""

from __future__ import annotations

import sys
from typing import Any

from kueue_ray.naming import MANAGED_BY_LABEL

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
_CONDITION_KEYS = ("type", "status", "reason", "message", "lastTransitionTime")
"""What of a Workload condition ``observe`` and the wait's clocks read (not ``observedGeneration``)."""
_KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
_KEPT_WORKLOAD_METADATA = (
    *_KEPT_METADATA,
    "creationTimestamp",  # the newest of a RayService's Workloads (service_status)
)
KEPT_KEY_PREFIXES = ("kueue.x-k8s.io/", "airflow.apache.org/", "kueue-ray.airflow.apache.org/")
"""The labels and annotations a waiting task reads: Kueue's (queue name, the Workload's job uid), the Airflow
identity this project stamps (naming a preemptor's DAG run) and the project's own; with ``MANAGED_BY_LABEL``
(what the hub's watch selects). Any other label or annotation (another tool's, kubectl's
last-applied-configuration) is not cached."""
_OWNER_KEYS = ("kind", "name", "uid", "controller")
"""What a Workload's controller reference says that ``service_status`` reads."""


def _kept(pairs: dict | None) -> dict | None:
    kept = {
        sys.intern(k): _shared(v)
        for k, v in (pairs or {}).items()
        if k == MANAGED_BY_LABEL or k.startswith(KEPT_KEY_PREFIXES)
    }
    return kept or None


def _essential_metadata(metadata: dict, fields: tuple[str, ...] = _KEPT_METADATA) -> dict:
    kept = {key: metadata[key] for key in fields if key in metadata}
    if "namespace" in kept:
        kept["namespace"] = _shared(kept["namespace"])
    for key in ("labels", "annotations"):
        pairs = _kept(metadata.get(key))
        if pairs:
            kept[key] = pairs
    return kept


def _controller(references: list[dict] | None) -> list[dict]:
    """A Workload's controller reference (its job, RayService or RayCluster), with what is read of it."""
    return [
        {key: ref[key] for key in _OWNER_KEYS if key in ref}
        for ref in references or ()
        if ref.get("controller")
    ]


def _shared(value: Any) -> Any:
    """One string object for values that thousands of objects repeat (reasons, Kueue's messages, label
    values: a queue, a DAG, a deployment)."""
    return sys.intern(value) if isinstance(value, str) else value


def _compact(value: Any) -> Any:
    """``value`` (decoded JSON) with its keys and strings shared (``_shared``): json's decoder makes new
    key strings for every document, so each cached object held its own "resourceUsage", "cpu", "1"...
    (~60 bytes each)."""
    if isinstance(value, dict):
        return {sys.intern(k): _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return _shared(value)


def essential_rayjob(rayjob: dict) -> dict:
    """The part of a RayJob that ``observe`` and the waiting task read: what a watch cache keeps of it.

    A RayJob's spec (the Ray cluster's pod templates) is most of its size and none of its meaning for a
    waiter, who needs only ``spec.suspend`` and ``spec.managedBy`` (a MultiKueue manager's copy, whose status
    is a worker's); ``observe(essential_rayjob(r), w) == observe(r, w)``.
    """
    spec = rayjob.get("spec") or {}
    status = rayjob.get("status") or {}
    slim: dict[str, Any] = {"metadata": _essential_metadata(rayjob.get("metadata") or {})}
    kept_spec = {key: _shared(spec[key]) for key in ("suspend", "managedBy") if key in spec}
    if kept_spec:
        slim["spec"] = kept_spec
    if status:
        slim["status"] = {key: _compact(status[key]) for key in RAYJOB_STATUS_FIELDS if key in status}
    return slim


def _pod_set_requests(pod_sets: list[dict] | None) -> list[dict]:
    """Pod sets cut to what ``kueue_ray.holdings.requests_of`` reads: name, count and each container's
    resource requests."""
    kept = []
    for pod_set in pod_sets or ():
        pod_spec = (pod_set.get("template") or {}).get("spec") or {}
        spec = {
            key: [
                {"resources": {"requests": _compact((c.get("resources") or {}).get("requests") or {})}}
                for c in containers
            ]
            for key in ("containers", "initContainers")
            if (containers := pod_spec.get(key))
        }
        kept.append(
            {
                "name": _shared(pod_set.get("name")),
                "count": pod_set.get("count", 1),
                "template": {"spec": spec},
            }
        )
    return kept


def essential_workload(workload: dict) -> dict:
    """The part of a Kueue Workload that ``observe`` reads: conditions, the admission's ClusterQueue,
    flavors and resource usage, scheduling and requeue stats, admission checks, ``spec.active`` and the
    priority (``spec.priority``, the class's name) and a pending one's ``resourceRequests`` (who holds
    the quota it needs: ``kueue_ray.why_queued``); not the pod sets (a copy of every pod template), but
    for a Workload neither admitted nor yet given ``resourceRequests`` (Kueue's scheduler writes them when
    it first tries it, and a queue's later Workloads wait untried) their containers' requests, so that
    what it needs is known before. ``observe(r, essential_workload(w)) == observe(r, w)``."""
    spec = workload.get("spec") or {}
    status = workload.get("status") or {}
    metadata = workload.get("metadata") or {}
    slim: dict[str, Any] = {"metadata": _essential_metadata(metadata, _KEPT_WORKLOAD_METADATA)}
    owners = _controller(metadata.get("ownerReferences"))
    if owners:
        slim["metadata"]["ownerReferences"] = owners
    # The priority, so that a waiting task tells a change of it (a relabelled RayJob).
    kept_spec = {key: spec[key] for key in ("active", "priority") if key in spec}
    if (spec.get("priorityClassRef") or {}).get("name"):
        kept_spec["priorityClassRef"] = {"name": _shared(spec["priorityClassRef"]["name"])}
    if not status.get("admission") and not status.get("resourceRequests") and spec.get("podSets"):
        kept_spec["podSets"] = _pod_set_requests(spec["podSets"])
    if kept_spec:
        slim["spec"] = kept_spec
    kept: dict[str, Any] = {}
    if status.get("conditions"):
        kept["conditions"] = [
            {k: _shared(c[k]) for k in _CONDITION_KEYS if k in c} for c in status["conditions"]
        ]
    admission = status.get("admission")
    if admission:
        kept["admission"] = {
            "clusterQueue": _shared(admission.get("clusterQueue")),
            "podSetAssignments": [
                {key: _compact(a[key]) for key in ("name", "flavors", "resourceUsage") if key in a}
                for a in admission.get("podSetAssignments") or ()
            ],
        }
    for key in ("schedulingStats", "requeueState", "admissionChecks", "resourceRequests", "clusterName"):
        if status.get(key):
            kept[key] = _compact(status[key])
    if kept:
        slim["status"] = kept
    return slim


def resource_version_newer(candidate: dict, current: dict | None) -> bool:
    """True when ``candidate`` should replace ``current`` in a cache.

    resourceVersions are opaque strings to clients, but every API server in practice issues increasing
    integers (etcd revisions); compare them as integers when both parse, and otherwise trust the newcomer.
    """
    if current is None:
        return True
    new_rv = (candidate.get("metadata") or {}).get("resourceVersion")
    old_rv = (current.get("metadata") or {}).get("resourceVersion")
    try:
        return int(new_rv) > int(old_rv)
    except (TypeError, ValueError):
        return new_rv != old_rv
