"""What the two Kueue pages show, as JSON: pure functions of the cluster's objects and of what the user
may read.

* ``queues_view``: every ClusterQueue with its cohort, its quota per flavor and resource (nominal quota,
  borrowing and lending limits, what is admitted and reserved), its pending workloads in Kueue's order
  with their positions, and its admitted workloads with their age.
* ``task_view``: the RayJob one task instance submitted or waits for: its Workload, queues, priority,
  phase in words, queue position, timeline spans, and links; for a deploy task, its RayService the same
  way (``service_task_view``), with the active and pending Ray clusters.

Security is decided here, once: a workload is described (names, DAG, run, task, links, Kueue's messages)
only when its RayJob's annotations name a DAG the user may read. Everything else (other DAGs, jobs not
started by Airflow) appears only in counts. A preemptor is named under the same rule.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from kueue_ray.links import kueue_tab_path, task_instance_path
from kueue_ray.naming import JOB_UID_LABEL, PRIORITY_CLASS_LABEL, QUEUE_LABEL, AirflowIdentity
from kueue_ray.quantity import QuantityError, human_quantity, parse_quantity
from kueue_ray.service_status import SERVICE_POSITION_PHASES, ServiceObservation, observe_service
from kueue_ray.status import TERMINAL_PHASES, Observation, observe
from kueue_ray.timeline import to_epoch, to_iso
from kueue_ray.ui.access import Access
from kueue_ray.ui.cache import PendingRead, Snapshot
from kueue_ray.ui.spans import build_spans

APP_PREFIX = "/kueue"
QUEUES_ROUTE = "kueue-queues"
"""``url_route`` of the navigation page: ``/plugin/kueue-queues``."""

PHASE_WORDS = {
    "SUBMITTED": "Submitted; Kueue has not created its Workload yet",
    "QUEUED": "Queued: waiting for quota in its ClusterQueue",
    "INADMISSIBLE": "Inadmissible: it cannot be admitted until the queue or its quota changes",
    "AWAITING_CHECKS": "Quota reserved: waiting for the ClusterQueue's admission checks",
    "ADMITTED": "Admitted: quota is reserved and the Ray cluster is starting",
    "RUNNING": "Running",
    "RETRYING": "Retrying: an attempt failed and KubeRay starts another one",
    "PREEMPTED": "Preempted: Kueue evicted it and the Ray cluster is being torn down; it will queue again",
    "PODS_NOT_READY": "Evicted: its pods were not ready in time; it will queue again after a backoff",
    "EVICTED": "Evicted by Kueue; the Ray cluster is being torn down and it will queue again",
    "SUCCEEDED": "Succeeded",
    "FAILED": "Failed",
    "STOPPED": "Stopped before it finished",
    "DEACTIVATED": "Deactivated by Kueue: it will not run again unless reactivated",
}
SERVICE_PHASE_WORDS = {
    "SUBMITTED": "Submitted; KubeRay or Kueue has not acted on the spec yet",
    "QUEUED": "Queued: its Ray cluster waits for quota in its ClusterQueue",
    "INADMISSIBLE": "Inadmissible: it cannot be admitted until the queue or its quota changes",
    "AWAITING_CHECKS": "Quota reserved: waiting for the ClusterQueue's admission checks",
    "ADMITTED": "Admitted: quota is reserved and the Ray cluster is starting",
    "DEPLOYING": "Deploying: the Ray cluster is ready and Serve deploys the applications",
    "SERVING": "Serving: every application RUNNING, every deployment HEALTHY",
    "PREEMPTED": "Preempted: Kueue evicted its Ray cluster; it will queue again",
    "PODS_NOT_READY": "Evicted: its pods were not ready in time; it will queue again after a backoff",
    "EVICTED": "Evicted by Kueue; it will queue again",
    "DEPLOY_FAILED": "Deploy failed: Serve could not deploy an application",
    "UNHEALTHY": "Unhealthy: Serve reports an application or deployment unhealthy",
    "DEACTIVATED": "Deactivated by Kueue: it will not be admitted again unless reactivated",
    "BLOCKED": "Blocked: Kueue will not admit the new cluster config while the old cluster serves",
    "FAILED": "Failed: KubeRay refused the spec",
}
HIDDEN_OWNER = "a workload of a DAG you cannot read"
FOREIGN_OWNER = "a workload this Airflow has no record of (not submitted by it, or gone before it was seen)"


@dataclass(frozen=True)
class Links:
    """Where the pages link to, inside Airflow's UI (``root`` is the path of ``[api] base_url``)."""

    root: str = ""

    def task_instance(self, identity: AirflowIdentity) -> str:
        return self.root + task_instance_path(
            identity.dag_id, identity.run_id, identity.task_id, identity.map_index
        )

    def kueue_tab(self, identity: AirflowIdentity) -> str:
        return self.root + kueue_tab_path(
            identity.dag_id, identity.run_id, identity.task_id, identity.map_index
        )

    def queue(self, cluster_queue: str) -> str:
        """The queues page scrolled to one ClusterQueue, as a page of Airflow's UI (not the bare iframe)."""
        return f"{self.root}/plugin/{QUEUES_ROUTE}{self.root}{APP_PREFIX}/queues#cq-{quote(cluster_queue, safe='')}"


# ----------------------------------------------------------------------------------------- helpers


def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def _conditions(obj: dict | None) -> dict[str, dict]:
    return {c.get("type"): c for c in ((obj or {}).get("status") or {}).get("conditions") or ()}


def _quantity(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _show(value: Decimal | None) -> str | None:
    """For reading, not for copying into a manifest: "2.5" CPUs, "~8.21G" bytes."""
    return None if value is None else human_quantity(value)


def _priority(workload: dict | None, rayjob: dict | None) -> dict[str, Any]:
    spec = (workload or {}).get("spec") or {}
    ref = spec.get("priorityClassRef") or {}
    name = ref.get("name") or (_meta(rayjob).get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    return {"class": name, "value": spec.get("priority")}


def owner_of(identities: dict[str, AirflowIdentity], job_uid: str | None) -> AirflowIdentity | None:
    return identities.get(job_uid) if job_uid else None


def describe_owner(identity: AirflowIdentity | None, access: Access, links: Links) -> dict[str, Any] | None:
    """The owning task instance with links, or None when the user may not know it (or there is none)."""
    if identity is None or not access.can_read(identity.dag_id):
        return None
    return {
        "dag_id": identity.dag_id,
        "run_id": identity.run_id,
        "task_id": identity.task_id,
        "map_index": identity.map_index,
        "task_instance_url": links.task_instance(identity),
        "kueue_tab_url": links.kueue_tab(identity),
    }


# ----------------------------------------------------------------------------------------- queues


def quota_rows(cluster_queue: dict) -> list[dict]:
    """Per flavor and resource: nominal quota, borrowing and lending limits, admitted usage and reserved
    quota (the ClusterQueue's ``flavorsUsage`` / ``flavorsReservation``), and bar geometry in percent of
    the most the queue can hold (nominal + borrowing limit, or what it holds when that is more)."""
    status = cluster_queue.get("status") or {}

    def totals(field: str) -> dict[tuple[str, str], dict]:
        return {
            (flavor.get("name"), r.get("name")): r
            for flavor in status.get(field) or ()
            for r in flavor.get("resources") or ()
        }

    used, reserved = totals("flavorsUsage"), totals("flavorsReservation")
    rows = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                key = (flavor.get("name"), resource.get("name"))
                nominal = _quantity(resource.get("nominalQuota")) or Decimal(0)
                borrowing = _quantity(resource.get("borrowingLimit"))
                lending = _quantity(resource.get("lendingLimit"))
                usage = _quantity((used.get(key) or {}).get("total")) or Decimal(0)
                held = _quantity((reserved.get(key) or {}).get("total")) or Decimal(0)
                borrowed = _quantity((used.get(key) or {}).get("borrowed")) or max(
                    Decimal(0), usage - nominal
                )
                scale = max(nominal + (borrowing or Decimal(0)), usage, held, Decimal(0))

                def pct(value: Decimal, scale: Decimal = scale) -> float:
                    return round(float(value / scale * 100), 2) if scale else 0.0

                rows.append(
                    {
                        "flavor": key[0],
                        "resource": key[1],
                        "nominal": _show(nominal),
                        "borrowing_limit": _show(borrowing),
                        "lending_limit": _show(lending),
                        "usage": _show(usage),
                        "reserved": _show(held),
                        "borrowed": _show(borrowed),
                        "bar": {
                            "usage_pct": pct(usage),
                            "reserved_pct": pct(held),
                            "nominal_pct": pct(nominal),
                            "lendable_from_pct": None
                            if lending is None
                            else pct(max(nominal - lending, Decimal(0))),
                        },
                    }
                )
    return rows


def _admitted(workload: dict) -> bool:
    conditions = _conditions(workload)
    return (conditions.get("QuotaReserved") or {}).get("status") == "True" and (
        conditions.get("Finished") or {}
    ).get("status") != "True"


def queues_view(
    snapshot: Snapshot,
    pending: dict[str, PendingRead],
    access: Access,
    links: Links,
    now: float | None = None,
) -> dict[str, Any]:
    """The "Kueue queues" page (see the module docstring)."""
    now = time.time() if now is None else now
    rayjobs_by_uid = {_meta(r).get("uid"): r for r in snapshot.rayjobs}
    workloads = {(_meta(w).get("namespace"), _meta(w).get("name")): w for w in snapshot.workloads}
    local_queues: dict[str, list[dict]] = {}
    for lq in snapshot.local_queues:
        cq_name = (lq.get("spec") or {}).get("clusterQueue")
        status = lq.get("status") or {}
        local_queues.setdefault(cq_name, []).append(
            {
                "namespace": _meta(lq).get("namespace"),
                "name": _meta(lq).get("name"),
                "pending": status.get("pendingWorkloads", 0),
                "admitted": status.get("admittedWorkloads", 0),
            }
        )
    queues = []
    for cq in sorted(snapshot.cluster_queues, key=lambda c: _meta(c).get("name") or ""):
        name = _meta(cq).get("name")
        spec, status = cq.get("spec") or {}, cq.get("status") or {}
        active = _conditions(cq).get("Active") or {}
        queues.append(
            {
                "name": name,
                "cohort": spec.get("cohortName") or None,
                "queueing_strategy": spec.get("queueingStrategy") or "BestEffortFIFO",
                "preemption": spec.get("preemption") or {},
                "active": {
                    "status": active.get("status"),
                    "reason": active.get("reason"),
                    "message": active.get("message"),
                },
                "counts": {
                    "pending": status.get("pendingWorkloads", 0),
                    "reserving": status.get("reservingWorkloads", 0),
                    "admitted": status.get("admittedWorkloads", 0),
                },
                "quota": quota_rows(cq),
                "local_queues": sorted(local_queues.get(name, []), key=lambda q: (q["namespace"], q["name"])),
                "pending": _pending(pending.get(name), snapshot, workloads, access, links, now),
                "admitted": _admitted_list(name, snapshot, rayjobs_by_uid, access, links, now),
                "url": links.queue(name),
            }
        )
    cohorts: dict[str, list[str]] = {}
    for queue in queues:
        if queue["cohort"]:
            cohorts.setdefault(queue["cohort"], []).append(queue["name"])
    return {
        "now": to_iso(now),
        "version": snapshot.version,
        "user": access.user_name,
        "cluster": snapshot.health.to_dict() | _iso_times(snapshot.health.to_dict()),
        "namespaces": snapshot.namespaces,
        "cohorts": [{"name": c, "cluster_queues": members} for c, members in sorted(cohorts.items())],
        "cluster_queues": queues,
    }


def _iso_times(health: dict) -> dict:
    return {key: to_iso(health[key]) for key in ("synced_at", "failing_since")}


def _pending(
    read: PendingRead | None,
    snapshot: Snapshot,
    workloads: dict[tuple[str, str], dict],
    access: Access,
    links: Links,
    now: float,
) -> dict[str, Any]:
    """Kueue's pending list, readable entries described, the rest counted."""
    if read is None or read.summary is None:
        return {
            "available": False,
            "error": (read.error if read else None) or "not read yet",
            "fetched_at": None,
            "total": None,
            "items": [],
            "hidden": 0,
        }
    items, hidden = [], 0
    for entry in read.summary.get("items") or ():
        meta = entry.get("metadata") or {}
        job_uid = next(
            (ref.get("uid") for ref in meta.get("ownerReferences") or () if ref.get("kind") == "RayJob"),
            None,
        )
        owner = describe_owner(owner_of(snapshot.identities, job_uid), access, links)
        if owner is None:
            hidden += 1
            continue
        workload = workloads.get((meta.get("namespace"), meta.get("name")))
        created = meta.get("creationTimestamp")
        items.append(
            {
                "position": int(entry.get("positionInClusterQueue", 0)) + 1,
                "position_in_local_queue": int(entry.get("positionInLocalQueue", 0)) + 1,
                "workload": meta.get("name"),
                "namespace": meta.get("namespace"),
                "local_queue": entry.get("localQueueName"),
                "priority": {**_priority(workload, None), "value": entry.get("priority")},
                "created": created,
                "waiting_seconds": round(now - to_epoch(created), 1) if created else None,
                "owner": owner,
            }
        )
    return {
        "available": True,
        "error": read.error,
        "fetched_at": to_iso(read.fetched_at),
        "total": len(read.summary.get("items") or ()),
        "items": items,
        "hidden": hidden,
    }


def _admitted_list(
    cluster_queue: str,
    snapshot: Snapshot,
    rayjobs_by_uid: dict[str, dict],
    access: Access,
    links: Links,
    now: float,
) -> dict[str, Any]:
    items, hidden = [], 0
    for workload in snapshot.workloads:
        admission = (workload.get("status") or {}).get("admission") or {}
        if admission.get("clusterQueue") != cluster_queue or not _admitted(workload):
            continue
        job_uid = (_meta(workload).get("labels") or {}).get(JOB_UID_LABEL)
        owner = describe_owner(owner_of(snapshot.identities, job_uid), access, links)
        if owner is None:
            hidden += 1
            continue
        since = (_conditions(workload).get("QuotaReserved") or {}).get("lastTransitionTime")
        rayjob = rayjobs_by_uid.get(job_uid)
        observation = observe(rayjob, workload) if rayjob else None
        items.append(
            {
                "workload": _meta(workload).get("name"),
                "namespace": _meta(workload).get("namespace"),
                "local_queue": (workload.get("spec") or {}).get("queueName"),
                "priority": _priority(workload, rayjob),
                "admitted_at": since,
                "age_seconds": round(now - to_epoch(since), 1) if since else None,
                "phase": observation.phase.value if observation else None,
                "owner": owner,
            }
        )
    items.sort(key=lambda item: item["admitted_at"] or "")
    return {"items": items, "hidden": hidden}


# ----------------------------------------------------------------------------------------- task


@dataclass(frozen=True)
class TaskRef:
    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def identity(self) -> AirflowIdentity:
        return AirflowIdentity(self.dag_id, self.task_id, self.run_id, self.map_index)


def task_view(
    ref: TaskRef,
    *,
    rayjob_xcom: dict | None,
    timeline_xcom: dict | None,
    dashboard_link: str | None,
    snapshot: Snapshot,
    live_timeline: dict | None,
    pending: PendingRead | None,
    access: Access,
    links: Links,
    now: float | None = None,
    rayservice_xcom: dict | None = None,
) -> dict[str, Any]:
    """The Kueue tab of one task instance. The caller has checked the user may read ``ref.dag_id``.

    A deploy task (``rayservice`` XCom, pushed before it waits) is shown by ``service_task_view``."""
    now = time.time() if now is None else now
    base = {
        "now": to_iso(now),
        "version": snapshot.version,
        "user": access.user_name,
        "cluster": snapshot.health.to_dict() | _iso_times(snapshot.health.to_dict()),
        "task": {**vars(ref), "url": links.task_instance(ref.identity())},
    }
    if (not rayjob_xcom or not rayjob_xcom.get("name")) and (rayservice_xcom or {}).get("name"):
        return base | service_task_view(ref, rayservice_xcom, snapshot, pending, access, links)
    if not rayjob_xcom or not rayjob_xcom.get("name"):
        return base | {
            "rayjob": None,
            "message": "This task instance has not submitted or waited for a RayJob (it has no 'rayjob' XCom).",
        }
    name, namespace = rayjob_xcom.get("name"), rayjob_xcom.get("namespace")
    rayjob = _find_rayjob(snapshot, rayjob_xcom)
    uid = rayjob_xcom.get("uid") or _meta(rayjob).get("uid")
    workload = next(
        (
            w
            for w in snapshot.workloads
            if _meta(w).get("namespace") == namespace
            and (_meta(w).get("labels") or {}).get(JOB_UID_LABEL) == uid
        ),
        None,
    )
    observation = observe(rayjob, workload) if rayjob is not None else None
    local_queue = _local_queue(rayjob, rayjob_xcom) or ((workload or {}).get("spec") or {}).get("queueName")
    cluster_queue = (observation.cluster_queue if observation else None) or task_cluster_queue(
        snapshot, rayjob_xcom
    )
    priority = _priority(workload, rayjob)
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
            "workload": _meta(workload).get("name") or rayjob_xcom.get("workload_name"),
            "local_queue": local_queue,
            "cluster_queue": cluster_queue,
            "cluster_queue_url": links.queue(cluster_queue) if cluster_queue else None,
            "priority": priority,
            "submitted_by": describe_owner(snapshot.identities.get(uid or ""), access, links),
        },
        "phase": _phase(observation, timeline),
        "position": _position(pending, workload),
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


def find_rayservice(snapshot: Snapshot, rayservice_xcom: dict) -> dict | None:
    """The task's RayService in the cache: same name and namespace, and the same uid when the XCom has one
    (a RayService created again under the name is not the one this task deployed)."""
    name, namespace = rayservice_xcom.get("name"), rayservice_xcom.get("namespace")
    uid = rayservice_xcom.get("uid")
    for service in snapshot.rayservices:
        meta = _meta(service)
        if (
            meta.get("name") == name
            and meta.get("namespace") == namespace
            and (not uid or meta.get("uid") == uid)
        ):
            return service
    return None


def service_cluster_queue(snapshot: Snapshot, rayservice_xcom: dict) -> str | None:
    """The ClusterQueue a deploy task's RayService is admitted to, else the one its LocalQueue feeds."""
    service = find_rayservice(snapshot, rayservice_xcom)
    namespace = rayservice_xcom.get("namespace")
    if service is not None:
        workloads = [w for w in snapshot.workloads if _meta(w).get("namespace") == namespace]
        admitted_to = observe_service(service, workloads).cluster_queue
        if admitted_to:
            return admitted_to
    local_queue = (_meta(service).get("labels") or {}).get(QUEUE_LABEL) or rayservice_xcom.get("queue")
    for lq in snapshot.local_queues:
        if _meta(lq).get("namespace") == namespace and _meta(lq).get("name") == local_queue:
            return (lq.get("spec") or {}).get("clusterQueue")
    return None


def service_task_view(
    ref: TaskRef,
    rayservice_xcom: dict,
    snapshot: Snapshot,
    pending: PendingRead | None,
    access: Access,
    links: Links,
) -> dict[str, Any]:
    """A deploy task's RayService as the deploy operator's trigger sees it (``observe_service``): the
    Workload Kueue admits (the RayService's own, or its target RayCluster's), queues, priority, phase,
    position while queued, and the active and pending Ray clusters.

    Once an upgrade by a later run rewrote the RayService, the tab shows its current state and names the
    run that now holds it (under the same reading rule as a preemptor)."""
    name, namespace = rayservice_xcom["name"], rayservice_xcom.get("namespace")
    service = find_rayservice(snapshot, rayservice_xcom)
    workloads = [w for w in snapshot.workloads if _meta(w).get("namespace") == namespace]
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
        (w for w in workloads if observation and _meta(w).get("name") == observation.workload_name), None
    )
    local_queue = (
        (_meta(service).get("labels") or {}).get(QUEUE_LABEL)
        or rayservice_xcom.get("queue")
        or ((workload or {}).get("spec") or {}).get("queueName")
    )
    cluster_queue = service_cluster_queue(snapshot, rayservice_xcom)
    priority = _priority(workload, service)
    priority["class"] = priority["class"] or rayservice_xcom.get("priority")
    holder = AirflowIdentity.from_annotations(_meta(service).get("annotations"))
    now_held_by = None
    if holder is not None and (holder.dag_id, holder.run_id) != (ref.dag_id, ref.run_id):
        now_held_by = describe_owner(holder, access, links) or {"description": HIDDEN_OWNER}
    recorded = rayservice_xcom.get("timeline") or {}
    return {
        "rayjob": None,
        "rayservice": {
            "name": name,
            "namespace": namespace,
            "uid": rayservice_xcom.get("uid") or _meta(service).get("uid"),
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
        "phase": _service_phase(observation, recorded),
        "position": _position(pending, workload)
        if observation and observation.phase in SERVICE_POSITION_PHASES
        else None,
        "timeline": {
            "source": "xcom" if recorded else None,
            "queued_seconds": recorded.get("queued_seconds"),
            "starting_seconds": recorded.get("starting_seconds"),
            "preemption_count": recorded.get("preemption_count"),
            "spans": [],
        },
        "links": {"ray_dashboard": None, "queue": links.queue(cluster_queue) if cluster_queue else None},
    }


def _service_phase(observation: ServiceObservation | None, recorded: dict) -> dict[str, Any]:
    if observation is None:
        final = recorded.get("final_phase") or recorded.get("phase")
        return {
            "phase": final,
            "words": (SERVICE_PHASE_WORDS.get(final, final) if final else "Unknown")
            + " (the RayService no longer exists in the cluster)",
            "reason": "",
            "message": "",
            "terminal": True,
        }
    phase = observation.phase.value
    return {
        "phase": phase,
        "words": SERVICE_PHASE_WORDS.get(phase, phase.replace("_", " ").capitalize()),
        "reason": observation.reason,
        "message": observation.message,
        "terminal": observation.terminal,
    }


def _find_rayjob(snapshot: Snapshot, rayjob_xcom: dict) -> dict | None:
    """The task's RayJob in the cache: same name and namespace, and the same uid when the XCom has one
    (a later RayJob of the same name is another task try's)."""
    name, namespace, uid = rayjob_xcom.get("name"), rayjob_xcom.get("namespace"), rayjob_xcom.get("uid")
    for rayjob in snapshot.rayjobs:
        meta = _meta(rayjob)
        if (
            meta.get("name") == name
            and meta.get("namespace") == namespace
            and (not uid or meta.get("uid") == uid)
        ):
            return rayjob
    return None


def _local_queue(rayjob: dict | None, rayjob_xcom: dict) -> str | None:
    return (_meta(rayjob).get("labels") or {}).get(QUEUE_LABEL) or rayjob_xcom.get("queue")


def task_cluster_queue(snapshot: Snapshot, rayjob_xcom: dict) -> str | None:
    """The ClusterQueue a task's RayJob queues in: its LocalQueue's (as the cache knows it), else what the
    task recorded."""
    namespace = rayjob_xcom.get("namespace")
    local_queue = _local_queue(_find_rayjob(snapshot, rayjob_xcom), rayjob_xcom)
    for lq in snapshot.local_queues:
        if _meta(lq).get("namespace") == namespace and _meta(lq).get("name") == local_queue:
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
    if observation is None:
        final = (timeline or {}).get("final_phase") or (timeline or {}).get("phase")
        return {
            "phase": final,
            "words": (PHASE_WORDS.get(final, final) if final else "Unknown")
            + " (the RayJob no longer exists in the cluster)",
            "reason": "",
            "message": "",
            "terminal": True,
        }
    phase = observation.phase.value
    return {
        "phase": phase,
        "words": PHASE_WORDS.get(phase, phase.replace("_", " ").capitalize()),
        "reason": observation.reason,
        "message": observation.message,
        "terminal": observation.phase in TERMINAL_PHASES,
    }


def _position(read: PendingRead | None, workload: dict | None) -> dict[str, Any] | None:
    if read is None or read.summary is None or workload is None:
        return None
    items = read.summary.get("items") or ()
    for entry in items:
        meta = entry.get("metadata") or {}
        if meta.get("name") == _meta(workload).get("name") and meta.get("namespace") == _meta(workload).get(
            "namespace"
        ):
            return {
                "in_cluster_queue": int(entry.get("positionInClusterQueue", 0)) + 1,
                "in_local_queue": int(entry.get("positionInLocalQueue", 0)) + 1,
                "pending_in_cluster_queue": len(items),
                "fetched_at": to_iso(read.fetched_at),
            }
    return None


def _preemptor(job_uid: str | None, snapshot: Snapshot, access: Access, links: Links) -> dict[str, Any]:
    identity = snapshot.identities.get(job_uid or "")
    if identity is None:
        return {"known": False, "description": FOREIGN_OWNER if job_uid else "not named by Kueue"}
    owner = describe_owner(identity, access, links)
    if owner is None:
        return {"known": False, "description": HIDDEN_OWNER}
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
