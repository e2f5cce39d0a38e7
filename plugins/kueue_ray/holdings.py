"""What admitted Workloads hold and what a pending one asks for, per flavor and resource (pure).

Read from Kueue's own fields: a pending Workload's ``status.resourceRequests`` (else its pod sets), an
admitted one's ``status.admission.podSetAssignments``. A triggerer's hub keeps a ``Holding`` per admitted
Workload of a namespace as its watch brings each version (``kueue_ray.hub``), so "who holds the quota"
(``kueue_ray.why_queued``) costs thousands of queued tasks no pass over every Workload each.

    >>> held = {"metadata": {"name": "wl"}, "status": {"admission": {"clusterQueue": "team-a-cq",
    ...     "podSetAssignments": [{"flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1500m"}}]}}}
    >>> holding_of(held).usage
    {('default', 'cpu'): Decimal('1.500')}
    >>> holding_of({"metadata": {"name": "pending"}}) is None
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from kueue_ray.quantity import parse_quantity
from kueue_ray.workload import is_finished

FlavorResource = tuple[str, str]


def requests_of(workload: Mapping) -> dict[str, Decimal]:
    """The total request of a pending Workload per resource (Kueue's ``status.resourceRequests``, else
    its pod sets' containers: count x (sum of containers, at least each init container))."""
    totals: dict[str, Decimal] = {}
    requests = (workload.get("status") or {}).get("resourceRequests")
    if requests:
        for pod_set in requests:
            for resource, amount in (pod_set.get("resources") or {}).items():
                totals[resource] = totals.get(resource, Decimal(0)) + parse_quantity(amount)
        return totals
    for pod_set in (workload.get("spec") or {}).get("podSets") or ():
        pod_spec = ((pod_set.get("template") or {}).get("spec")) or {}
        per_pod: dict[str, Decimal] = {}
        for container in pod_spec.get("containers") or ():
            for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
                per_pod[resource] = per_pod.get(resource, Decimal(0)) + parse_quantity(amount)
        for container in pod_spec.get("initContainers") or ():
            for resource, amount in ((container.get("resources") or {}).get("requests") or {}).items():
                per_pod[resource] = max(per_pod.get(resource, Decimal(0)), parse_quantity(amount))
        for resource, amount in per_pod.items():
            totals[resource] = totals.get(resource, Decimal(0)) + amount * int(pod_set.get("count", 1))
    return totals


@dataclass(frozen=True, slots=True)
class Holding:
    """What an admitted, unfinished Workload holds, read once per version of it (``holding_of``): a
    triggerer's hub keeps one per Workload of the namespace as its watch brings them, so the questions of
    thousands of queued tasks cost no rereading of every Workload each (bench/README.md, issue 33)."""

    workload: Mapping
    cluster_queue: str
    usage: dict[FlavorResource, Decimal]


def holding_of(workload: Mapping) -> Holding | None:
    """The quota ``workload`` holds; None when it holds none (not admitted, or finished)."""
    admitted_to = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
    if admitted_to is None or is_finished(workload):
        return None
    return Holding(workload, admitted_to, usage_of(workload))


def holdings_of(workloads: Iterable[Mapping]) -> list[Holding]:
    """``holding_of`` each Workload that holds quota."""
    return [h for h in map(holding_of, workloads) if h is not None]


def usage_of(workload: Mapping) -> dict[FlavorResource, Decimal]:
    """What an admitted Workload uses per (flavor, resource), from its admission."""
    used: dict[FlavorResource, Decimal] = {}
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or ():
        flavors = assignment.get("flavors") or {}
        for resource, amount in (assignment.get("resourceUsage") or {}).items():
            key = (flavors.get(resource, ""), resource)
            used[key] = used.get(key, Decimal(0)) + parse_quantity(amount)
    return used
