"""The Kueue tab of a deploy task: its RayService as the deploy operator's trigger sees it
(``observe_service``): the Workload Kueue admits, queues, priority, phase, position while queued, the active
and pending Ray clusters, and which run holds the RayService now.

Apart from the RayJob view because a RayService is admitted through its own Workload or its RayClusters'
and has clusters and applications where a RayJob has a timeline; both build on
``kueue_ray.ui.views.common``.
"""

from __future__ import annotations

import time
from typing import Any

from kueue_ray.naming import QUEUE_LABEL, AirflowIdentity
from kueue_ray.phases import SERVICE_PHASE_WORDS, SERVICE_POSITION_PHASES
from kueue_ray.rayservice.status import ServiceObservation, observe_service
from kueue_ray.ui.access import Access
from kueue_ray.ui.snapshot import PendingRead, Snapshot
from kueue_ray.ui.spans import service_spans
from kueue_ray.ui.views.common import (
    HIDDEN_OWNER,
    Links,
    TaskRef,
    describe_owner,
    find_recorded,
    metadata_of,
    phase_view,
    position_of,
    priority_of,
    victims_of,
)


def find_rayservice(snapshot: Snapshot, rayservice_xcom: dict) -> dict | None:
    """The task's RayService in the cache (``find_recorded``)."""
    return find_recorded(snapshot.rayservices, rayservice_xcom)


def service_cluster_queue(snapshot: Snapshot, rayservice_xcom: dict) -> str | None:
    """The ClusterQueue a deploy task's RayService is admitted to, else the one its LocalQueue feeds."""
    service = find_rayservice(snapshot, rayservice_xcom)
    namespace = rayservice_xcom.get("namespace")
    if service is not None:
        workloads = [w for w in snapshot.workloads if metadata_of(w).get("namespace") == namespace]
        admitted_to = observe_service(service, workloads).cluster_queue
        if admitted_to:
            return admitted_to
    local_queue = (metadata_of(service).get("labels") or {}).get(QUEUE_LABEL) or rayservice_xcom.get("queue")
    for lq in snapshot.local_queues:
        if metadata_of(lq).get("namespace") == namespace and metadata_of(lq).get("name") == local_queue:
            return (lq.get("spec") or {}).get("clusterQueue")
    return None


def service_task_view(
    ref: TaskRef,
    rayservice_xcom: dict,
    snapshot: Snapshot,
    pending: PendingRead | None,
    access: Access,
    links: Links,
    now: float | None = None,
) -> dict[str, Any]:
    """A deploy task's RayService as the deploy operator's trigger sees it (``observe_service``): the
    Workload Kueue admits (the RayService's own, or its target RayCluster's), queues, priority, phase,
    position while queued, and the active and pending Ray clusters.

    Once an upgrade by a later run rewrote the RayService, the tab shows its current state and names the
    run that now holds it (under the same reading rule as a preemptor)."""
    name, namespace = rayservice_xcom["name"], rayservice_xcom.get("namespace")
    service = find_rayservice(snapshot, rayservice_xcom)
    workloads = [w for w in snapshot.workloads if metadata_of(w).get("namespace") == namespace]
    observation = (
        observe_service(
            service,
            workloads,
            generation=rayservice_xcom.get("generation"),
            switch_from=rayservice_xcom.get("switch_from"),
        )
        if service is not None
        else None
    )
    workload = next(
        (w for w in workloads if observation and metadata_of(w).get("name") == observation.workload_name),
        None,
    )
    local_queue = (
        (metadata_of(service).get("labels") or {}).get(QUEUE_LABEL)
        or rayservice_xcom.get("queue")
        or ((workload or {}).get("spec") or {}).get("queueName")
    )
    cluster_queue = service_cluster_queue(snapshot, rayservice_xcom)
    priority = priority_of(workload, service)
    priority["class"] = priority["class"] or rayservice_xcom.get("priority")
    holder = AirflowIdentity.from_annotations(metadata_of(service).get("annotations"))
    now_held_by = None
    if holder is not None and (holder.dag_id, holder.run_id) != (ref.dag_id, ref.run_id):
        now_held_by = describe_owner(holder, access, links) or {"description": HIDDEN_OWNER}
    recorded = rayservice_xcom.get("timeline") or {}
    live = _live_timeline(workload, observation) if not recorded else {}
    cluster_names = {observation.active_cluster, observation.pending_cluster} if observation else set()
    cluster_uids = [
        metadata_of(c).get("uid")
        for c in snapshot.rayclusters
        if metadata_of(c).get("namespace") == namespace and metadata_of(c).get("name") in cluster_names
    ]
    return {
        "rayjob": None,
        "rayservice": {
            "name": name,
            "namespace": namespace,
            "uid": rayservice_xcom.get("uid") or metadata_of(service).get("uid"),
            "exists": service is not None,
            "workload": observation.workload_name if observation else None,
            "admitted_by": observation.admitted_by if observation else None,
            "local_queue": local_queue,
            "cluster_queue": cluster_queue,
            "cluster_queue_url": links.queue(cluster_queue) if cluster_queue else None,
            "priority": priority,
            "active_cluster": observation.active_cluster
            if observation
            else rayservice_xcom.get("active_cluster"),
            "pending_cluster": observation.pending_cluster if observation else None,
            "target_role": observation.target_role if observation else None,
            "applications": dict(observation.applications) if observation else {},
            "serve_service": rayservice_xcom.get("serve_service"),
            "now_deployed_by": now_held_by,
        },
        "preempted": victims_of(snapshot, [metadata_of(service).get("uid"), *cluster_uids], access, links),
        "phase": _service_phase(observation, recorded),
        "position": position_of(pending, workload)
        if observation and observation.phase in SERVICE_POSITION_PHASES
        else None,
        "timeline": {
            "source": "xcom" if recorded else ("live" if live else None),
            "queued_seconds": recorded.get("queued_seconds"),
            "starting_seconds": recorded.get("starting_seconds"),
            "preemption_count": recorded.get("preemption_count"),
            "spans": service_spans(recorded or live, time.time() if now is None else now),
        },
        "links": {"ray_dashboard": None, "queue": links.queue(cluster_queue) if cluster_queue else None},
    }


def _live_timeline(workload: dict | None, observation: ServiceObservation | None) -> dict[str, Any]:
    """While the deploy task waits (it records its timeline only when done): queued since the target
    cluster's Workload was made, admitted since Kueue admitted it, as the objects say."""
    created = metadata_of(workload).get("creationTimestamp")
    if not created or observation is None:
        return {}
    admitted = observation.admitted_at or observation.quota_reserved_at
    return {"submitted_at": created, "admissions": [{"at": admitted}] if admitted else []}


def _service_phase(observation: ServiceObservation | None, recorded: dict) -> dict[str, Any]:
    terminal = observation is not None and observation.terminal
    return phase_view(SERVICE_PHASE_WORDS, "RayService", observation, recorded, terminal=terminal)
