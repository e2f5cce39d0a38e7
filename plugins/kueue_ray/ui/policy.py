"""Who may preempt whom, in words: a ClusterQueue's preemption policy (Kueue v0.19's ``spec.preemption``)
read from the side of the work that runs there, and its cohort's usage. Pure: ClusterQueue objects in,
sentences and numbers out.

Kueue's fields (``kueue.x-k8s.io/v1beta2`` ClusterQueue, classical preemption) say what a *pending*
workload of a queue may do:

* ``withinClusterQueue`` (``Never``, ``LowerPriority``, ``LowerOrNewerEqualPriority``): preempt
  workloads of its own queue of lower priority (or of equal priority that were created after it);
* ``reclaimWithinCohort`` (``Never``, ``LowerPriority``, ``Any``): preempt workloads of the other queues
  of its cohort that use more than their nominal quota (they borrow), when it fits in its own nominal
  quota: only those of lower priority, or any;
* ``borrowWithinCohort.policy`` (``Never``, ``LowerPriority``) with ``maxPriorityThreshold``: preempt
  such workloads also while it borrows itself, only those of lower priority than its own and at most the
  threshold.

A platform engineer asks the other way round: can *my* work be preempted, and by whom? So the words
combine the queue's own ``withinClusterQueue`` with every cohort peer's ``reclaimWithinCohort`` and
``borrowWithinCohort``, per priority class when the classes are known::

    >>> team_a = {"metadata": {"name": "team-a-cq"}, "spec": {"cohortName": "shared",
    ...     "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}}}
    >>> team_b = {"metadata": {"name": "team-b-cq"}, "spec": {"cohortName": "shared",
    ...     "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}}}
    >>> for line in preemption_words(team_a, [team_a, team_b], {"dev-priority": 100, "prod-priority": 1000}):
    ...     print(line)
    dev-priority work here can be preempted by prod-priority work in this queue, and reclaimed by team-b-cq (any priority) while this queue borrows.
    prod-priority work here can be reclaimed by team-b-cq (any priority) while this queue borrows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kueue_ray.quantity import QuantityError, parse_quantity, readable_amount

NEVER = "Never"


def _policy(cluster_queue: dict) -> dict:
    return (cluster_queue.get("spec") or {}).get("preemption") or {}


def _name(cluster_queue: dict) -> str:
    return ((cluster_queue.get("metadata") or {}).get("name")) or "?"


def _cohort(cluster_queue: dict) -> str | None:
    return (cluster_queue.get("spec") or {}).get("cohortName") or None


def _words(names: Iterable[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def peers_of(cluster_queue: dict, cluster_queues: Iterable[dict]) -> list[dict]:
    """The other ClusterQueues of its cohort, by name (none without a cohort)."""
    cohort = _cohort(cluster_queue)
    if cohort is None:
        return []
    return sorted(
        (cq for cq in cluster_queues if _cohort(cq) == cohort and _name(cq) != _name(cluster_queue)),
        key=_name,
    )


def _preemptors(
    own: dict, peers: list[dict], value: int | None, higher: list[str], same: str | None
) -> tuple[str | None, list[str]]:
    """(who in the queue, [who in the cohort]) may preempt work of priority ``value`` (None: any class).

    ``higher``: the classes above ``value`` (or ["higher-priority"] when classes are unknown); ``same``:
    the class's own name, for ``LowerOrNewerEqualPriority``."""
    within = _policy(own).get("withinClusterQueue") or NEVER
    inside = None
    if within in ("LowerPriority", "LowerOrNewerEqualPriority"):
        who = list(higher)
        if within == "LowerOrNewerEqualPriority":
            who.append(f"older {same or 'equal-priority'}")
        inside = f"by {_words(who)} work in this queue" if who else None
    cohort = []
    for peer in peers:
        policy = _policy(peer)
        reclaim = policy.get("reclaimWithinCohort") or NEVER
        borrow = policy.get("borrowWithinCohort") or {}
        threshold = borrow.get("maxPriorityThreshold")
        # The CRD refuses borrowWithinCohort without reclaimWithinCohort, so it only widens a reclaim.
        while_borrowing = (
            (borrow.get("policy") or NEVER) == "LowerPriority"
            and bool(higher)
            and (threshold is None or value is None or value <= int(threshold))
        )
        also = ""
        if while_borrowing:
            limit = (
                f" (work at priority {threshold} or less)" if threshold is not None and value is None else ""
            )
            also = f", also while it borrows itself{limit}"
        if reclaim == "Any":
            cohort.append(f"{_name(peer)} (any priority{also})")
        elif reclaim == "LowerPriority" and higher:
            cohort.append(f"{_name(peer)}'s {_words(higher)} work" + (f" ({also[2:]})" if also else ""))
    return inside, cohort


def preemption_words(
    cluster_queue: dict, cluster_queues: Iterable[dict], priorities: Mapping[str, int] | None = None
) -> list[str]:
    """Per priority class (lowest first), whether and by whom work in ``cluster_queue`` can be preempted;
    one sentence for all work when ``priorities`` (class name -> value) is empty. See the module doc."""
    own, peers = cluster_queue, peers_of(cluster_queue, cluster_queues)
    classes = sorted((priorities or {}).items(), key=lambda item: (item[1], item[0]))
    lines = []
    for name, value in classes or [(None, None)]:
        higher = [c for c, v in classes if v > value] if name is not None else ["higher-priority"]
        inside, cohort = _preemptors(own, peers, value, higher, name)
        subject = f"{name} work here" if name is not None else "Work here"
        parts = []
        if inside:
            parts.append(f"preempted {inside}")
        if cohort:
            parts.append(f"reclaimed by {_words(cohort)} while this queue borrows")
        if parts:
            lines.append(f"{subject} can be {', and '.join(parts)}.")
        else:
            lines.append(f"{subject} is never preempted.")
    return lines


def may_preempt_words(cluster_queue: dict, cluster_queues: Iterable[dict]) -> str:
    """What this queue's pending work may preempt to be admitted, in one sentence."""
    policy, peers = _policy(cluster_queue), peers_of(cluster_queue, cluster_queues)
    within = policy.get("withinClusterQueue") or NEVER
    reclaim = policy.get("reclaimWithinCohort") or NEVER
    borrow = policy.get("borrowWithinCohort") or {}
    parts = []
    if within == "LowerPriority":
        parts.append("lower-priority work in this queue")
    elif within == "LowerOrNewerEqualPriority":
        parts.append("lower-priority, or newer equal-priority, work in this queue")
    if peers and reclaim != NEVER:
        which = "any" if reclaim == "Any" else "lower-priority"
        parts.append(
            f"{which} work of {_words(_name(p) for p in peers)} beyond their nominal quota, to take back its own"
        )
    if peers and (borrow.get("policy") or NEVER) == "LowerPriority":
        threshold = borrow.get("maxPriorityThreshold")
        limit = f" at priority {threshold} or less" if threshold is not None else ""
        parts.append(f"lower-priority work{limit} of borrowing peers while it borrows itself")
    if not parts:
        return "Work queued here waits: it preempts nothing."
    return f"Work queued here may preempt {'; '.join(parts)}."


def _totals(status: dict, field: str) -> dict[tuple[str, str], Decimal]:
    found = {}
    for flavor in status.get(field) or ():
        for resource in flavor.get("resources") or ():
            try:
                found[(flavor.get("name"), resource.get("name"))] = parse_quantity(resource.get("total") or 0)
            except QuantityError:
                continue
    return found


def cohort_usage(name: str, members: Iterable[dict]) -> dict[str, Any]:
    """A cohort with its members' usage against their nominal quota, per flavor and resource (Kueue's
    ``flavorsUsage``), and the cohort's total: who uses how much of the shared quota, who borrows."""
    resources: list[tuple[str, str]] = []
    rows = []
    total_used: dict[tuple[str, str], Decimal] = {}
    total_nominal: dict[tuple[str, str], Decimal] = {}
    for cq in sorted(members, key=_name):
        used = _totals(cq.get("status") or {}, "flavorsUsage")
        cells = {}
        for group in (cq.get("spec") or {}).get("resourceGroups") or ():
            for flavor in group.get("flavors") or ():
                for resource in flavor.get("resources") or ():
                    key = (flavor.get("name"), resource.get("name"))
                    try:
                        nominal = parse_quantity(resource.get("nominalQuota") or 0)
                    except QuantityError:
                        continue
                    if key not in resources:
                        resources.append(key)
                    usage = used.get(key, Decimal(0))
                    total_used[key] = total_used.get(key, Decimal(0)) + usage
                    total_nominal[key] = total_nominal.get(key, Decimal(0)) + nominal
                    cells[key] = _cell(key[1], usage, nominal)
        rows.append({"cluster_queue": _name(cq), "usage": [cells.get(key) for key in resources]})
    for row in rows:  # a member without a flavor another one has: pad to the same columns
        row["usage"] += [None] * (len(resources) - len(row["usage"]))
    return {
        "name": name,
        "cluster_queues": [row["cluster_queue"] for row in rows],
        "resources": [{"flavor": f, "resource": r} for f, r in resources],
        "members": rows,
        "total": [_cell(key[1], total_used[key], total_nominal[key]) for key in resources],
    }


def _cell(resource: str, usage: Decimal, nominal: Decimal) -> dict[str, Any]:
    borrowed = max(usage - nominal, Decimal(0))
    return {
        "usage": readable_amount(resource, usage),
        "nominal": readable_amount(resource, nominal),
        "borrowed": readable_amount(resource, borrowed) if borrowed else None,
    }
