"""Kueue's admission cycle, as pure functions over a `Snapshot`.

One cycle (upstream `Scheduler.schedule`): take the head of every ClusterQueue's queue, compute
each head's flavor assignment (and preemption targets) against the same snapshot, then process
the heads in order (non-borrowing before borrowing, higher priority, older) while updating usage,
so that an earlier head's admission or preemption can leave a later one without room ("no longer
fits") for this cycle.

`schedule` repeats cycles the way Kueue's scheduler loop does until nothing more can happen
without a cluster event (quota released, queue changed): admitted workloads leave the queue,
BestEffortFIFO heads that cannot fit are parked so the next workload becomes head, StrictFIFO
heads keep blocking their queue, and a preemptor waits for its victims to release quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from kubesim.errors import ApiError
from kubesim.kueue import preemption
from kubesim.kueue.flavors import FIT, NO_FIT, PREEMPT, Assignment, assign_flavors
from kubesim.kueue.model import (
    ANY,
    BEST_EFFORT_FIFO,
    Admit,
    ClusterQueue,
    Decision,
    NoFit,
    Preempt,
    Snapshot,
    Victim,
    Workload,
)
from kubesim.kueue.quota import QuotaTree, Usage, available
from kubesim.selectors import match_label_selector_obj


def queue_order_key(workload: Workload) -> tuple:
    """Kueue's queue order (``baseCompareFunc`` in pkg/cache/queue/cluster_queue.go): higher priority
    first, then the older queue timestamp, then the smaller UID. Timestamps have a second's precision, so
    two Workloads of one priority created in the same second are in the order of their (random) UIDs,
    not of their creation: real Kueue's visibility API lists them so, and admits them so."""
    return (-workload.priority, workload.queue_timestamp, workload.uid)


def ordered(workloads: Iterable[Workload]) -> list[Workload]:
    """Workloads in queue order (the order of the visibility API)."""
    return sorted(workloads, key=queue_order_key)


def admission_order_key(workload: Workload) -> tuple:
    """The order kubesim's passes admit a queue's heads in: Kueue's queue order, except that of two
    Workloads queued in the same second the one queued first comes first. Real Kueue pops a head as soon
    as it is queued, so the first of two Workloads created within a second is admitted before the second
    is even queued; kubesim admits in passes, in which both may wait at once, and would otherwise choose
    between them by their random UIDs. While both wait, they are listed in UID order (``ordered``)."""
    return (-workload.priority, workload.queue_timestamp, workload.creation_seq, workload.uid)


def admission_ordered(workloads: Iterable[Workload]) -> list[Workload]:
    return sorted(workloads, key=admission_order_key)


@dataclass(frozen=True)
class PendingPosition:
    """A pending workload's 0-based place in its ClusterQueue and in its LocalQueue."""

    workload: Workload
    position_in_cluster_queue: int
    position_in_local_queue: int


def pending_positions(pending: Iterable[Workload]) -> list[PendingPosition]:
    """Positions of one ClusterQueue's pending workloads, as the visibility API reports them."""
    per_local_queue: dict[tuple[str, str], int] = {}
    positions = []
    for index, workload in enumerate(ordered(pending)):
        lq = (workload.namespace, workload.local_queue)
        positions.append(PendingPosition(workload, index, per_local_queue.get(lq, 0)))
        per_local_queue[lq] = per_local_queue.get(lq, 0) + 1
    return positions


def namespace_selected(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a CQ's ``namespaceSelector`` admits a namespace; nil selects nothing, ``{}`` everything.

    A selector Kubernetes would reject (bad operator) selects nothing, as it makes upstream's CQ unusable.
    """
    try:
        return match_label_selector_obj(selector, labels)
    except ApiError:
        return False


@dataclass
class _Entry:
    workload: Workload
    cq: ClusterQueue
    assignment: Assignment
    targets: list[preemption.Target] = field(default_factory=list)


def _reserved_for_unreclaimable(entry: _Entry, tree: QuotaTree) -> Usage:
    """Quota a preemptor without candidates keeps from others this cycle (upstream quotaResourcesToReserve)."""
    node = tree.cq(entry.cq.name)
    reserved: Usage = {}
    for fr, value in entry.assignment.usage.items():
        quota = node.quota(fr)
        used = node.usage.get(fr, 0)
        if entry.assignment.borrowing > 0:
            limit = quota.borrowing_limit
            reserved[fr] = value if limit is None else max(0, min(value, quota.nominal + limit - used))
        else:
            reserved[fr] = max(0, min(value, quota.nominal - used))
    return reserved


def _fits_after(tree: QuotaTree, cq_name: str, usage: Usage, removed: Iterable[Workload]) -> bool:
    """Whether ``usage`` fits in the CQ once ``removed`` no longer hold quota (``tree`` is restored)."""
    gone = {w.key: w for w in removed if w.key in tree.workloads[w.admission.cluster_queue]}
    for workload in gone.values():
        tree.remove_workload(workload)
    node = tree.cq(cq_name)
    fits = all(value <= max(0, available(node, fr)) for fr, value in usage.items())
    for workload in gone.values():
        tree.add_workload(workload)
    return fits


def _heads(snapshot: Snapshot, pending_by_cq: dict[str, list[Workload]]) -> list[Workload]:
    heads = []
    for cq_name in sorted(pending_by_cq):
        queue = [w for w in admission_ordered(pending_by_cq[cq_name]) if not w.inadmissible]
        if queue:
            heads.append(queue[0])
    return heads


def _nominate(
    snapshot: Snapshot, tree: QuotaTree, head: Workload, decisions: list[Decision]
) -> _Entry | None:
    cq = snapshot.cluster_queues.get(head.cluster_queue)
    if cq is None:
        decisions.append(NoFit(head, f"ClusterQueue {head.cluster_queue} not found", inadmissible=True))
        return None
    if not cq.active or cq.name in tree.in_cycle:
        # StrictFIFO keeps even this head in place (upstream requeues it immediately).
        parked = cq.queueing_strategy == BEST_EFFORT_FIFO
        decisions.append(NoFit(head, f"ClusterQueue {cq.name} is inactive", inadmissible=parked))
        return None
    if not namespace_selected(cq.namespace_selector, snapshot.namespace_labels.get(head.namespace, {})):
        decisions.append(
            NoFit(head, "workload namespace doesn't match ClusterQueue selector", inadmissible=True)
        )
        return None

    def oracle(fr, value):
        return preemption.simulate_preemption(tree, cq, head, fr, value)

    assignment = assign_flavors(tree, cq, head, snapshot.flavors, oracle)
    entry = _Entry(head, cq, assignment)
    if assignment.mode == PREEMPT:
        entry.targets = preemption.get_targets(
            tree, cq, head, assignment.needs_preemption(), assignment.usage
        )
    return entry


def _entry_order_key(entry: _Entry) -> tuple:
    w = entry.workload
    return (entry.assignment.borrowing, -w.priority, w.queue_timestamp, w.creation_seq, w.uid)


def schedule_cycle(
    snapshot: Snapshot, pending_by_cq: dict[str, list[Workload]], *, now: float = 0.0
) -> list[Decision]:
    """One admission cycle over the heads of the given queues; ``snapshot`` is not modified.

    ``pending_by_cq`` holds every pending workload per ClusterQueue name; those flagged
    ``inadmissible`` are skipped when choosing heads. ``now`` becomes ``reserved_at`` of admissions.
    """
    tree = QuotaTree(snapshot)
    decisions: list[Decision] = []
    entries = []
    for head in _heads(snapshot, pending_by_cq):
        entry = _nominate(snapshot, tree, head, decisions)
        if entry is not None:
            entries.append(entry)

    preempted: dict[str, Workload] = {}
    for entry in sorted(entries, key=_entry_order_key):
        workload, cq, assignment = entry.workload, entry.cq, entry.assignment
        park = cq.queueing_strategy == BEST_EFFORT_FIFO
        if assignment.mode == NO_FIT:
            decisions.append(NoFit(workload, assignment.message(), inadmissible=park, no_fit=True))
            continue
        if assignment.mode == PREEMPT and not entry.targets:
            if cq.preemption.reclaim_within_cohort != ANY:
                tree.add_usage(cq.name, _reserved_for_unreclaimable(entry, tree))
            decisions.append(NoFit(workload, assignment.message(), inadmissible=park, no_fit=True))
            continue
        if any(t.workload.key in preempted for t in entry.targets):
            decisions.append(
                NoFit(workload, "Workload has overlapping preemption targets with another workload", False)
            )
            continue
        victims = [*preempted.values(), *(t.workload for t in entry.targets)]
        if not _fits_after(tree, cq.name, assignment.usage, victims):
            decisions.append(
                NoFit(workload, "Workload no longer fits after processing another workload", False)
            )
            continue
        preempted.update((t.workload.key, t.workload) for t in entry.targets)
        tree.add_usage(cq.name, assignment.usage)
        if assignment.mode == FIT:
            decisions.append(Admit(workload, assignment.admission(cq.name, reserved_at=now)))
            continue
        preemptor_path = tree.cq(cq.name).path()
        decisions.append(
            Preempt(
                workload,
                victims=tuple(
                    Victim(
                        t.workload,
                        t.reason,
                        preemption.eviction_message(
                            workload,
                            t.reason,
                            preemptor_path,
                            tree.cq(t.workload.admission.cluster_queue).path(),
                        ),
                    )
                    for t in entry.targets
                ),
                pending_message=f"{assignment.message()}. Pending the preemption of {len(entry.targets)} workload(s)",
            )
        )
    return decisions


def schedule(
    snapshot: Snapshot, pending_by_cq: dict[str, list[Workload]], *, now: float = 0.0
) -> list[Decision]:
    """Run cycles until only a cluster event could change anything; the last decision per workload.

    Between cycles, admitted workloads move into the snapshot (so later cycles see their usage),
    parked workloads stop being heads, and victims count as being evicted. The result holds, for
    every workload decided on, its latest decision, in the order those were made; a `Preempt`
    lists all its victims, including ones whose eviction an earlier cycle already asked for.
    """
    admitted = {name: list(workloads) for name, workloads in snapshot.admitted.items()}
    original = {w.key: w for workloads in snapshot.admitted.values() for w in workloads}
    pending = {name: list(workloads) for name, workloads in pending_by_cq.items()}
    queue_of = {w.key: name for name, workloads in pending.items() for w in workloads}
    latest: dict[str, Decision] = {}
    budget = 2 * sum(len(queue) for queue in pending.values()) + 2
    for _ in range(budget):
        working = replace(snapshot, admitted=admitted)
        progress = False
        for decision in schedule_cycle(working, pending, now=now):
            key = decision.workload.key
            latest.pop(key, None)
            latest[key] = decision
            queue = pending[queue_of[key]]
            if isinstance(decision, Admit):
                queue[:] = [w for w in queue if w.key != key]
                admitted.setdefault(decision.admission.cluster_queue, []).append(
                    replace(decision.workload, admission=decision.admission, inadmissible=False)
                )
                progress = True
            elif isinstance(decision, NoFit) and decision.inadmissible:
                queue[:] = [replace(w, inadmissible=True) if w.key == key else w for w in queue]
                progress = True
            elif isinstance(decision, Preempt):
                progress |= _mark_evicted(admitted, decision)
        if not progress:
            break
    return [_with_original_victims(decision, original) for decision in latest.values()]


def _with_original_victims(decision: Decision, original: dict[str, Workload]) -> Decision:
    """Victims as the caller passed them in, so ``evicted`` tells which evictions are still to issue."""
    if not isinstance(decision, Preempt):
        return decision
    victims = tuple(replace(v, workload=original.get(v.workload.key, v.workload)) for v in decision.victims)
    return replace(decision, victims=victims)


def _mark_evicted(admitted: dict[str, list[Workload]], decision: Preempt) -> bool:
    """Flag the victims as being evicted; True if any was not already."""
    keys = {victim.workload.key for victim in decision.victims if not victim.workload.evicted}
    for name, workloads in admitted.items():
        admitted[name] = [replace(w, evicted=True) if w.key in keys else w for w in workloads]
    return bool(keys)
