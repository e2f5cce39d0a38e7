"""The quota tree: ClusterQueues and Cohorts with their quotas and usage, and Kueue's quota math.

Kueue keeps one resource node per ClusterQueue and per Cohort (`pkg/cache/scheduler/resource_node.go`)
and answers every "does it fit" question from three numbers per (flavor, resource): the node's
quota, its subtree quota and its usage. This module reproduces those nodes and functions exactly,
including lending limits (quota a node keeps for its own subtree) and borrowing limits, over
hierarchical cohorts. Usage is mutable so that the scheduler can admit, preempt and simulate
within one cycle (every simulation puts back what it removed).

A (flavor, resource) pair is written ``fr``; every amount is a canonical int (see `model`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kubesim.kueue.model import ResourceGroup, ResourceQuota, Snapshot, Workload

FlavorResource = tuple[str, str]
Usage = dict[FlavorResource, int]

_NO_QUOTA = ResourceQuota(nominal=0)


def quotas_of(resource_groups: Iterable[ResourceGroup]) -> dict[FlavorResource, ResourceQuota]:
    """Flatten ``resourceGroups`` into quota per (flavor, resource)."""
    quotas: dict[FlavorResource, ResourceQuota] = {}
    for group in resource_groups:
        for flavor in group.flavors:
            for resource, quota in flavor.resources.items():
                quotas[(flavor.name, resource)] = quota
    return quotas


@dataclass(eq=False)
class Node:
    """A ClusterQueue or Cohort in the tree.

    ``subtree_quota``: for a CQ its nominal quota; for a cohort its own nominal plus what each
    child makes visible to it (the child's subtree quota minus what the child keeps locally).
    ``usage``: for a CQ what its workloads use; for a cohort the part of its children's usage
    that exceeds what they keep locally.
    """

    name: str
    is_cohort: bool
    quotas: dict[FlavorResource, ResourceQuota]
    parent: Node | None = None
    child_cohorts: list[Node] = field(default_factory=list)
    child_cqs: list[Node] = field(default_factory=list)
    subtree_quota: Usage = field(default_factory=dict)
    usage: Usage = field(default_factory=dict)

    def quota(self, fr: FlavorResource) -> ResourceQuota:
        return self.quotas.get(fr, _NO_QUOTA)

    def local_quota(self, fr: FlavorResource) -> int:
        """Capacity this node never lends to its parent (nominal beyond the lending limit)."""
        lending_limit = self.quota(fr).lending_limit
        if lending_limit is None:
            return 0
        return max(0, self.subtree_quota.get(fr, 0) - lending_limit)

    def ancestors(self) -> Iterator[Node]:
        """Parent, grandparent, ... up to the root cohort."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def subtree_cqs(self) -> list[Node]:
        """Every ClusterQueue below this cohort."""
        found = list(self.child_cqs)
        for child in self.child_cohorts:
            found.extend(child.subtree_cqs())
        return found

    def path(self) -> str:
        """``/<root>/.../<name>``, the form Kueue uses for preemptor / preemptee paths."""
        names = [self.name] + [ancestor.name for ancestor in self.ancestors()]
        return "/" + "/".join(reversed(names))


def local_available(node: Node, fr: FlavorResource) -> int:
    """Guaranteed (non-lendable) capacity of this node that is not in use."""
    return max(0, node.local_quota(fr) - node.usage.get(fr, 0))


def available(node: Node, fr: FlavorResource) -> int:
    """Capacity left for this node: local leftovers plus what the parent can give, within the borrowing limit.

    May be negative after over-admission (quota lowered); callers that need a floor apply it.
    """
    if node.parent is None:
        return node.subtree_quota.get(fr, 0) - node.usage.get(fr, 0)
    parent_available = available(node.parent, fr)
    borrowing_limit = node.quota(fr).borrowing_limit
    if borrowing_limit is not None:
        local = node.local_quota(fr)
        stored_in_parent = node.subtree_quota.get(fr, 0) - local
        used_in_parent = max(0, node.usage.get(fr, 0) - local)
        parent_available = min(stored_in_parent - used_in_parent + borrowing_limit, parent_available)
    return local_available(node, fr) + parent_available


def potential_available(node: Node, fr: FlavorResource) -> int:
    """The most this node could ever get with no usage anywhere ("maximum capacity")."""
    if node.parent is None:
        return node.subtree_quota.get(fr, 0)
    result = node.local_quota(fr) + potential_available(node.parent, fr)
    borrowing_limit = node.quota(fr).borrowing_limit
    if borrowing_limit is not None:
        result = min(node.subtree_quota.get(fr, 0) + borrowing_limit, result)
    return result


def borrowing_with(node: Node, fr: FlavorResource, value: int) -> bool:
    """Whether usage plus ``value`` would exceed the node's own quota (nominal for a CQ, subtree for a cohort)."""
    own = node.subtree_quota.get(fr, 0) if node.is_cohort else node.quota(fr).nominal
    return own < node.usage.get(fr, 0) + value


def is_within_nominal(node: Node, frs: Iterable[FlavorResource]) -> bool:
    """Whether the node uses no more than its subtree quota in every one of ``frs``."""
    return all(node.usage.get(fr, 0) <= node.subtree_quota.get(fr, 0) for fr in frs)


def quantities_fit_in_quota(node: Node, requests: Usage) -> tuple[bool, Usage]:
    """Whether ``requests`` fit in this node's subtree quota, and what remains for the parent."""
    fits = True
    remaining: Usage = {}
    for fr, value in requests.items():
        if node.subtree_quota.get(fr, 0) < node.usage.get(fr, 0) + value:
            fits = False
        remaining[fr] = max(0, value - local_available(node, fr))
    return fits, remaining


def _height(cohort: Node) -> int:
    """Levels of cohorts below (a cohort with only CQs has height 1; an empty one 0)."""
    height = min(len(cohort.child_cohorts) + len(cohort.child_cqs), 1)
    for child in cohort.child_cohorts:
        height = max(height, _height(child) + 1)
    return height


def borrowing_height(cq: Node, fr: FlavorResource, value: int) -> tuple[int, bool]:
    """How far up the tree ``value`` has to borrow, and whether a higher cohort could still reclaim.

    Returns (0, has parent) when the CQ fits within its nominal quota; otherwise the height of
    the lowest cohort whose subtree quota holds the request (0 = no borrowing, bigger = borrowing
    from further away), which Kueue uses to prefer flavors and to order heads.
    """
    if cq.parent is None or not borrowing_with(cq, fr, value):
        return 0, cq.parent is not None
    remaining = value - local_available(cq, fr)
    for node in cq.ancestors():
        if not borrowing_with(node, fr, remaining):
            return _height(node), node.parent is not None
        remaining -= local_available(node, fr)
    return _height(cq.root()), False


def _add(node: Node, fr: FlavorResource, value: int) -> None:
    free_locally = local_available(node, fr)
    node.usage[fr] = node.usage.get(fr, 0) + value
    if node.parent is not None and value > free_locally:
        _add(node.parent, fr, value - free_locally)


def _remove(node: Node, fr: FlavorResource, value: int) -> None:
    stored_in_parent = node.usage.get(fr, 0) - node.local_quota(fr)
    node.usage[fr] = node.usage.get(fr, 0) - value
    if stored_in_parent <= 0 or node.parent is None:
        return
    _remove(node.parent, fr, min(value, stored_in_parent))


class QuotaTree:
    """All ClusterQueues and Cohorts of a snapshot, with usage from the admitted workloads.

    ``workloads`` maps a CQ name to the workloads holding quota in it (keyed by workload key), as
    preemption needs them. Cohorts named only by ``cohortName`` / ``parentName`` are implicit
    roots without quota. ``in_cycle`` holds the CQs below a cohort whose parent chain loops:
    Kueue refuses to schedule them.
    """

    def __init__(self, snapshot: Snapshot):
        self.cqs: dict[str, Node] = {}
        self.cohorts: dict[str, Node] = {}
        self.workloads: dict[str, dict[str, Workload]] = {}
        self.in_cycle: set[str] = set()
        for cohort in snapshot.cohorts.values():
            self._cohort(cohort.name).quotas = quotas_of(cohort.resource_groups)
        for cohort in sorted(snapshot.cohorts.values(), key=lambda c: c.name):
            if cohort.parent:
                self._link(self.cohorts[cohort.name], self._cohort(cohort.parent))
        for cq in sorted(snapshot.cluster_queues.values(), key=lambda c: c.name):
            node = Node(cq.name, is_cohort=False, quotas=quotas_of(cq.resource_groups))
            self.cqs[cq.name] = node
            self.workloads[cq.name] = {}
            if cq.cohort:
                cohort = self._cohort(cq.cohort)
                node.parent = cohort
                cohort.child_cqs.append(node)
        self._break_cycles()
        for node in self.cohorts.values():
            if node.parent is None:
                _accumulate_quota(node)
        for node in self.cqs.values():
            node.subtree_quota = {fr: quota.nominal for fr, quota in node.quotas.items()}
        for cq_name, admitted in sorted(snapshot.admitted.items()):
            for workload in admitted:
                if cq_name in self.cqs and workload.admission is not None:
                    self.add_workload(workload)

    def _cohort(self, name: str) -> Node:
        if name not in self.cohorts:
            self.cohorts[name] = Node(name, is_cohort=True, quotas={})
        return self.cohorts[name]

    @staticmethod
    def _link(child: Node, parent: Node) -> None:
        child.parent = parent
        parent.child_cohorts.append(child)

    def _break_cycles(self) -> None:
        """Detach cohorts whose parent chain loops and remember their CQs as unschedulable."""
        for start in list(self.cohorts.values()):
            seen: list[Node] = []
            node: Node | None = start
            while node is not None and node not in seen:
                seen.append(node)
                node = node.parent
            if node is None:
                continue
            loop = seen[seen.index(node) :]
            for member in loop:
                self.in_cycle.update(cq.name for cq in member.child_cqs)
                if member.parent is not None:
                    member.parent.child_cohorts.remove(member)
                    member.parent = None
            for member in loop:
                self.in_cycle.update(cq.name for cq in member.subtree_cqs())

    def cq(self, name: str) -> Node:
        return self.cqs[name]

    def add_usage(self, cq_name: str, usage: Usage) -> None:
        node = self.cqs[cq_name]
        for fr, value in usage.items():
            _add(node, fr, value)

    def remove_usage(self, cq_name: str, usage: Usage) -> None:
        node = self.cqs[cq_name]
        for fr, value in usage.items():
            _remove(node, fr, value)

    def add_workload(self, workload: Workload) -> None:
        """Account an admitted workload in its CQ (and, past local quota, in its cohorts)."""
        assert workload.admission is not None
        cq_name = workload.admission.cluster_queue
        self.workloads[cq_name][workload.key] = workload
        self.add_usage(cq_name, workload.admission.usage())

    def remove_workload(self, workload: Workload) -> None:
        assert workload.admission is not None
        cq_name = workload.admission.cluster_queue
        self.workloads[cq_name].pop(workload.key, None)
        self.remove_usage(cq_name, workload.admission.usage())


def _accumulate_quota(cohort: Node) -> None:
    """Compute subtree quotas bottom-up: own nominal plus each child's lendable subtree quota."""
    cohort.subtree_quota = {fr: quota.nominal for fr, quota in cohort.quotas.items()}
    for child in cohort.child_cohorts:
        _accumulate_quota(child)
    for child in cohort.child_cqs:
        child.subtree_quota = {fr: quota.nominal for fr, quota in child.quotas.items()}
    for child in [*cohort.child_cohorts, *cohort.child_cqs]:
        for fr, value in child.subtree_quota.items():
            cohort.subtree_quota[fr] = cohort.subtree_quota.get(fr, 0) + value - child.local_quota(fr)
