"""The most a ClusterQueue can ever admit, per flavor and resource, counting cohort borrowing.

Kueue never rejects a Workload that is bigger than its ClusterQueue can ever hold: it leaves it pending
forever with "... > maximum capacity (N)". The operator's preflight computes the same maximum *before*
creating anything, so such a RayJob fails at submission with a message that names the fix instead of
waiting in a queue for good.

The math is Kueue's own for a ClusterQueue's maximum capacity (its ``potentialAvailable``), evaluated over the cohort tree
built from ClusterQueue and Cohort objects as the API returns them (plain dicts, v1beta2):

* ``subtree_quota``: a ClusterQueue's nominal quota; a cohort's own nominal plus what each child lends
  to it (``child.subtree_quota - child.guaranteed``).
* ``guaranteed``: the part a node keeps for itself, ``max(0, subtree_quota - lendingLimit)`` when a
  lendingLimit is set, otherwise 0 (everything is lent to the parent).
* ``potential_available``: the root cohort offers its whole subtree quota; any other node offers what it
  keeps plus what its parent can offer, capped at ``subtree_quota + borrowingLimit`` when that is set.
  A ClusterQueue without a cohort offers exactly its nominal quota.

Pure: no I/O, no Airflow, no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kueue_ray.quantity import parse_quantity, readable_amount

FlavorResource = tuple[str, str]


@dataclass(frozen=True)
class Quota:
    nominal: Decimal
    borrowing_limit: Decimal | None = None
    lending_limit: Decimal | None = None


@dataclass
class _Node:
    """A ClusterQueue or a cohort in the quota tree."""

    name: str
    parent: str | None
    quotas: dict[FlavorResource, Quota] = field(default_factory=dict)
    children: list[_Node] = field(default_factory=list)


def quotas_of(spec: Mapping) -> dict[FlavorResource, Quota]:
    """Read ``spec.resourceGroups`` of a ClusterQueue or a Cohort into (flavor, resource) -> Quota."""
    quotas: dict[FlavorResource, Quota] = {}
    for group in spec.get("resourceGroups") or ():
        for flavor in group.get("flavors") or ():
            for resource in flavor.get("resources") or ():
                quotas[(flavor["name"], resource["name"])] = Quota(
                    nominal=parse_quantity(resource.get("nominalQuota", "0")),
                    borrowing_limit=_optional_quantity(resource.get("borrowingLimit")),
                    lending_limit=_optional_quantity(resource.get("lendingLimit")),
                )
    return quotas


def max_capacity(
    cluster_queue: Mapping,
    *,
    cluster_queues: Iterable[Mapping] = (),
    cohorts: Iterable[Mapping] = (),
) -> dict[str, dict[str, Decimal]]:
    """Maximum capacity of ``cluster_queue`` as ``{flavor: {resource: amount}}``.

    ``cluster_queues`` are all ClusterQueues of the cluster (the ones sharing a cohort lend quota);
    ``cohorts`` are the Cohort objects (a cohort named only by ``cohortName`` is an implicit root without
    quota of its own). Only the flavor/resource pairs the ClusterQueue lists are returned: Kueue admits
    nothing else through it.
    """
    name = cluster_queue["metadata"]["name"]
    nodes = _build_tree(cluster_queue, cluster_queues, cohorts)
    queue = nodes[("ClusterQueue", name)]
    capacity: dict[str, dict[str, Decimal]] = {}
    for flavor, resource in queue.quotas:
        amount = _potential_available(queue, (flavor, resource), nodes, seen=set())
        capacity.setdefault(flavor, {})[resource] = amount
    return capacity


def best_flavor_capacity(capacity: Mapping[str, Mapping[str, Decimal]], resource: str) -> Decimal | None:
    """The largest amount of ``resource`` any single flavor offers, or None when no flavor covers it.

    All pods of one pod set land in one flavor, so this bounds what a single pod set may request.
    """
    amounts = [per_resource[resource] for per_resource in capacity.values() if resource in per_resource]
    return max(amounts) if amounts else None


def total_capacity(capacity: Mapping[str, Mapping[str, Decimal]], resource: str) -> Decimal | None:
    """The sum over flavors of ``resource``: a bound for the whole Workload when pod sets spread out."""
    amounts = [per_resource[resource] for per_resource in capacity.values() if resource in per_resource]
    return sum(amounts, Decimal(0)) if amounts else None


@dataclass(frozen=True)
class Shortfall:
    """Why a Workload can never be admitted through its ClusterQueue, and what to change: kept apart so
    that the preflight error can carry them in its own message and ``fix`` fields."""

    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.problem}; {self.fix}"


def queue_fix(
    why: Shortfall, *, fitting_queues: Iterable[str] = (), other_setup: str | None = None
) -> Shortfall:
    """The fix for a RayJob its LocalQueue can never admit, starting with what applies to that queue.

    ``fitting_queues``: LocalQueues of the same namespace whose ClusterQueue could admit it (the first thing
    to try: nothing in the cluster needs changing); ``other_setup``: where it would go in a queue setup that
    is not installed (``kueue_ray.params.QUEUE_ALTERNATIVES``). The quota fix stays as the last resort.

    >>> why = Shortfall("RayJob needs 8 nvidia.com/gpu", "raise nominalQuota or request less nvidia.com/gpu")
    >>> queue_fix(why, fitting_queues=["team-a", "team-b"]).fix
    'use LocalQueue team-a or team-b, whose ClusterQueue can admit it; or raise nominalQuota or request less nvidia.com/gpu'
    """
    fitting = sorted(fitting_queues)
    if fitting:
        fix = f"use LocalQueue {' or '.join(fitting)}, whose ClusterQueue can admit it; or {why.fix}"
    elif other_setup:
        fix = f"use {other_setup}; or {why.fix}"
    else:
        return why
    return Shortfall(problem=why.problem, fix=fix)


def _optional_quantity(value: object) -> Decimal | None:
    return None if value is None else parse_quantity(value)


def _build_tree(
    cluster_queue: Mapping, cluster_queues: Iterable[Mapping], cohorts: Iterable[Mapping]
) -> dict[tuple[str, str], _Node]:
    nodes: dict[tuple[str, str], _Node] = {}
    queues = {q["metadata"]["name"]: q for q in cluster_queues}
    queues[cluster_queue["metadata"]["name"]] = cluster_queue
    for queue_name, queue in queues.items():
        spec = queue.get("spec") or {}
        nodes[("ClusterQueue", queue_name)] = _Node(
            name=queue_name, parent=spec.get("cohortName") or None, quotas=quotas_of(spec)
        )
    for cohort in cohorts:
        spec = cohort.get("spec") or {}
        cohort_name = cohort["metadata"]["name"]
        nodes[("Cohort", cohort_name)] = _Node(
            name=cohort_name, parent=spec.get("parentName") or None, quotas=quotas_of(spec)
        )
    # A cohortName/parentName without an object is an implicit cohort without quota of its own.
    for node in list(nodes.values()):
        if node.parent and ("Cohort", node.parent) not in nodes:
            nodes[("Cohort", node.parent)] = _Node(name=node.parent, parent=None)
    for node in nodes.values():
        if node.parent:
            nodes[("Cohort", node.parent)].children.append(node)
    return nodes


def _subtree_quota(node: _Node, fr: FlavorResource, seen: frozenset[int] = frozenset()) -> Decimal:
    own = node.quotas[fr].nominal if fr in node.quotas else Decimal(0)
    if id(node) in seen:  # a parentName cycle: Kueue marks such cohorts inactive; count nothing twice
        return Decimal(0)
    seen = seen | {id(node)}
    lent = sum(
        (_subtree_quota(child, fr, seen) - _guaranteed(child, fr, seen) for child in node.children),
        Decimal(0),
    )
    return own + lent


def _guaranteed(node: _Node, fr: FlavorResource, seen: frozenset[int] = frozenset()) -> Decimal:
    quota = node.quotas.get(fr)
    if quota is None or quota.lending_limit is None:
        return Decimal(0)
    return max(Decimal(0), _subtree_quota(node, fr, seen) - quota.lending_limit)


def _potential_available(
    node: _Node, fr: FlavorResource, nodes: dict[tuple[str, str], _Node], seen: set[str]
) -> Decimal:
    parent = nodes.get(("Cohort", node.parent)) if node.parent else None
    if parent is None or parent.name in seen:
        return _subtree_quota(node, fr)
    seen.add(parent.name)
    available = _guaranteed(node, fr) + _potential_available(parent, fr, nodes, seen)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        available = min(available, _subtree_quota(node, fr) + quota.borrowing_limit)
    return available


def find_shortfall(
    pod_sets: Iterable[Mapping], capacity: Mapping[str, Mapping[str, Decimal]]
) -> tuple[str, Decimal] | None:
    """The first resource a Workload with these pod sets can never get, with what the queue offers.

    Deliberately lenient — a false "never fits" would block a job Kueue could run: a pod set must fit in
    the best single flavor (all its pods land in one), and the whole Workload in all flavors together.
    ``pod_sets`` are manifests.pod_sets() entries: {"name", "count", "requests": {resource: quantity}}.
    """
    totals: dict[str, Decimal] = {}
    for pod_set in pod_sets:
        for resource, per_pod in (pod_set.get("requests") or {}).items():
            amount = parse_quantity(per_pod) * int(pod_set.get("count", 1))
            if amount <= 0:
                continue
            best = best_flavor_capacity(capacity, resource)
            if best is None or amount > best:
                return resource, best or Decimal(0)
            totals[resource] = totals.get(resource, Decimal(0)) + amount
    for resource, amount in totals.items():
        available = total_capacity(capacity, resource) or Decimal(0)
        if amount > available:
            return resource, available
    return None


def explain_capacity_shortfall(
    pod_sets: Iterable[Mapping], resource: str, capacity: str | int | Decimal, cluster_queue: str
) -> Shortfall:
    """Say why a request can never fit: the problem, e.g. "RayJob needs 2.5 CPU (head 2 + submitter 0.5)
    but ClusterQueue cluster-queue provides at most 2", and the fix, e.g. "raise nominalQuota or use
    submissionMode HTTPMode" (only when the job would fit without its submitter pod)."""
    cap = parse_quantity(capacity)
    parts = []
    total = Decimal(0)
    submitter = Decimal(0)
    for pod_set in pod_sets:
        per_pod = parse_quantity(pod_set["requests"].get(resource, 0))
        amount = per_pod * pod_set["count"]
        if not amount:
            continue
        total += amount
        if pod_set["name"] == "submitter":
            submitter = amount
        detail = (
            f" ({pod_set['count']} x {readable_amount(resource, per_pod)})" if pod_set["count"] > 1 else ""
        )
        parts.append(f"{pod_set['name']} {readable_amount(resource, amount)}{detail}")
    label = "CPU" if resource == "cpu" else resource
    fixes = "raise nominalQuota"
    if submitter and total - submitter <= cap:
        fixes += " or use submissionMode HTTPMode"
    else:
        fixes += f" or request less {label}"
    return Shortfall(
        problem=f"RayJob needs {readable_amount(resource, total)} {label} ({' + '.join(parts)}) but "
        f"ClusterQueue {cluster_queue} provides at most {readable_amount(resource, cap)}",
        fix=fixes,
    )


def queues_that_fit(
    pod_sets: Any,
    local_queues: list[dict],
    cluster_queues: Mapping[str, dict],
    cohorts: list[dict],
    refused: str,
) -> list[str]:
    """The LocalQueues (other than ``refused``) whose ClusterQueue could ever admit ``pod_sets``, counting
    cohort borrowing: the fix a request refused in ``refused`` needs first."""
    fitting = []
    for local_queue in local_queues:
        name = (local_queue.get("spec") or {}).get("clusterQueue")
        cluster_queue = None if name is None else cluster_queues.get(name)
        if local_queue["metadata"]["name"] == refused or cluster_queue is None:
            continue
        capacity = max_capacity(cluster_queue, cluster_queues=cluster_queues.values(), cohorts=cohorts)
        if find_shortfall(pod_sets, capacity) is None:
            fitting.append(local_queue["metadata"]["name"])
    return fitting
