"""Each ClusterQueue's pending Workloads in admission order, kept between passes and updated by what changed.

Upstream's queue manager keeps a heap per ClusterQueue and pushes a Workload when it is added or updated;
it does not reread its queues on every scheduling cycle. Here a pass used to: with 30,000 Workloads
pending, every pass went over all of them, parked ones included, to find the few that might be admitted.
``PendingQueues`` keeps the sorted queues of the last pass and re-examines only the Workloads whose queued
entry changed since (``WorkloadIndex.take_queued_changes``) and those that were waiting out a backoff; it
reads them all again only when the configuration changed (``ClusterView.config_generation``: not the
queues' status, which every admission rewrites). A parked Workload's entry is shelved, and put
back unexamined when the parked Workloads are requeued (as upstream moves its inadmissible Workloads back
into the heap): only what changed meanwhile is examined again.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubesim.kueue import model
from kubesim.kueue.scheduler import admission_order_key

if TYPE_CHECKING:
    from kubesim.kueue.equivalence import Parked

Ident = tuple[str, str]
Entry = tuple[tuple, model.Workload]
"""(``admission_order_key`` of the workload, the workload): unique keys, so a queue is a sorted list."""

WAITING = "waiting"
"""What ``examine`` returns for a Workload waiting out its requeue backoff: examined again every pass."""
Examined = tuple[str, tuple[str, str], model.Workload] | str | None
"""``examine``'s verdict on a queued Workload: (ClusterQueue, scheduling shape, model) when it may be
admitted, ``WAITING``, or None when it is not a candidate (its LocalQueue is blocked: it said why)."""


@dataclass(eq=False)
class PendingQueues:
    """The candidates of the admission cycles: not parked, not backing off, not blocked."""

    queues: dict[str, list[Entry]] = field(default_factory=dict)
    """ClusterQueue -> its candidates in admission order."""
    where: dict[str, Ident] = field(default_factory=dict)
    """uid -> (namespace, name) of each candidate."""
    shapes: dict[str, tuple[str, str]] = field(default_factory=dict)
    """uid -> (ClusterQueue, scheduling shape) of each candidate."""
    _at: dict[Ident, tuple[str, tuple, str]] = field(default_factory=dict)
    """ident -> (ClusterQueue, key, uid) of each candidate: where to take it out when it changes."""
    _waiting: set[Ident] = field(default_factory=set)
    _shelved: dict[Ident, tuple[str, Entry, tuple[str, str]]] = field(default_factory=dict)
    """ident -> (ClusterQueue, entry, shape) of each candidate left out because it was parked."""
    _unexamined: set[Ident] = field(default_factory=set)
    """Queued Workloads a whole read skipped because they were parked: examined once they are requeued."""
    _generation: int | None = None
    _clears: int = -1
    _parked: int = 0
    """``Parked.additions`` when the queues were last rid of the parked Workloads."""

    def refresh(
        self,
        generation: int,
        parked: Parked,
        queued: dict[Ident, dict],
        changed: set[Ident],
        examine: Callable[[dict], Examined],
    ) -> None:
        """Bring the queues up to date with ``queued`` (the index's queued Workloads), of which only the
        ``changed`` idents may differ from the last refresh unless the configuration's ``generation`` did
        (then every queued Workload not parked is examined again); what was parked meanwhile is shelved,
        and put back when the parked set was cleared since."""
        whole = generation != self._generation
        if whole:
            self._reset(generation, parked.clears)
            idents: set[Ident] = set()
            for ident, wl in queued.items():
                (self._unexamined if wl["metadata"]["uid"] in parked else idents).add(ident)
        else:
            idents = changed | self._waiting
            self._waiting = set()
            if parked.clears != self._clears:  # the parked Workloads were requeued
                self._clears = parked.clears
                idents |= self._unexamined
                self._unexamined = set()
                self._restore(changed, parked)
            if parked.additions != self._parked:
                self._leave_out(parked)
        for ident in sorted(idents):
            self._take_out(ident)
            wl = queued.get(ident)
            if wl is None:
                continue
            if wl["metadata"]["uid"] in parked:
                self._unexamined.add(ident)
                continue
            verdict = examine(wl)
            if verdict == WAITING:
                self._waiting.add(ident)
            elif isinstance(verdict, tuple):
                cluster_queue, shape, workload = verdict
                key = admission_order_key(workload)
                if shape in parked.shapes:
                    parked.add(workload.uid)  # its class was parked: upstream never evaluates it
                    self._shelved[ident] = (cluster_queue, (key, workload), shape)
                    continue
                queue = self.queues.setdefault(cluster_queue, [])
                if whole:
                    queue.append((key, workload))  # sorted once below, not inserted one by one
                else:
                    insort(queue, (key, workload))
                self._at[ident] = (cluster_queue, key, workload.uid)
                self.where[workload.uid] = ident
                self.shapes[workload.uid] = shape
        if whole:
            for queue in self.queues.values():
                queue.sort()
        self._parked = parked.additions

    def _reset(self, generation: int, clears: int) -> None:
        fresh = PendingQueues(_generation=generation, _clears=clears)
        self.__dict__.update(fresh.__dict__)

    def _take_out(self, ident: Ident) -> None:
        self._shelved.pop(ident, None)
        self._unexamined.discard(ident)
        at = self._at.pop(ident, None)
        if at is None:
            return
        cluster_queue, key, uid = at
        queue = self.queues[cluster_queue]
        del queue[bisect_left(queue, key, key=lambda entry: entry[0])]
        del self.where[uid], self.shapes[uid]

    def _leave_out(self, parked: Parked) -> None:
        """Take the Workloads parked since the last refresh out, so a cycle's head is found in O(1)."""
        for cluster_queue, queue in self.queues.items():
            gone = [entry for entry in queue if entry[1].uid in parked]
            if not gone:
                continue
            self.queues[cluster_queue] = [entry for entry in queue if entry[1].uid not in parked]
            for entry in gone:
                uid = entry[1].uid
                ident = self.where.pop(uid)
                del self._at[ident]
                self._shelved[ident] = (cluster_queue, entry, self.shapes.pop(uid))

    def _restore(self, changed: set[Ident], parked: Parked) -> None:
        """Put the shelved entries back (the parked Workloads were requeued): the configuration is the same, so
        their verdict is too, but for those that changed since (examined again) and those parked again,
        or of a class parked again, since the requeue."""
        touched, still = set(), {}
        for ident, shelved in self._shelved.items():
            cluster_queue, entry, shape = shelved
            if ident in changed:
                continue
            uid = entry[1].uid
            if shape in parked.shapes and uid not in parked:
                parked.add(uid)  # as a fresh read would: upstream never evaluates it
            if uid in parked:
                still[ident] = shelved
                continue
            self.queues.setdefault(cluster_queue, []).append(entry)
            touched.add(cluster_queue)
            self._at[ident] = (cluster_queue, entry[0], uid)
            self.where[uid], self.shapes[uid] = ident, shape
        self._shelved = still
        for cluster_queue in touched:
            self.queues[cluster_queue].sort()  # two sorted runs, merged
