"""Flavor assignment: flavor order, fungibility (MayStopSearch / TryNextFlavor, and the preference
between preempting and borrowing), node labels and taints, several pod sets sharing a flavor, a
``pods`` quota, and Kueue's exact reasons."""

from __future__ import annotations

from kubesim.kueue import preemption
from kubesim.kueue.flavors import FIT, NO_FIT, PREEMPT, assign_flavors
from kubesim.kueue.model import (
    BORROWING_OVER_PREEMPTION,
    LOWER_PRIORITY,
    MAY_STOP_SEARCH,
    PREEMPTION_OVER_BORROWING,
    TRY_NEXT_FLAVOR,
    Admission,
    ClusterQueue,
    FlavorFungibility,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    Taint,
    Toleration,
    Workload,
)
from kubesim.kueue.quota import QuotaTree

FLAVORS = {
    "on-demand": ResourceFlavor("on-demand", {"type": "on-demand"}),
    "spot": ResourceFlavor("spot", {"type": "spot"}, node_taints=(Taint("spot", "true", "NoSchedule"),)),
    "reserved": ResourceFlavor("reserved", {"type": "reserved"}),
}


def queue(name="cq", flavors=(("on-demand", 2000),), cohort=None, **kwargs) -> ClusterQueue:
    group = ResourceGroup(
        ("cpu",), tuple(FlavorQuotas(f, {"cpu": ResourceQuota(nominal)}) for f, nominal in flavors)
    )
    return ClusterQueue(name, (group,), cohort=cohort, namespace_selector={}, **kwargs)


def pending(*pod_sets: PodSet, priority: int = 0, cq: str = "cq") -> Workload:
    return Workload("default/w", "uid-w", cq, tuple(pod_sets), priority=priority, queue_timestamp=100)


def running(name: str, cq: str, flavor: str, cpu: int, priority: int = 0) -> Workload:
    admission = Admission(cq, (PodSetAssignment("head", {"cpu": flavor}, {"cpu": cpu}, 1),), reserved_at=1)
    return Workload(
        f"default/{name}",
        f"uid-{name}",
        cq,
        (PodSet("head", 1, {"cpu": cpu}),),
        priority,
        admission=admission,
    )


def assign(workload: Workload, *queues: ClusterQueue, admitted: tuple[Workload, ...] = ()):
    snapshot = Snapshot(flavors=FLAVORS, cluster_queues={q.name: q for q in queues})
    for w in admitted:
        snapshot.admitted.setdefault(w.cluster_queue, []).append(w)
    tree = QuotaTree(snapshot)
    cq = snapshot.cluster_queues[workload.cluster_queue]

    def oracle(fr, value):
        return preemption.simulate_preemption(tree, cq, workload, fr, value)

    return assign_flavors(tree, cq, workload, FLAVORS, oracle)


def head(cpu: int, **kwargs) -> PodSet:
    return PodSet("head", 1, {"cpu": cpu}, **kwargs)


def test_first_flavor_that_fits_is_taken_in_queue_order():
    result = assign(pending(head(1000)), queue(flavors=(("on-demand", 2000), ("reserved", 2000))))
    assert result.mode == FIT
    assert result.pod_sets[0].flavors["cpu"].flavor == "on-demand"
    assert result.usage == {("on-demand", "cpu"): 1000}
    assert result.message() == ""


def test_full_flavor_is_skipped_for_the_next_one():
    cq = queue(flavors=(("on-demand", 2000), ("reserved", 2000)))
    result = assign(pending(head(2000)), cq, admitted=(running("r", "cq", "on-demand", 1000),))
    assert result.mode == FIT
    assert result.pod_sets[0].flavors["cpu"].flavor == "reserved"


def test_untolerated_taint_and_node_selector_mismatch_rule_flavors_out():
    cq = queue(flavors=(("spot", 4000), ("reserved", 4000), ("on-demand", 4000)))
    workload = pending(head(1000, node_selector={"type": "on-demand"}))
    result = assign(workload, cq)
    assert result.pod_sets[0].flavors["cpu"].flavor == "on-demand"

    only_spot = queue(flavors=(("spot", 4000),))
    result = assign(pending(head(1000)), only_spot)
    assert result.mode == NO_FIT
    assert result.message() == (
        "couldn't assign flavors to pod set head: untolerated taint {spot true NoSchedule <nil>} in flavor spot"
    )
    tolerating = pending(head(1000, tolerations=(Toleration("spot", "Equal", "true", "NoSchedule"),)))
    assert assign(tolerating, only_spot).pod_sets[0].flavors["cpu"].flavor == "spot"
    exists_any = pending(head(1000, tolerations=(Toleration(operator="Exists"),)))
    assert assign(exists_any, only_spot).mode == FIT

    result = assign(
        pending(head(1000, node_selector={"type": "on-demand"})), queue(flavors=(("reserved", 4000),))
    )
    assert (
        result.message()
        == "couldn't assign flavors to pod set head: flavor reserved doesn't match node affinity"
    )


def test_pod_sets_add_up_in_a_flavor_and_the_message_names_earlier_requests():
    workload = pending(head(1500), PodSet("workers", 2, {"cpu": 500}))
    result = assign(workload, queue(flavors=(("on-demand", 2000),)))
    assert result.mode == NO_FIT
    assert result.message() == (
        "couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor on-demand, "
        "previously considered podsets requests (1500m) + current podset request (1) > maximum capacity (2)"
    )


def test_resource_without_a_resource_group_is_unavailable():
    workload = pending(PodSet("head", 1, {"cpu": 1000, "nvidia.com/gpu": 1}))
    result = assign(workload, queue())
    assert result.mode == NO_FIT
    assert (
        result.message()
        == "couldn't assign flavors to pod set head: resource nvidia.com/gpu unavailable in ClusterQueue"
    )


def test_shortage_within_nominal_reports_more_needed_and_stays_pending_without_candidates():
    cq = queue(flavors=(("on-demand", 2000),))
    result = assign(pending(head(2000)), cq, admitted=(running("r", "cq", "on-demand", 1500),))
    assert result.mode == PREEMPT  # preemption could help in principle, but the policy allows none
    assert result.message() == (
        "couldn't assign flavors to pod set head: insufficient unused quota for cpu in flavor on-demand, 1500m more needed"
    )


def test_reasons_from_every_tried_flavor_are_sorted_and_joined():
    cq = queue(flavors=(("on-demand", 1000), ("reserved", 500)))
    result = assign(pending(head(2000)), cq)
    assert result.message() == (
        "couldn't assign flavors to pod set head: "
        "insufficient quota for cpu in flavor on-demand, previously considered podsets requests (0) + "
        "current podset request (2) > maximum capacity (1), "
        "insufficient quota for cpu in flavor reserved, previously considered podsets requests (0) + "
        "current podset request (2) > maximum capacity (500m)"
    )


def borrowing_setup(when_can_borrow: str):
    fungibility = FlavorFungibility(when_can_borrow=when_can_borrow)
    mine = queue(
        "mine", (("on-demand", 1000), ("reserved", 4000)), cohort="c", flavor_fungibility=fungibility
    )
    lender = queue("lender", (("on-demand", 4000),), cohort="c")
    return assign(pending(head(2000), cq="mine"), mine, lender)


def test_when_can_borrow_may_stop_search_borrows_in_the_first_flavor():
    result = borrowing_setup(MAY_STOP_SEARCH)
    choice = result.pod_sets[0].flavors["cpu"]
    assert (choice.flavor, choice.mode, result.borrowing) == ("on-demand", FIT, 1)


def test_when_can_borrow_try_next_flavor_prefers_a_flavor_without_borrowing():
    result = borrowing_setup(TRY_NEXT_FLAVOR)
    choice = result.pod_sets[0].flavors["cpu"]
    assert (choice.flavor, choice.mode, result.borrowing) == ("reserved", FIT, 0)


def preempting_setup(when_can_preempt: str):
    fungibility = FlavorFungibility(when_can_preempt=when_can_preempt)
    cq = queue(
        flavors=(("on-demand", 2000), ("reserved", 2000)),
        preemption=PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        flavor_fungibility=fungibility,
    )
    victim = running("low", "cq", "on-demand", 2000, priority=0)
    return assign(pending(head(2000), priority=5), cq, admitted=(victim,))


def test_when_can_preempt_try_next_flavor_takes_a_free_flavor_instead_of_preempting():
    result = preempting_setup(TRY_NEXT_FLAVOR)
    assert result.mode == FIT
    assert result.pod_sets[0].flavors["cpu"].flavor == "reserved"


def test_when_can_preempt_may_stop_search_preempts_in_the_first_flavor():
    result = preempting_setup(MAY_STOP_SEARCH)
    assert result.mode == PREEMPT
    assert result.pod_sets[0].flavors["cpu"].flavor == "on-demand"
    assert result.needs_preemption() == {("on-demand", "cpu")}


def test_admission_lists_each_pod_set_with_its_totals():
    workload = pending(head(1000), PodSet("workers", 2, {"cpu": 250}))
    admission = assign(workload, queue()).admission("cq", reserved_at=5.0)
    assert [(a.name, a.flavors, a.resource_usage, a.count) for a in admission.pod_set_assignments] == [
        ("head", {"cpu": "on-demand"}, {"cpu": 1000}, 1),
        ("workers", {"cpu": "on-demand"}, {"cpu": 500}, 2),
    ]
    assert admission.usage() == {("on-demand", "cpu"): 1500}


def preference_setup(preference: str, *, victim_priority: int = 0):
    """on-demand: 2 CPUs of its own, taken by a running job; reserved: none of its own, a lender's 2 to borrow."""
    fungibility = FlavorFungibility(TRY_NEXT_FLAVOR, TRY_NEXT_FLAVOR, preference)
    mine = queue(
        "mine",
        (("on-demand", 2000), ("reserved", 0)),
        cohort="c",
        preemption=PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY),
        flavor_fungibility=fungibility,
    )
    lender = queue("lender", (("reserved", 2000),), cohort="c")
    victim = running("low", "mine", "on-demand", 2000, priority=victim_priority)
    return assign(pending(head(2000), priority=5, cq="mine"), mine, lender, admitted=(victim,))


def test_preference_decides_between_preempting_in_own_quota_and_borrowing():
    preempts = preference_setup(PREEMPTION_OVER_BORROWING)
    assert (preempts.mode, preempts.pod_sets[0].flavors["cpu"].flavor) == (PREEMPT, "on-demand")
    assert (preempts.needs_preemption(), preempts.borrowing) == ({("on-demand", "cpu")}, 0)

    borrows = preference_setup(BORROWING_OVER_PREEMPTION)
    assert (borrows.mode, borrows.pod_sets[0].flavors["cpu"].flavor, borrows.borrowing) == (
        FIT,
        "reserved",
        1,
    )

    # The running job outranks the pending one: on-demand borrows less but cannot admit at all.
    no_candidate = preference_setup(PREEMPTION_OVER_BORROWING, victim_priority=9)
    assert (no_candidate.mode, no_candidate.pod_sets[0].flavors["cpu"].flavor) == (FIT, "reserved")


def pods_queue(pods: int) -> ClusterQueue:
    group = ResourceGroup(
        ("cpu", "pods"),
        (FlavorQuotas("on-demand", {"cpu": ResourceQuota(8000), "pods": ResourceQuota(pods)}),),
    )
    return ClusterQueue("cq", (group,), namespace_selector={})


def test_a_queue_covering_pods_charges_each_pod_set_its_pod_count():
    workload = pending(head(1000), PodSet("workers", 2, {"cpu": 250}), PodSet("submitter", 1, {"cpu": 500}))
    result = assign(workload, pods_queue(4))
    assert result.mode == FIT
    assert [(a.name, a.flavors, a.resource_usage) for a in result.admission("cq").pod_set_assignments] == [
        ("head", {"cpu": "on-demand", "pods": "on-demand"}, {"cpu": 1000, "pods": 1}),
        ("workers", {"cpu": "on-demand", "pods": "on-demand"}, {"cpu": 500, "pods": 2}),
        ("submitter", {"cpu": "on-demand", "pods": "on-demand"}, {"cpu": 500, "pods": 1}),
    ]
    assert result.usage == {("on-demand", "cpu"): 2000, ("on-demand", "pods"): 4}

    uncovered = assign(workload, queue(flavors=(("on-demand", 4000),)))
    assert uncovered.usage == {("on-demand", "cpu"): 2000}


def test_pods_quota_counts_earlier_pod_sets_and_names_them_in_the_message():
    workload = pending(head(1000), PodSet("workers", 3, {"cpu": 250}), PodSet("submitter", 1, {"cpu": 500}))
    result = assign(workload, pods_queue(4))
    assert result.mode == NO_FIT
    assert result.message() == (
        "couldn't assign flavors to pod set submitter: insufficient quota for pods in flavor on-demand, "
        "previously considered podsets requests (4) + current podset request (1) > maximum capacity (4)"
    )
