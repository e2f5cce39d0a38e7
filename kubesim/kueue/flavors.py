"""Flavor assignment: pick a ResourceFlavor per pod set and resource group, as Kueue's flavorassigner does.

For each pod set in order, and each resource group it requests, the ClusterQueue's flavors are
tried in order. A flavor is skipped when the pod set cannot run on its nodes (untolerated taint,
node selector contradicting the flavor's labels). Otherwise every resource of the group is
checked against quota:

* more than the maximum capacity ever reachable -> NoFit ("... > maximum capacity (...)");
* within what is available now -> Fit (possibly borrowing from the cohort);
* otherwise preemption is simulated (only when it could help: the request fits in nominal
  quota, a cohort could reclaim, or borrowWithinCohort is enabled), giving Preempt, or NoFit
  with "insufficient unused quota ..., N more needed".

``flavorFungibility`` decides whether to stop at a flavor that borrows or needs preemption, or
to keep looking for a better one, and (``preference``) which of two such flavors is better.
Requests of earlier pod sets of the same workload count against the same flavor ("previously
considered podsets requests").

A ClusterQueue that covers the ``pods`` resource charges every pod set its pod count in it: pods
are quota like any other resource there, so a queue can cap how many pods it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kubesim import quantity
from kubesim.kueue.model import (
    MAY_STOP_SEARCH,
    NEVER,
    PREEMPTION_OVER_BORROWING,
    TRY_NEXT_FLAVOR,
    Admission,
    ClusterQueue,
    PodSet,
    PodSetAssignment,
    ResourceFlavor,
    ResourceGroup,
    Taint,
    Toleration,
    Workload,
)
from kubesim.kueue.quota import (
    FlavorResource,
    QuotaTree,
    Usage,
    available,
    borrowing_height,
    potential_available,
)

PODS = "pods"
"""The resource a ClusterQueue may cover to limit how many pods its workloads run."""

# Assignment modes, worst to best (the order matters: a pod set is as good as its worst resource).
NO_FIT = 0
PREEMPT = 1
FIT = 2

# Outcomes of simulating preemption for one (flavor, resource).
NO_CANDIDATES = "NoCandidates"
PREEMPT_IN_CQ = "Preempt"
RECLAIM = "Reclaim"

# Finer modes used to compare flavors (upstream's preemptionMode), worst to best.
_NO_FIT, _NO_CANDIDATES, _PREEMPT, _RECLAIM, _FIT = range(5)
_MODE_OF_POSSIBILITY = {NO_CANDIDATES: _NO_CANDIDATES, PREEMPT_IN_CQ: _PREEMPT, RECLAIM: _RECLAIM}

Oracle = Callable[[FlavorResource, int], tuple[str, int]]
"""simulate_preemption(fr, value) -> (NO_CANDIDATES | PREEMPT_IN_CQ | RECLAIM, borrowing height after it)."""


@dataclass(frozen=True)
class FlavorChoice:
    """The flavor chosen for one resource of a pod set, how it fits, and how far it borrows."""

    flavor: str
    mode: int
    borrow: int


@dataclass
class PodSetResult:
    """Flavor assignment of one pod set; ``reasons`` explain every flavor that did not simply fit."""

    name: str
    count: int
    requests: dict[str, int]
    flavors: dict[str, FlavorChoice] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)

    @property
    def mode(self) -> int:
        if not self.reasons:
            return FIT
        if not self.flavors:
            return NO_FIT
        return min(choice.mode for choice in self.flavors.values())

    def message(self) -> str:
        return f"couldn't assign flavors to pod set {self.name}: {', '.join(sorted(self.reasons))}"


@dataclass
class Assignment:
    """Flavor assignment of a whole workload in a ClusterQueue.

    ``usage``: what admitting it would charge per (flavor, resource); ``borrowing``: the largest
    borrowing height over all its resources (0 = within nominal quota).
    """

    pod_sets: list[PodSetResult] = field(default_factory=list)
    usage: Usage = field(default_factory=dict)
    borrowing: int = 0

    @property
    def mode(self) -> int:
        """The workload's mode: its worst pod set (a workload with no pod sets cannot fit)."""
        if not self.pod_sets:
            return NO_FIT
        return min(pod_set.mode for pod_set in self.pod_sets)

    def message(self) -> str:
        """Kueue's pending message: every pod set that does not simply fit, joined with "; "."""
        return "; ".join(ps.message() for ps in self.pod_sets if ps.mode != FIT)

    def needs_preemption(self) -> set[FlavorResource]:
        """The (flavor, resource) pairs that can only be had by preempting."""
        return {
            (choice.flavor, resource)
            for ps in self.pod_sets
            for resource, choice in ps.flavors.items()
            if choice.mode == PREEMPT
        }

    def admission(self, cluster_queue: str, reserved_at: float = 0.0) -> Admission:
        return Admission(
            cluster_queue=cluster_queue,
            pod_set_assignments=tuple(
                PodSetAssignment(
                    name=ps.name,
                    flavors={resource: choice.flavor for resource, choice in ps.flavors.items()},
                    resource_usage={resource: ps.requests[resource] for resource in ps.flavors},
                    count=ps.count,
                )
                for ps in self.pod_sets
            ),
            reserved_at=reserved_at,
        )


def _tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("", "Equal") and toleration.value == taint.value


def flavor_mismatch(flavor: ResourceFlavor | None, flavor_name: str, pod_set: PodSet) -> str | None:
    """Why ``pod_set`` cannot use this flavor's nodes, or None if it can."""
    if flavor is None:
        return f"flavor {flavor_name} not found"
    tolerations = (*pod_set.tolerations, *flavor.tolerations)
    for taint in flavor.node_taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(toleration, taint) for toleration in tolerations):
            # Go's %s of a corev1.Taint value: {key value effect timeAdded}.
            return f"untolerated taint {{{taint.key} {taint.value} {taint.effect} <nil>}} in flavor {flavor_name}"
    for key, value in pod_set.node_selector.items():
        if key in flavor.node_labels and flavor.node_labels[key] != value:
            return f"flavor {flavor_name} doesn't match node affinity"
    return None


def _preferred(a: tuple[int, int], b: tuple[int, int], preference: str) -> bool:
    """Whether (mode, borrowing height) ``a`` beats ``b`` under the CQ's ``flavorFungibility.preference``."""
    if a[0] == _NO_FIT:
        return False
    if b[0] == _NO_FIT:
        return True
    if (a[0] == _NO_CANDIDATES) != (b[0] == _NO_CANDIDATES):
        return a[0] != _NO_CANDIDATES
    if preference == PREEMPTION_OVER_BORROWING:
        if a[1] != b[1]:
            return a[1] < b[1]
        return a[0] > b[0]
    if a[0] != b[0]:
        return a[0] > b[0]
    return a[1] < b[1]


def _try_next_flavor(mode: tuple[int, int], cq: ClusterQueue) -> bool:
    if mode[0] in (_NO_FIT, _NO_CANDIDATES):
        return True
    if mode[0] in (_PREEMPT, _RECLAIM) and cq.flavor_fungibility.when_can_preempt == TRY_NEXT_FLAVOR:
        return True
    return mode[1] > 0 and cq.flavor_fungibility.when_can_borrow != MAY_STOP_SEARCH


class _Assigner:
    def __init__(
        self, tree: QuotaTree, cq: ClusterQueue, flavors: dict[str, ResourceFlavor], oracle: Oracle
    ) -> None:
        self.tree = tree
        self.cq = cq
        self.node = tree.cq(cq.name)
        self.flavors = flavors
        self.oracle = oracle

    def group_of(self, resource: str) -> ResourceGroup | None:
        for group in self.cq.resource_groups:
            if resource in group.covered_resources:
                return group
        return None

    def can_preempt_while_borrowing(self) -> bool:
        return self.cq.preemption.borrow_within_cohort_policy != NEVER

    def fits_quota(self, fr: FlavorResource, previous: int, request: int) -> tuple[int, int, str | None]:
        """Kueue's fitsResourceQuota: (fine mode, borrowing height, reason if not a plain fit)."""
        resource = fr[1]
        free = max(0, available(self.node, fr))
        capacity = potential_available(self.node, fr)
        value = previous + request
        if value > capacity:
            return (
                _NO_FIT,
                0,
                f"insufficient quota for {resource} in flavor {fr[0]}, previously considered podsets requests "
                f"({quantity.to_string(resource, previous)}) + current podset request "
                f"({quantity.to_string(resource, request)}) > maximum capacity "
                f"({quantity.to_string(resource, capacity)})",
            )
        borrow, may_reclaim = borrowing_height(self.node, fr, value)
        if value <= free:
            return _FIT, borrow, None
        reason = (
            f"insufficient unused quota for {resource} in flavor {fr[0]}, "
            f"{quantity.to_string(resource, value - free)} more needed"
        )
        nominal = self.node.quota(fr).nominal
        if nominal >= value or may_reclaim or self.can_preempt_while_borrowing():
            possibility, borrow_after = self.oracle(fr, value)
            return _MODE_OF_POSSIBILITY[possibility], borrow_after, reason
        return _NO_FIT, borrow, reason

    def find_flavor(
        self, pod_set: PodSet, group: ResourceGroup, requests: dict[str, int], usage: Usage
    ) -> tuple[dict[str, FlavorChoice], list[str], bool]:
        """Choose a flavor of ``group`` for the pod set; returns (choices, reasons, plain fit)."""
        reasons: list[str] = []
        wanted = {
            resource: value for resource, value in requests.items() if resource in group.covered_resources
        }
        best: dict[str, FlavorChoice] = {}
        best_mode = (_NO_FIT, 1 << 62)
        preference = self.cq.flavor_fungibility.preference
        for flavor_quotas in group.flavors:
            name = flavor_quotas.name
            mismatch = flavor_mismatch(self.flavors.get(name), name, pod_set)
            if mismatch:
                reasons.append(mismatch)
                continue
            choices: dict[str, FlavorChoice] = {}
            mode = (_FIT, 0)
            for resource, value in wanted.items():
                fr = (name, resource)
                fine_mode, borrow, reason = self.fits_quota(fr, usage.get(fr, 0), value)
                if reason:
                    reasons.append(reason)
                if _preferred(mode, (fine_mode, borrow), preference):
                    mode = (fine_mode, borrow)
                if mode[0] == _NO_FIT:
                    continue
                coarse = FIT if fine_mode == _FIT else NO_FIT if fine_mode == _NO_FIT else PREEMPT
                choices[resource] = FlavorChoice(name, coarse, borrow)
            if not _try_next_flavor(mode, self.cq):
                best, best_mode = choices, mode
                break
            if _preferred(mode, best_mode, preference):
                best, best_mode = choices, mode
        return best, reasons, best_mode[0] == _FIT

    def assign(self, workload: Workload) -> Assignment:
        result = Assignment()
        counts_pods = self.group_of(PODS) is not None
        for pod_set in workload.pod_sets:
            requests = pod_set.total()
            if counts_pods:
                requests[PODS] = pod_set.count
            ps = PodSetResult(pod_set.name, pod_set.count, requests)
            failed = False
            for resource in _resource_order(requests, self.cq):
                if resource in ps.flavors:
                    continue
                group = self.group_of(resource)
                if group is None:
                    if requests[resource] == 0:
                        continue
                    ps.flavors = {}
                    ps.reasons = [f"resource {resource} unavailable in ClusterQueue"]
                    failed = True
                    break
                choices, reasons, plain_fit = self.find_flavor(pod_set, group, requests, result.usage)
                if not choices and requests:
                    ps.flavors = {}
                    ps.reasons = reasons
                    failed = True
                    break
                ps.flavors.update(choices)
                if not plain_fit:
                    ps.reasons.extend(reasons)
            result.pod_sets.append(ps)
            for resource, choice in ps.flavors.items():
                fr = (choice.flavor, resource)
                result.usage[fr] = result.usage.get(fr, 0) + requests[resource]
                result.borrowing = max(result.borrowing, choice.borrow)
            if failed:
                break
        return result


def _resource_order(requests: dict[str, int], cq: ClusterQueue) -> list[str]:
    """Resources in resource-group order, then uncovered ones by name (deterministic messages)."""
    covered = [r for group in cq.resource_groups for r in group.covered_resources if r in requests]
    return covered + sorted(r for r in requests if r not in covered)


def assign_flavors(
    tree: QuotaTree,
    cq: ClusterQueue,
    workload: Workload,
    flavors: dict[str, ResourceFlavor],
    oracle: Oracle,
) -> Assignment:
    """Assign flavors to every pod set of ``workload`` in ``cq``, given current usage in ``tree``.

    ``oracle`` simulates preemption for a (flavor, resource) that does not fit now.
    Stops at the first pod set that cannot fit at all, as Kueue does (later pod sets are not
    reported in the message).
    """
    return _Assigner(tree, cq, flavors, oracle).assign(workload)
