"""Kueue admission cycle cost (issue 3 §6): the pure ``schedule_cycle`` over n pending workloads.

The setup is the one the issue names: 10 ClusterQueues in 2 cohorts (5 each) sharing one flavor, every
ClusterQueue full with admitted workloads of mixed priority, and the pending workloads spread evenly over
the queues with mixed priorities. Preemption is enabled (LowerPriority within the ClusterQueue, Any for
reclaim), so each head's nomination walks flavor assignment *and* preemption-target search: the expensive
path, not a trivial "no quota" answer. The admitted set stays fixed while n grows, so the growth ratio shows
how the cost scales with the pending backlog alone.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import replace

from kubesim.kueue.model import (
    ANY,
    LOWER_PRIORITY,
    Admission,
    ClusterQueue,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    Workload,
)
from kubesim.kueue.scheduler import schedule, schedule_cycle

CLUSTER_QUEUES = 10
COHORTS = 2
FLAVOR = "default-flavor"
CQ_CPU_MILLI = 8_000
CQ_MEMORY = 32 * 2**30
JOB_CPU_MILLI = 1_000
JOB_MEMORY = 2 * 2**30
PRIORITIES = (0, 100, 1000)


def _cluster_queue(index: int) -> ClusterQueue:
    quotas = {
        "cpu": ResourceQuota(nominal=CQ_CPU_MILLI),
        "memory": ResourceQuota(nominal=CQ_MEMORY),
    }
    return ClusterQueue(
        name=f"cq-{index}",
        resource_groups=(ResourceGroup(("cpu", "memory"), (FlavorQuotas(FLAVOR, quotas),)),),
        cohort=f"cohort-{index % COHORTS}",
        preemption=PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY, reclaim_within_cohort=ANY),
        namespace_selector={},
    )


def _pod_sets() -> tuple[PodSet, ...]:
    return (
        PodSet("head", 1, {"cpu": JOB_CPU_MILLI // 2, "memory": JOB_MEMORY // 2}),
        PodSet("submitter", 1, {"cpu": JOB_CPU_MILLI // 2, "memory": JOB_MEMORY // 2}),
    )


def _workload(seq: int, cq: str, priority: int, admitted: bool) -> Workload:
    admission = None
    if admitted:
        admission = Admission(
            cq,
            tuple(
                PodSetAssignment(ps.name, {r: FLAVOR for r in ps.requests}, ps.total(), ps.count)
                for ps in _pod_sets()
            ),
            reserved_at=float(seq),
        )
    return Workload(
        key=f"ns-{cq}/wl-{seq}",
        uid=f"uid-{seq}",
        cluster_queue=cq,
        pod_sets=_pod_sets(),
        priority=priority,
        queue_timestamp=float(seq),
        creation_seq=seq,
        job_uid=f"job-{seq}",
        namespace=f"ns-{cq}",
        local_queue="lq",
        admission=admission,
    )


def build(pending: int, seed: int = 7) -> tuple[Snapshot, dict[str, list[Workload]]]:
    """A snapshot with every ClusterQueue full, and ``pending`` workloads spread over the queues."""
    rng = random.Random(seed)
    queues = [_cluster_queue(i) for i in range(CLUSTER_QUEUES)]
    per_cq_admitted = CQ_CPU_MILLI // JOB_CPU_MILLI
    seq = 0
    admitted: dict[str, list[Workload]] = {}
    for cq in queues:
        for _ in range(per_cq_admitted):
            seq += 1
            admitted.setdefault(cq.name, []).append(_workload(seq, cq.name, rng.choice(PRIORITIES[:2]), True))
    pending_by_cq: dict[str, list[Workload]] = {cq.name: [] for cq in queues}
    for i in range(pending):
        seq += 1
        cq = queues[i % CLUSTER_QUEUES].name
        pending_by_cq[cq].append(_workload(seq, cq, rng.choice(PRIORITIES), False))
    snapshot = Snapshot(
        flavors={FLAVOR: ResourceFlavor(FLAVOR)},
        cluster_queues={cq.name: cq for cq in queues},
        admitted=admitted,
    )
    return snapshot, pending_by_cq


def time_cycle(pending: int, repeats: int) -> dict:
    """Median and best wall time of one ``schedule_cycle`` over ``pending`` workloads."""
    snapshot, pending_by_cq = build(pending)
    decisions = schedule_cycle(snapshot, pending_by_cq)  # warm-up, and a sanity check of the setup
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        schedule_cycle(snapshot, pending_by_cq)
        samples.append(time.perf_counter() - start)
    kinds: dict[str, int] = {}
    for decision in decisions:
        kinds[type(decision).__name__] = kinds.get(type(decision).__name__, 0) + 1
    return {
        "pending": pending,
        "median_ms": round(statistics.median(samples) * 1000, 2),
        "min_ms": round(min(samples) * 1000, 2),
        "decisions": kinds,
    }


def time_deep_queue(pending: int) -> dict:
    """``scheduler.schedule`` (cycles until nothing more can happen) over one full ClusterQueue with no
    preemption: the shape of a single queue with a long backlog, as in the trigger benchmark.

    Under BestEffortFIFO each cycle parks one head that does not fit, so reaching quiescence takes one
    cycle per pending workload; this shows what that costs as the backlog grows.
    """
    snapshot, pending_by_cq = build(pending * CLUSTER_QUEUES)
    only = "cq-0"
    snapshot.cluster_queues = {
        only: replace(snapshot.cluster_queues[only], preemption=PreemptionPolicy(), cohort=None)
    }
    snapshot.admitted = {only: snapshot.admitted[only]}
    queue = {only: pending_by_cq[only][:pending]}
    start = time.perf_counter()
    decisions = schedule(snapshot, queue)
    return {
        "pending": pending,
        "schedule_s": round(time.perf_counter() - start, 3),
        "decisions": len(decisions),
    }


def run(sizes: tuple[int, ...] = (250, 500, 1000, 2000), repeats: int = 30) -> dict:
    """Cycle cost per n, and growth ratios against linear and n log n between consecutive sizes."""
    rows = [time_cycle(n, repeats) for n in sizes]
    growth = []
    for small, large in zip(rows, rows[1:], strict=False):
        n0, n1 = small["pending"], large["pending"]
        growth.append(
            {
                "from": n0,
                "to": n1,
                "measured_ratio": round(large["median_ms"] / small["median_ms"], 2),
                "n_log_n_ratio": round((n1 * math.log(n1)) / (n0 * math.log(n0)), 2),
            }
        )
    at_1000 = next((row for row in rows if row["pending"] == 1000), None)
    deep = [time_deep_queue(n) for n in (250, 500, 1000)]
    return {
        "deep_queue": deep,
        "setup": f"{CLUSTER_QUEUES} ClusterQueues, {COHORTS} cohorts, full quota, preemption enabled",
        "rows": rows,
        "growth": growth,
        "target_ms": 100,
        "cycle_ms_at_1000": at_1000["median_ms"] if at_1000 else None,
    }
