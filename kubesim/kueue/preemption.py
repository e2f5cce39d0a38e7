"""Classic preemption: which admitted workloads to evict so that a pending one fits.

Candidates (Kueue's classical candidate iterator) are admitted workloads that use a contested
(flavor, resource) and that the preemptor's ClusterQueue policy allows it to preempt:

* in its own CQ, per ``withinClusterQueue`` (LowerPriority, or LowerOrNewerEqualPriority);
* in other CQs of the cohort tree that use more than their quota, per ``reclaimWithinCohort``
  (Any, LowerPriority). A candidate whose subtree the preemptor could fit in without borrowing
  ("hierarchical advantage") is reclaimed whatever the policy's borrowing rules; otherwise
  ``borrowWithinCohort`` decides whether it may be taken while the preemptor itself borrows.

Candidates are ordered: already being evicted first, other CQs before the own CQ, lower priority
first, most recently admitted first. They are removed one by one until the preemptor fits, then
added back (newest removal kept) whenever the preemptor still fits without them, giving a
minimal set. Up to two attempts are made, with and without allowing the preemptor to borrow.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesim.kueue.flavors import NO_CANDIDATES, PREEMPT_IN_CQ, RECLAIM
from kubesim.kueue.model import (
    ANY,
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    LOWER_PRIORITY,
    NEVER,
    ClusterQueue,
    Workload,
)
from kubesim.kueue.quota import (
    FlavorResource,
    Node,
    QuotaTree,
    Usage,
    available,
    borrowing_height,
    borrowing_with,
    is_within_nominal,
    quantities_fit_in_quota,
)

_HUMAN_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}

# How a candidate may be preempted (upstream's preemptionVariant).
_WITHIN_CQ = "WithinCQ"
_HIERARCHICAL_RECLAIM = "HierarchicalReclaim"
_RECLAIM_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"
_RECLAIM_WHILE_BORROWING = "ReclaimWhileBorrowing"

_REASON_OF_VARIANT = {
    _WITHIN_CQ: IN_CLUSTER_QUEUE,
    _HIERARCHICAL_RECLAIM: IN_COHORT_RECLAMATION,
    _RECLAIM_WITHOUT_BORROWING: IN_COHORT_RECLAMATION,
    _RECLAIM_WHILE_BORROWING: IN_COHORT_RECLAIM_WHILE_BORROWING,
}


@dataclass(frozen=True)
class Target:
    """A workload chosen for eviction and the Preempted condition reason to give it."""

    workload: Workload
    reason: str


@dataclass(frozen=True)
class _Candidate:
    workload: Workload
    variant: str
    # The cohort up to which the candidate's path must be over quota (None: up to the root).
    lca: Node | None


def eviction_message(preemptor: Workload, reason: str, preemptor_path: str, preemptee_path: str) -> str:
    """The Evicted / Preempted condition message Kueue writes on a victim."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid or 'UNKNOWN'}, "
        f"JobUID: {preemptor.job_uid or 'UNKNOWN'}) due to {_HUMAN_REASONS.get(reason, 'UNKNOWN')}; "
        f"preemptor path: {preemptor_path}; preemptee path: {preemptee_path}"
    )


def satisfies_policy(preemptor: Workload, candidate: Workload, policy: str) -> bool:
    """Whether ``policy`` lets ``preemptor`` preempt ``candidate`` (priority, then queue age)."""
    lower = preemptor.priority > candidate.priority
    if policy == LOWER_PRIORITY:
        return lower
    if policy == LOWER_OR_NEWER_EQUAL_PRIORITY:
        newer_equal = (
            preemptor.priority == candidate.priority and preemptor.queue_timestamp < candidate.queue_timestamp
        )
        return lower or newer_equal
    return policy == ANY


def _uses(workload: Workload, frs: set[FlavorResource]) -> bool:
    assert workload.admission is not None
    return any(
        (flavor, resource) in frs
        for assignment in workload.admission.pod_set_assignments
        for resource, flavor in assignment.flavors.items()
    )


class _Preemptor:
    def __init__(
        self, tree: QuotaTree, cq: ClusterQueue, preemptor: Workload, frs: set[FlavorResource], usage: Usage
    ):
        self.tree = tree
        self.cq = cq
        self.node = tree.cq(cq.name)
        self.preemptor = preemptor
        self.frs = frs
        self.usage = usage
        policy = cq.preemption
        self.borrow_forbidden = policy.borrow_within_cohort_policy == NEVER
        self.threshold = policy.borrow_max_priority_threshold

    def variant(self, candidate: Workload, cq_name: str, hierarchical_advantage: bool) -> str | None:
        if not _uses(candidate, self.frs):
            return None
        own = cq_name == self.cq.name
        policy = self.cq.preemption.within_cluster_queue if own else self.cq.preemption.reclaim_within_cohort
        if not satisfies_policy(self.preemptor, candidate, policy):
            return None
        if own:
            return _WITHIN_CQ
        if hierarchical_advantage:
            return _HIERARCHICAL_RECLAIM
        if self.borrow_forbidden or candidate.priority >= self.preemptor.priority:
            return _RECLAIM_WITHOUT_BORROWING
        if self.threshold is not None and candidate.priority > self.threshold:
            return _RECLAIM_WITHOUT_BORROWING
        return _RECLAIM_WHILE_BORROWING

    def from_cq(self, cq_node: Node, lca: Node | None, advantage: bool) -> list[_Candidate]:
        found = []
        for workload in self.tree.workloads[cq_node.name].values():
            variant = self.variant(workload, cq_node.name, advantage)
            if variant is not None:
                found.append(_Candidate(workload, variant, lca))
        return found

    def collect_in_subtree(
        self, cohort: Node, subtree_root: Node, skip: Node | None, advantage: bool, into: list[_Candidate]
    ) -> None:
        for child in cohort.child_cohorts:
            if child is skip or is_within_nominal(child, self.frs):
                continue
            self.collect_in_subtree(child, subtree_root, skip, advantage, into)
        for child in cohort.child_cqs:
            if child is self.node:
                continue
            if not is_within_nominal(child, self.frs):
                into.extend(self.from_cq(child, subtree_root, advantage))

    def cohort_candidates(self) -> tuple[list[_Candidate], list[_Candidate]]:
        """(hierarchy candidates, priority candidates) from other CQs of the cohort tree."""
        hierarchy: list[_Candidate] = []
        by_priority: list[_Candidate] = []
        if self.node.parent is None or self.cq.preemption.reclaim_within_cohort == NEVER:
            return hierarchy, by_priority
        advantage, remaining = quantities_fit_in_quota(self.node, self.usage)
        previous: Node | None = None
        for subtree_root in self.node.ancestors():
            into = hierarchy if advantage else by_priority
            self.collect_in_subtree(subtree_root, subtree_root, previous, advantage, into)
            fits, remaining = quantities_fit_in_quota(subtree_root, remaining)
            advantage = advantage or fits
            previous = subtree_root
        return hierarchy, by_priority

    @staticmethod
    def order_key(candidate: _Candidate) -> tuple:
        """Within one group of candidates: lower priority first, then the most recently admitted."""
        workload = candidate.workload
        assert workload.admission is not None
        return (workload.priority, -workload.admission.reserved_at, workload.uid)

    def candidates(self) -> tuple[list[_Candidate], bool, bool]:
        """All candidates in trial order, whether none come from other CQs, whether none are hierarchical.

        Groups go hierarchy, other CQs by policy, own CQ (so other CQs come before the own one), and
        workloads already being evicted go before all others, keeping that order among themselves.
        """
        same_queue: list[_Candidate] = []
        if self.cq.preemption.within_cluster_queue != NEVER:
            same_queue = self.from_cq(self.node, None, False)
        hierarchy, by_priority = self.cohort_candidates()
        groups = [sorted(group, key=self.order_key) for group in (hierarchy, by_priority, same_queue)]
        evicted = [c for group in groups for c in group if c.workload.evicted]
        rest = [c for group in groups for c in group if not c.workload.evicted]
        return evicted + rest, not hierarchy and not by_priority, not hierarchy

    def valid(self, candidate: _Candidate, borrowing: bool) -> bool:
        """Whether a candidate still needs removing: its CQ (and cohorts up to the LCA) still over quota."""
        assert candidate.workload.admission is not None
        cq_name = candidate.workload.admission.cluster_queue
        if cq_name == self.cq.name:
            return True
        if borrowing and candidate.variant == _RECLAIM_WITHOUT_BORROWING:
            return False
        cq_node = self.tree.cq(cq_name)
        if is_within_nominal(cq_node, self.frs):
            return False
        for node in cq_node.ancestors():
            if node is candidate.lca:
                break
            if is_within_nominal(node, self.frs):
                return False
        return True

    def fits(self, borrowing: bool) -> bool:
        for fr, value in self.usage.items():
            if not borrowing and borrowing_with(self.node, fr, value):
                return False
            if value > max(0, available(self.node, fr)):
                return False
        return True

    def under_nominal(self) -> bool:
        return all(self.node.quota(fr).nominal > self.node.usage.get(fr, 0) for fr in self.frs)

    def targets(self) -> list[Target]:
        candidates, none_from_others, none_hierarchical = self.candidates()
        if none_from_others or (self.borrow_forbidden and not self.under_nominal()):
            attempts = [True]
        elif self.borrow_forbidden and none_hierarchical:
            attempts = [False, True]
        else:
            attempts = [True, False]
        for borrowing in attempts:
            removed: list[Target] = []
            for candidate in candidates:
                if not self.valid(candidate, borrowing):
                    continue
                self.tree.remove_workload(candidate.workload)
                removed.append(Target(candidate.workload, _REASON_OF_VARIANT[candidate.variant]))
                if self.fits(borrowing):
                    kept = self.fill_back(removed, borrowing)
                    for target in kept:
                        self.tree.add_workload(target.workload)
                    return kept
            for target in removed:
                self.tree.add_workload(target.workload)
        return []

    def fill_back(self, removed: list[Target], borrowing: bool) -> list[Target]:
        """Put back every removed workload (but the last) that the preemptor can live with."""
        kept = list(removed)
        for index in range(len(removed) - 2, -1, -1):
            target = removed[index]
            self.tree.add_workload(target.workload)
            if self.fits(borrowing):
                kept.remove(target)
            else:
                self.tree.remove_workload(target.workload)
        return kept


def get_targets(
    tree: QuotaTree,
    cq: ClusterQueue,
    preemptor: Workload,
    needs_preemption: set[FlavorResource],
    usage: Usage,
) -> list[Target]:
    """The minimal set of admitted workloads to evict so ``preemptor`` fits in ``cq``; [] if none works.

    ``needs_preemption``: the contested (flavor, resource) pairs; ``usage``: what the preemptor
    would use. ``tree`` is left as it was.
    """
    return _Preemptor(tree, cq, preemptor, needs_preemption, usage).targets()


def simulate_preemption(
    tree: QuotaTree, cq: ClusterQueue, preemptor: Workload, fr: FlavorResource, value: int
) -> tuple[str, int]:
    """Flavor assignment's oracle: could preemption make ``value`` of ``fr`` fit, and how much would it borrow?"""
    targets = get_targets(tree, cq, preemptor, {fr}, {fr: value})
    node = tree.cq(cq.name)
    if not targets:
        return NO_CANDIDATES, borrowing_height(node, fr, value)[0]
    for target in targets:
        tree.remove_workload(target.workload)
    borrow = borrowing_height(node, fr, value)[0]
    for target in targets:
        tree.add_workload(target.workload)
    if any(
        t.workload.admission is not None and t.workload.admission.cluster_queue == cq.name for t in targets
    ):
        return PREEMPT_IN_CQ, borrow
    return RECLAIM, borrow
