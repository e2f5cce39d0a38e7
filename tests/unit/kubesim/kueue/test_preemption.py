"""Classic preemption: policies, candidate order, minimal victim sets, reasons and messages."""

from __future__ import annotations

from kubesim.kueue.model import (
    ANY,
    LOWER_OR_NEWER_EQUAL_PRIORITY,
    LOWER_PRIORITY,
    Admission,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    Preempt,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    Workload,
)
from kubesim.kueue.preemption import eviction_message, get_targets, satisfies_policy
from kubesim.kueue.quota import QuotaTree
from kubesim.kueue.scheduler import schedule_cycle

CPU = ("default", "cpu")


def queue(name: str, nominal: int, cohort: str | None = None, **policy) -> ClusterQueue:
    group = ResourceGroup(("cpu",), (FlavorQuotas("default", {"cpu": ResourceQuota(nominal)}),))
    return ClusterQueue(
        name, (group,), cohort=cohort, preemption=PreemptionPolicy(**policy), namespace_selector={}
    )


def running(name: str, cq: str, cpu: int, priority: int = 0, reserved_at: float = 1.0, **kwargs) -> Workload:
    admission = Admission(cq, (PodSetAssignment("head", {"cpu": "default"}, {"cpu": cpu}, 1),), reserved_at)
    return Workload(
        f"default/{name}",
        f"uid-{name}",
        cq,
        (PodSet("head", 1, {"cpu": cpu}),),
        priority,
        queue_timestamp=reserved_at,
        admission=admission,
        **kwargs,
    )


def preemptor(cpu: int, cq: str = "cq", priority: int = 10, queue_timestamp: float = 50.0) -> Workload:
    return Workload(
        "default/new",
        "uid-new",
        cq,
        (PodSet("head", 1, {"cpu": cpu}),),
        priority,
        queue_timestamp,
        job_uid="job-new",
    )


def snapshot(*queues: ClusterQueue, workloads=(), cohorts=()) -> Snapshot:
    snap = Snapshot(
        flavors={"default": ResourceFlavor("default")},
        cluster_queues={q.name: q for q in queues},
        cohorts={c.name: c for c in cohorts},
    )
    for w in workloads:
        snap.admitted.setdefault(w.cluster_queue, []).append(w)
    return snap


def targets(snap: Snapshot, wl: Workload) -> list[tuple[str, str]]:
    tree = QuotaTree(snap)
    usage = {CPU: wl.pod_sets[0].requests["cpu"]}
    found = get_targets(tree, snap.cluster_queues[wl.cluster_queue], wl, {CPU}, usage)
    return [(t.workload.key.split("/")[1], t.reason) for t in found]


def test_policies():
    old_equal = running("old", "cq", 1, priority=10, reserved_at=1)
    new_equal = running("young", "cq", 1, priority=10, reserved_at=99)
    lower = running("low", "cq", 1, priority=1)
    wl = preemptor(1)
    assert satisfies_policy(wl, lower, LOWER_PRIORITY)
    assert not satisfies_policy(wl, new_equal, LOWER_PRIORITY)
    assert satisfies_policy(wl, new_equal, LOWER_OR_NEWER_EQUAL_PRIORITY)
    assert not satisfies_policy(wl, old_equal, LOWER_OR_NEWER_EQUAL_PRIORITY)
    assert satisfies_policy(wl, running("high", "cq", 1, priority=99), ANY)
    assert not satisfies_policy(wl, lower, "Never")


def test_never_policy_has_no_targets():
    snap = snapshot(queue("cq", 2000), workloads=[running("low", "cq", 2000, priority=0)])
    assert targets(snap, preemptor(1000)) == []


def test_lowest_priority_goes_first_and_only_as_many_as_needed():
    snap = snapshot(
        queue("cq", 3000, within_cluster_queue=LOWER_PRIORITY),
        workloads=[running("mid", "cq", 1000, priority=5), running("low", "cq", 2000, priority=1)],
    )
    assert targets(snap, preemptor(2000)) == [("low", "InClusterQueue")]


def test_most_recently_admitted_goes_first_among_equal_priorities():
    snap = snapshot(
        queue("cq", 2000, within_cluster_queue=LOWER_PRIORITY),
        workloads=[running("older", "cq", 1000, reserved_at=1), running("newer", "cq", 1000, reserved_at=2)],
    )
    assert targets(snap, preemptor(1000)) == [("newer", "InClusterQueue")]


def test_workloads_already_being_evicted_go_first():
    snap = snapshot(
        queue("cq", 2000, within_cluster_queue=LOWER_PRIORITY),
        workloads=[
            running("low", "cq", 1000, priority=0),
            running("leaving", "cq", 1000, priority=5, evicted=True),
        ],
    )
    assert targets(snap, preemptor(1000)) == [("leaving", "InClusterQueue")]


def test_greedy_removal_then_add_back_gives_a_minimal_set():
    # Order of trial: small (lowest priority) then big; once big is out, small is not needed after all.
    snap = snapshot(
        queue("cq", 3000, within_cluster_queue=LOWER_PRIORITY),
        workloads=[running("small", "cq", 1000, priority=0), running("big", "cq", 2000, priority=1)],
    )
    assert targets(snap, preemptor(2000)) == [("big", "InClusterQueue")]


def test_lower_or_newer_equal_priority_takes_newer_equals_but_not_older_ones():
    snap = snapshot(
        queue("cq", 2000, within_cluster_queue=LOWER_OR_NEWER_EQUAL_PRIORITY),
        workloads=[running("older", "cq", 1000, priority=10, reserved_at=1)],
    )
    assert targets(snap, preemptor(2000, queue_timestamp=50)) == []
    snap = snapshot(
        queue("cq", 2000, within_cluster_queue=LOWER_OR_NEWER_EQUAL_PRIORITY),
        workloads=[running("newer", "cq", 2000, priority=10, reserved_at=60)],
    )
    assert targets(snap, preemptor(2000, queue_timestamp=50)) == [("newer", "InClusterQueue")]


def test_reclaim_only_from_queues_above_their_nominal_quota():
    snap = snapshot(
        queue("mine", 2000, "c", reclaim_within_cohort=ANY),
        queue("lender", 2000, "c"),
        queue("modest", 2000, "c"),
        workloads=[
            running("borrowing", "lender", 3000, priority=99),
            running("within", "modest", 1000, priority=0),
        ],
    )
    assert targets(snap, preemptor(2000, cq="mine")) == [("borrowing", "InCohortReclamation")]


def test_reclaim_lower_priority_spares_higher_priority_borrowers():
    snap = snapshot(
        queue("mine", 2000, "c", reclaim_within_cohort=LOWER_PRIORITY),
        queue("lender", 2000, "c"),
        workloads=[running("borrowing", "lender", 4000, priority=99)],
    )
    assert targets(snap, preemptor(2000, cq="mine")) == []


def borrow_setup(threshold: int | None) -> Snapshot:
    return snapshot(
        queue(
            "mine",
            2000,
            "c",
            reclaim_within_cohort=LOWER_PRIORITY,
            borrow_within_cohort_policy=LOWER_PRIORITY,
            borrow_max_priority_threshold=threshold,
        ),
        queue("other", 2000, "c"),
        workloads=[running("borrower", "other", 3000, priority=0)],
    )


def test_borrow_within_cohort_preempts_while_the_preemptor_borrows():
    assert targets(borrow_setup(None), preemptor(3000, cq="mine")) == [
        ("borrower", "InCohortReclaimWhileBorrowing")
    ]


def test_borrow_within_cohort_respects_the_max_priority_threshold():
    assert targets(borrow_setup(-1), preemptor(3000, cq="mine")) == []


def test_hierarchical_reclaim_takes_back_quota_lent_to_another_branch():
    cohorts = (Cohort("org"), Cohort("dept-a", "org"), Cohort("dept-b", "org"))
    snap = snapshot(
        queue("a", 2000, "dept-a", reclaim_within_cohort=ANY),
        queue("b", 2000, "dept-b"),
        workloads=[
            running("b1", "b", 2000, priority=50),
            running("b2", "b", 2000, priority=50, reserved_at=2),
        ],
        cohorts=cohorts,
    )
    assert targets(snap, preemptor(2000, cq="a", priority=0)) == [("b2", "InCohortReclamation")]


def test_eviction_message_format():
    wl = preemptor(1000)
    assert eviction_message(wl, "InClusterQueue", "/cq", "/cq") == (
        "Preempted to accommodate a workload (UID: uid-new, JobUID: job-new) due to prioritization in the "
        "ClusterQueue; preemptor path: /cq; preemptee path: /cq"
    )
    no_job = Workload("default/x", "uid-x", "cq", ())
    assert "JobUID: UNKNOWN" in eviction_message(no_job, "InCohortReclaimWhileBorrowing", "/c/a", "/c/b")
    assert "reclamation within the cohort while borrowing" in eviction_message(
        no_job, "InCohortReclaimWhileBorrowing", "/c/a", "/c/b"
    )


def test_preempt_decision_carries_hierarchical_paths_and_messages():
    cohorts = (Cohort("org"), Cohort("dept-a", "org"), Cohort("dept-b", "org"))
    snap = snapshot(
        queue("a", 2000, "dept-a", reclaim_within_cohort=ANY),
        queue("b", 2000, "dept-b"),
        workloads=[running("b1", "b", 4000, priority=50)],
        cohorts=cohorts,
    )
    (decision,) = schedule_cycle(snap, {"a": [preemptor(2000, cq="a", priority=0)]})
    assert isinstance(decision, Preempt)
    (victim,) = decision.victims
    assert victim.reason == "InCohortReclamation"
    assert victim.message.endswith("preemptor path: /org/dept-a/a; preemptee path: /org/dept-b/b")
    assert decision.pending_message.endswith(". Pending the preemption of 1 workload(s)")
