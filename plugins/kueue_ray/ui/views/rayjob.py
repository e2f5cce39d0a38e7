"""The Kueue tab of a task that submitted or waits for a RayJob: its Workload, queues, the worker cluster
MultiKueue dispatched it to, priority, phase in words, queue position, timeline spans (with who
preempted it), and links. A deploy task is handed to
``kueue_ray.ui.views.rayservice``.

Apart from the RayService view because a RayJob has a timeline of spans and a preemptor to name, and a
RayService has clusters and applications instead; both build on ``kueue_ray.ui.views.common``.
"""

from __future__ import annotations

import time
from typing import Any

from kueue_ray.multikueue import worker_cluster
from kueue_ray.naming import JOB_UID_LABEL, PRIORITY_CHANGED_BY_ANNOTATION, QUEUE_LABEL
from kueue_ray.phases import PHASE_WORDS, POSITION_PHASES, TERMINAL_PHASES, Phase
from kueue_ray.pod_states import pod_states
from kueue_ray.status import Observation, observe
from kueue_ray.timeline import to_epoch, to_iso
from kueue_ray.ui.access import Access
from kueue_ray.ui.snapshot import PendingRead, Snapshot
from kueue_ray.ui.spans import build_spans
from kueue_ray.ui.views.common import (
    FOREIGN_OWNER,
    HIDDEN_OWNER,
    Links,
    TaskRef,
    describe_owner,
    find_recorded,
    iso_times,
    metadata_of,
    phase_view,
    position_of,
    priority_of,
    victims_of,
)
from kueue_ray.ui.views.queued import why_queued_view
from kueue_ray.ui.views.rayservice import service_task_view


def task_view(
    ref: TaskRef,
    *,
    rayjob_xcom: dict | None,
    snapshot: Snapshot,
    access: Access,
    timeline_xcom: dict | None = None,
    dashboard_link: str | None = None,
    live_timeline: dict | None = None,
    pending: PendingRead | None = None,
    links: Links | None = None,
    now: float | None = None,
    rayservice_xcom: dict | None = None,
    pods: list[dict] | None = None,
) -> dict[str, Any]:
    """The Kueue tab of one task instance. The caller has checked the user may read ``ref.dag_id``.
    What it was not given (the XComs of the timeline and the dashboard link, the cache's live timeline,
    the queue's pending list, the links) it shows without.

    A deploy task (``rayservice`` XCom, pushed before it waits) is shown by ``service_task_view``."""
    now = time.time() if now is None else now
    links = Links() if links is None else links
    base = {
        "now": to_iso(now),
        "version": snapshot.version,
        "user": access.user_name,
        "cluster": snapshot.health.to_dict() | iso_times(snapshot.health.to_dict()),
        "task": {**vars(ref), "url": links.task_instance(ref.identity())},
    }
    if (not rayjob_xcom or not rayjob_xcom.get("name")) and (rayservice_xcom or {}).get("name"):
        return base | service_task_view(ref, rayservice_xcom, snapshot, pending, access, links, now)
    if not rayjob_xcom or not rayjob_xcom.get("name"):
        return base | {
            "rayjob": None,
            "message": "This task instance has not submitted or waited for a RayJob (it has no 'rayjob' XCom).",
        }
    name, namespace = rayjob_xcom.get("name"), rayjob_xcom.get("namespace")
    rayjob = find_recorded(snapshot.rayjobs, rayjob_xcom)
    uid = rayjob_xcom.get("uid") or metadata_of(rayjob).get("uid")
    workload = next(
        (
            w
            for w in snapshot.workloads
            if metadata_of(w).get("namespace") == namespace
            and (metadata_of(w).get("labels") or {}).get(JOB_UID_LABEL) == uid
        ),
        None,
    )
    observation = observe(rayjob, workload) if rayjob is not None else None
    local_queue = _local_queue(rayjob, rayjob_xcom) or ((workload or {}).get("spec") or {}).get("queueName")
    cluster_queue = (observation.cluster_queue if observation else None) or task_cluster_queue(
        snapshot, rayjob_xcom
    )
    priority = priority_of(workload, rayjob)
    priority["class"] = priority["class"] or rayjob_xcom.get("priority")
    timeline, source = _timeline_for(timeline_xcom, live_timeline)
    spans = build_spans(timeline, now) if timeline else []
    for span in spans:
        if span["kind"] == "preempted":
            span["preemptor"] = _preemptor(span.pop("preemptor_job_uid", None), snapshot, access, links)
    return base | {
        "rayjob": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "exists": rayjob is not None,
            "workload": metadata_of(workload).get("name") or rayjob_xcom.get("workload_name"),
            "local_queue": local_queue,
            "cluster_queue": cluster_queue,
            "cluster_queue_url": links.queue(cluster_queue) if cluster_queue else None,
            "worker_cluster": worker_cluster(workload),
            "priority": priority,
            "priority_changed_by": (metadata_of(rayjob).get("annotations") or {}).get(
                PRIORITY_CHANGED_BY_ANNOTATION
            ),
            "submitted_by": describe_owner(snapshot.identities.get(uid or ""), access, links),
        },
        "preempted": victims_of(snapshot, [uid], access, links),
        "phase": _phase(observation, timeline),
        "position": position_of(pending, workload),
        "pods": [state.to_dict() for state in pod_states(pods)]
        if pods is not None and observation is not None and observation.phase is Phase.ADMITTED
        else None,
        "why_queued": why_queued_view(workload, cluster_queue, snapshot, access, links)
        if observation is not None and observation.phase in POSITION_PHASES
        else None,
        "timeline": {
            "source": source,
            "observed_since": to_iso(to_epoch(timeline["transitions"][0]["at"]))
            if timeline and timeline.get("transitions")
            else None,
            "queued_seconds": (timeline or {}).get("queued_seconds"),
            "running_seconds": (timeline or {}).get("running_seconds"),
            "preemption_count": (timeline or {}).get("preemption_count"),
            "spans": spans,
        },
        "links": {
            "ray_dashboard": dashboard_link or _dashboard(observation),
            "queue": links.queue(cluster_queue) if cluster_queue else None,
        },
    }


def starting_cluster(snapshot: Snapshot, rayjob_xcom: dict) -> str | None:
    """The RayCluster of a task's RayJob while it starts (admitted, the Ray job not running yet): the one
    whose pods the tab shows (``kueue_ray.ui.pods``); None otherwise."""
    rayjob = find_recorded(snapshot.rayjobs, rayjob_xcom)
    if rayjob is None:
        return None
    uid = metadata_of(rayjob).get("uid")
    workload = next(
        (w for w in snapshot.workloads if (metadata_of(w).get("labels") or {}).get(JOB_UID_LABEL) == uid),
        None,
    )
    observation = observe(rayjob, workload)
    return observation.ray_cluster if observation.phase is Phase.ADMITTED else None


def _local_queue(rayjob: dict | None, rayjob_xcom: dict) -> str | None:
    return (metadata_of(rayjob).get("labels") or {}).get(QUEUE_LABEL) or rayjob_xcom.get("queue")


def task_cluster_queue(snapshot: Snapshot, rayjob_xcom: dict) -> str | None:
    """The ClusterQueue a task's RayJob queues in: its LocalQueue's (as the cache knows it), else what the
    task recorded."""
    namespace = rayjob_xcom.get("namespace")
    local_queue = _local_queue(find_recorded(snapshot.rayjobs, rayjob_xcom), rayjob_xcom)
    for lq in snapshot.local_queues:
        if metadata_of(lq).get("namespace") == namespace and metadata_of(lq).get("name") == local_queue:
            return (lq.get("spec") or {}).get("clusterQueue")
    return rayjob_xcom.get("cluster_queue")


def _timeline_for(timeline_xcom: dict | None, live: dict | None) -> tuple[dict | None, str | None]:
    """The task's own ``timeline`` XCom once it stopped waiting (the trigger saw it all), else the live
    timeline of this api-server process, else an older XCom without transitions."""
    if timeline_xcom and timeline_xcom.get("transitions"):
        return timeline_xcom, "xcom"
    if live and live.get("transitions"):
        return live, "live"
    if timeline_xcom:
        return timeline_xcom, "xcom"
    return None, None


def _phase(observation: Observation | None, timeline: dict | None) -> dict[str, Any]:
    terminal = observation is not None and observation.phase in TERMINAL_PHASES
    return phase_view(PHASE_WORDS, "RayJob", observation, timeline, terminal=terminal)


def _preemptor(job_uid: str | None, snapshot: Snapshot, access: Access, links: Links) -> dict[str, Any]:
    identity = snapshot.identities.get(job_uid or "")
    if identity is None:
        return {"known": False, "description": FOREIGN_OWNER if job_uid else "not named by Kueue"}
    owner = describe_owner(identity, access, links)
    if owner is None:
        return {"known": False, "description": HIDDEN_OWNER}
    if "foreign_deployment" in owner:
        return {"known": False, **owner}
    return {
        "known": True,
        "description": f"DAG {identity.dag_id}, run {identity.run_id}, task {identity.task_id}",
        **owner,
    }


def _dashboard(observation: Observation | None) -> str | None:
    url = observation.dashboard_url if observation else None
    if url and "://" not in url:
        url = f"http://{url}"
    return url or None
