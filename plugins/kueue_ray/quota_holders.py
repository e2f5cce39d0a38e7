"""What held the quota when a wait for admission timed out, in words for the failure message (pure).

"not admitted within queue_timeout" alone leaves the user guessing whether the queue was busy or the
request can never fit next to what runs there (e.g. a 2-GPU request while the DAG's own RayService holds
the team's GPU). So the message adds, from one read of the ClusterQueue and of the Workloads in the
RayJob's namespace: the ClusterQueue's usage against its nominal quota per flavor and resource, the
admitted Workloads there with their priority, and whether this task's priority could preempt each of
them under the ClusterQueue's ``preemption.withinClusterQueue`` policy.

Example::

    >>> cq = {"metadata": {"name": "team-a"},
    ...       "spec": {"preemption": {"withinClusterQueue": "LowerPriority"},
    ...                "resourceGroups": [{"flavors": [{"name": "gpu", "resources": [
    ...                    {"name": "nvidia.com/gpu", "nominalQuota": "1"}]}]}]},
    ...       "status": {"admittedWorkloads": 1, "flavorsReservation": [{"name": "gpu", "resources": [
    ...                    {"name": "nvidia.com/gpu", "total": "1"}]}]}}
    >>> held = {"metadata": {"name": "rayservice-serve-1a2b3", "creationTimestamp": "2026-12-01T10:00:00Z"},
    ...         "spec": {"priorityClassRef": {"name": "prod-priority"}, "priority": 1000},
    ...         "status": {"admission": {"clusterQueue": "team-a"},
    ...                    "conditions": [{"type": "Admitted", "status": "True"}]}}
    >>> print(quota_holders(cq, [held], own_priority=100))
    ClusterQueue team-a at the end: nvidia.com/gpu 1 of 1 (flavor gpu); admitted: rayservice-serve-1a2b3 (prod-priority 1000, not preemptible by this task's priority 100)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from decimal import Decimal

from kueue_ray.quantity import parse_quantity, readable_amount
from kueue_ray.verdicts import Verdict
from kueue_ray.workload import is_finished

MAX_LISTED = 5
"""Admitted Workloads named in the message; the rest are counted."""


def usage(cluster_queue: dict, admitted: Iterable[dict] = ()) -> list[str]:
    """``nvidia.com/gpu 1 of 1 (flavor gpu)`` per flavor and resource with a nominal quota: what is
    reserved against ``nominalQuota``, the greater of the ClusterQueue's ``status.flavorsReservation``
    (else ``flavorsUsage``) and what the ``admitted`` Workloads' admissions charge. Kueue writes the
    ClusterQueue's status a moment after it admits (Kueue v0.19.2 still reported 0 a second after
    admitting a Workload that filled the queue), so the Workloads read at the same time count too.

    >>> cq = {"spec": {"resourceGroups": [{"flavors": [{"name": "gpu", "resources": [
    ...     {"name": "nvidia.com/gpu", "nominalQuota": "1"}]}]}]}, "status": {}}
    >>> held = {"status": {"admission": {"podSetAssignments": [
    ...     {"flavors": {"nvidia.com/gpu": "gpu"}, "resourceUsage": {"nvidia.com/gpu": "1"}}]}}}
    >>> usage(cq), usage(cq, [held])
    (['nvidia.com/gpu 0 of 1 (flavor gpu)'], ['nvidia.com/gpu 1 of 1 (flavor gpu)'])
    """
    status = cluster_queue.get("status") or {}
    reported: dict[tuple[str, str], Decimal] = {}
    for flavor in status.get("flavorsReservation") or status.get("flavorsUsage") or ():
        for resource in flavor.get("resources") or ():
            reported[(flavor.get("name"), resource.get("name"))] = parse_quantity(
                resource.get("total") or "0"
            )
    # a resource the admission names no flavor for is charged under None and matches no nominal quota
    charged: dict[tuple[str | None, str], Decimal] = {}
    for workload in admitted:
        for assignment in ((workload.get("status") or {}).get("admission") or {}).get(
            "podSetAssignments"
        ) or ():
            flavors = assignment.get("flavors") or {}
            for resource, amount in (assignment.get("resourceUsage") or {}).items():
                key = (flavors.get(resource), resource)
                charged[key] = charged.get(key, Decimal(0)) + parse_quantity(amount)
    lines = []
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                key = (flavor.get("name"), resource.get("name"))
                nominal = parse_quantity(resource.get("nominalQuota") or "0")
                taken = max(reported.get(key, Decimal(0)), charged.get(key, Decimal(0)))
                lines.append(
                    f"{key[1]} {readable_amount(key[1], taken)} of {readable_amount(key[1], nominal)} (flavor {key[0]})"
                )
    return lines


def can_preempt(policy: str, own_priority: int | None, own_created: str | None, other: Mapping) -> bool:
    """Whether Kueue's ``withinClusterQueue`` policy lets a Workload of ``own_priority`` preempt ``other``."""
    if own_priority is None or policy not in ("LowerPriority", "LowerOrNewerEqualPriority"):
        return False
    theirs = _priority(other)
    if theirs < own_priority:
        return True
    created = (other.get("metadata") or {}).get("creationTimestamp") or ""
    return bool(
        policy == "LowerOrNewerEqualPriority"
        and theirs == own_priority
        and own_created
        and created > own_created
    )


def quota_holders(
    cluster_queue: dict | None,
    workloads: Iterable[dict],
    *,
    own_priority: int | None,
    own_created: str | None = None,
) -> str | None:
    """The sentence for the failure message; None when the ClusterQueue could not be read."""
    if not cluster_queue:
        return None
    name = cluster_queue["metadata"]["name"]
    policy = ((cluster_queue.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue") or "Never"
    admitted = [w for w in workloads if _admitted_in(w, name)]
    admitted.sort(key=lambda w: (-_priority(w), (w.get("metadata") or {}).get("name", "")))
    told = []
    for workload in admitted[:MAX_LISTED]:
        spec = workload.get("spec") or {}
        klass = (spec.get("priorityClassRef") or {}).get("name") or "no priority class"
        preemptible = can_preempt(policy, own_priority, own_created, workload)
        verdict = "preemptible" if preemptible else "not preemptible"
        told.append(
            f"{workload['metadata']['name']} ({klass} {_priority(workload)}, {verdict} by this task's "
            f"priority {own_priority if own_priority is not None else 'unknown'})"
        )
    sentence = f"ClusterQueue {name} at the end: {', '.join(usage(cluster_queue, admitted)) or 'no quota'}"
    if told:
        sentence += "; admitted: " + ", ".join(told)
    total = (cluster_queue.get("status") or {}).get("admittedWorkloads")
    others = (total or 0) - len(told)
    if others > 0:
        sentence += f" (+{others} more admitted, in other namespaces or not listed)"
    if policy == "Never" and admitted:
        sentence += "; it never preempts within itself (preemption.withinClusterQueue: Never)"
    return sentence


def _priority(workload: Mapping) -> int:
    return int((workload.get("spec") or {}).get("priority") or 0)


def _admitted_in(workload: dict, cluster_queue: str) -> bool:
    status = workload.get("status") or {}
    if (status.get("admission") or {}).get("clusterQueue") != cluster_queue:
        return False
    return not is_finished(workload)


def with_quota_holders(
    verdict: Verdict, cluster_queue: dict | None, workloads: list[dict], own_workload: str | None
) -> Verdict:
    """``verdict`` (a queue timeout) with what held the ClusterQueue's quota at the end appended
    (``kueue_ray.quota_holders``; this task's priority from its Workload, named ``own_workload``, among
    ``workloads``); unchanged when the ClusterQueue could not be read."""
    own = next((w for w in workloads if w["metadata"].get("name") == own_workload), {})
    told = quota_holders(
        cluster_queue,
        workloads,
        own_priority=(own.get("spec") or {}).get("priority"),
        own_created=(own.get("metadata") or {}).get("creationTimestamp"),
    )
    return replace(verdict, message=f"{verdict.message}. {told}") if told else verdict
