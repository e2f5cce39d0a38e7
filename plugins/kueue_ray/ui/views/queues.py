"""The "Kueue queues" page: every cohort with its members' usage; every ClusterQueue with its cohort, its
quota per flavor and resource (nominal quota, borrowing and lending limits, what is admitted and
reserved), its preemption policy in words (``kueue_ray.ui.policy``), its pending workloads in Kueue's
order with their positions, and its admitted workloads with their age and, for one MultiKueue dispatched,
the worker cluster running it (``kueue_ray.multikueue``); each workload with its owner and what it
requests (``kueue_ray.ui.views.holders``).

Apart from the task views because it reads the cluster by ClusterQueue, not by one task's objects, and
shares with them only ``kueue_ray.ui.views.common``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from kueue_ray.multikueue import worker_cluster
from kueue_ray.quantity import QuantityError, add_resources, parse_quantity, readable_amount
from kueue_ray.status import observe
from kueue_ray.timeline import to_epoch, to_iso
from kueue_ray.ui.access import Access
from kueue_ray.ui.policy import cohort_usage, may_preempt_words, preemption_words
from kueue_ray.ui.snapshot import PendingRead, Snapshot
from kueue_ray.ui.views.common import Links, conditions_of, iso_times, metadata_of, priority_of
from kueue_ray.ui.views.holders import (
    attribute,
    job_uid,
    readable_requests,
    requested,
    service_row_phase,
    workload_requests,
)
from kueue_ray.workload import holds_quota, quota_reserved_since


def _quantity(value: Any) -> Decimal | None:
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _show(resource: str, value: Decimal | None) -> str | None:
    """For reading, not for copying into a manifest: "2.5" CPUs, "7.65Gi" bytes (as the task log)."""
    return None if value is None else readable_amount(resource, value)


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
                        "nominal": _show(key[1], nominal),
                        "borrowing_limit": _show(key[1], borrowing),
                        "lending_limit": _show(key[1], lending),
                        "usage": _show(key[1], usage),
                        "reserved": _show(key[1], held),
                        "borrowed": _show(key[1], borrowed),
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


def queues_view(
    snapshot: Snapshot,
    pending: dict[str, PendingRead],
    access: Access,
    links: Links,
    now: float | None = None,
) -> dict[str, Any]:
    """The "Kueue queues" page (see the module docstring)."""
    now = time.time() if now is None else now
    rayjobs_by_uid = {metadata_of(r).get("uid"): r for r in snapshot.rayjobs}
    workloads = {(metadata_of(w).get("namespace"), metadata_of(w).get("name")): w for w in snapshot.workloads}
    local_queues: dict[str, list[dict]] = {}
    for lq in snapshot.local_queues:
        cq_name = (lq.get("spec") or {}).get("clusterQueue")
        status = lq.get("status") or {}
        local_queues.setdefault(cq_name, []).append(
            {
                "namespace": metadata_of(lq).get("namespace"),
                "name": metadata_of(lq).get("name"),
                "pending": status.get("pendingWorkloads", 0),
                "admitted": status.get("admittedWorkloads", 0),
            }
        )
    holding, priorities = quota_holders_by_queue(snapshot.workloads)
    queues = []
    for cq in sorted(snapshot.cluster_queues, key=lambda c: metadata_of(c).get("name") or ""):
        name = metadata_of(cq).get("name")
        spec, status = cq.get("spec") or {}, cq.get("status") or {}
        active = conditions_of(cq).get("Active") or {}
        queues.append(
            {
                "name": name,
                "cohort": spec.get("cohortName") or None,
                "queueing_strategy": spec.get("queueingStrategy") or "BestEffortFIFO",
                "preemption": spec.get("preemption") or {},
                "preemption_words": preemption_words(cq, snapshot.cluster_queues, priorities),
                "may_preempt": may_preempt_words(cq, snapshot.cluster_queues),
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
                "admitted": _admitted_list(
                    holding.get(name, ()), snapshot, rayjobs_by_uid, access, links, now
                ),
                "url": links.queue(name),
            }
        )
    cohorts: dict[str, list[dict]] = {}
    for cq in snapshot.cluster_queues:
        cohort = (cq.get("spec") or {}).get("cohortName")
        if cohort:
            cohorts.setdefault(cohort, []).append(cq)
    return {
        "now": to_iso(now),
        "version": snapshot.version,
        "user": access.user_name,
        "cluster": snapshot.health.to_dict() | iso_times(snapshot.health.to_dict()),
        "namespaces": snapshot.namespaces,
        "cohorts": [cohort_usage(c, members) for c, members in sorted(cohorts.items())],
        "cluster_queues": queues,
    }


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
    items, hidden, hidden_totals = [], 0, {}
    for entry in read.summary.get("items") or ():
        meta = entry.get("metadata") or {}
        workload = workloads.get((meta.get("namespace"), meta.get("name")))
        owner = attribute(meta, snapshot, access, links)
        if owner is None:
            hidden += 1
            hidden_totals = add_resources(hidden_totals, requested(workload))
            continue
        created = meta.get("creationTimestamp")
        items.append(
            {
                "position": int(entry.get("positionInClusterQueue", 0)) + 1,
                "position_in_local_queue": int(entry.get("positionInLocalQueue", 0)) + 1,
                "workload": meta.get("name"),
                "namespace": meta.get("namespace"),
                "local_queue": entry.get("localQueueName"),
                "priority": {**priority_of(workload, None), "value": entry.get("priority")},
                "created": created,
                "waiting_seconds": round(now - to_epoch(created), 1) if created else None,
                "requests": workload_requests(workload),
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
        "hidden_requests": readable_requests(hidden_totals),
    }


def quota_holders_by_queue(workloads: list[dict]) -> tuple[dict[str, list[dict]], dict[str, int]]:
    """(ClusterQueue name -> the Workloads holding its quota, priority class -> value as the Workloads
    carry them (``priorityClassRef``, ``priority``): the classes the policy sentences speak of), in one pass
    over the cluster's Workloads (a cluster that has run for weeks keeps thousands of finished ones, which each queue
    would scan again)."""
    holding: dict[str, list[dict]] = {}
    priorities: dict[str, int] = {}
    for workload in workloads:
        spec = workload.get("spec") or {}
        priority = spec.get("priority")
        if isinstance(priority, int) and (name := (spec.get("priorityClassRef") or {}).get("name")):
            priorities[name] = priority
        cluster_queue = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if cluster_queue and holds_quota(workload):
            holding.setdefault(cluster_queue, []).append(workload)
    return holding, priorities


def _admitted_list(
    holders: Iterable[dict],
    snapshot: Snapshot,
    rayjobs_by_uid: dict[str, dict],
    access: Access,
    links: Links,
    now: float,
) -> dict[str, Any]:
    items, hidden, hidden_totals = [], 0, {}
    for workload in holders:
        owner = attribute(metadata_of(workload), snapshot, access, links)
        if owner is None:
            hidden += 1
            hidden_totals = add_resources(hidden_totals, requested(workload))
            continue
        since = quota_reserved_since(workload)
        rayjob = rayjobs_by_uid.get(job_uid(metadata_of(workload)))
        observation = observe(rayjob, workload) if rayjob else None
        items.append(
            {
                "workload": metadata_of(workload).get("name"),
                "namespace": metadata_of(workload).get("namespace"),
                "local_queue": (workload.get("spec") or {}).get("queueName"),
                "priority": priority_of(workload, rayjob),
                "admitted_at": since,
                "age_seconds": round(now - to_epoch(since), 1) if since else None,
                "phase": observation.phase.value
                if observation
                else service_row_phase(workload, owner, snapshot),
                "worker_cluster": worker_cluster(workload),
                "requests": workload_requests(workload),
                "owner": owner,
            }
        )
    items.sort(key=lambda item: item["admitted_at"] or "")
    return {"items": items, "hidden": hidden, "hidden_requests": readable_requests(hidden_totals)}
