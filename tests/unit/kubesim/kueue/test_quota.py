"""Kueue's quota math (available / potentialAvailable over cohorts, lending and borrowing limits,
hierarchical cohorts) and the quantity formatting its messages use."""

from __future__ import annotations

import pytest

from kubesim import quantity
from kubesim.kueue.model import (
    Admission,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    PodSet,
    PodSetAssignment,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    Workload,
)
from kubesim.kueue.quota import QuotaTree, available, borrowing_height, potential_available

CPU = ("default", "cpu")


def group(
    nominal: int, borrowing_limit: int | None = None, lending_limit: int | None = None
) -> ResourceGroup:
    quota = ResourceQuota(nominal, borrowing_limit, lending_limit)
    return ResourceGroup(("cpu",), (FlavorQuotas("default", {"cpu": quota}),))


def cq(name: str, nominal: int, cohort: str | None = None, **limits) -> ClusterQueue:
    return ClusterQueue(name, (group(nominal, **limits),), cohort=cohort)


def using(name: str, cq_name: str, cpu: int) -> Workload:
    admission = Admission(cq_name, (PodSetAssignment("head", {"cpu": "default"}, {"cpu": cpu}, 1),))
    return Workload(f"default/{name}", name, cq_name, (PodSet("head", 1, {"cpu": cpu}),), admission=admission)


def tree(
    *queues: ClusterQueue, cohorts: tuple[Cohort, ...] = (), workloads: tuple[Workload, ...] = ()
) -> QuotaTree:
    admitted: dict[str, list[Workload]] = {}
    for w in workloads:
        admitted.setdefault(w.cluster_queue, []).append(w)
    return QuotaTree(
        Snapshot(
            cluster_queues={q.name: q for q in queues},
            cohorts={c.name: c for c in cohorts},
            admitted=admitted,
        )
    )


def test_without_cohort_capacity_is_nominal():
    t = tree(cq("a", 4), workloads=(using("w", "a", 3),))
    assert potential_available(t.cq("a"), CPU) == 4
    assert available(t.cq("a"), CPU) == 1


def test_flat_cohort_lends_unused_quota_and_borrowing_limit_caps_it():
    t = tree(cq("a", 4, "c", borrowing_limit=2), cq("b", 4, "c"))
    assert t.cohorts["c"].subtree_quota[CPU] == 8
    assert potential_available(t.cq("a"), CPU) == 6  # nominal + borrowingLimit
    assert available(t.cq("a"), CPU) == 6
    assert potential_available(t.cq("b"), CPU) == 8
    t.add_workload(using("w", "b", 5))
    assert t.cohorts["c"].usage[CPU] == 5
    assert available(t.cq("a"), CPU) == 3
    assert borrowing_height(t.cq("b"), CPU, 1) == (1, False)  # borrowing from the root cohort
    assert borrowing_height(t.cq("a"), CPU, 3) == (0, True)  # within nominal


def test_lending_limit_keeps_quota_local_and_only_excess_usage_reaches_the_cohort():
    t = tree(cq("a", 4, "c", lending_limit=1), cq("b", 4, "c"))
    assert t.cq("a").local_quota(CPU) == 3
    assert t.cohorts["c"].subtree_quota[CPU] == 5  # 1 lent by a + 4 of b
    assert potential_available(t.cq("a"), CPU) == 8
    assert potential_available(t.cq("b"), CPU) == 5
    t.add_workload(using("w", "a", 2))
    assert t.cohorts["c"].usage.get(CPU, 0) == 0  # fits in a's local quota
    assert available(t.cq("b"), CPU) == 5
    t.add_workload(using("x", "a", 2))
    assert t.cohorts["c"].usage[CPU] == 1
    assert available(t.cq("b"), CPU) == 4
    t.remove_workload(using("w", "a", 2))
    assert t.cohorts["c"].usage.get(CPU, 0) == 0
    assert t.cq("a").usage[CPU] == 2


def test_hierarchical_cohorts_add_their_own_quota_and_paths_name_every_level():
    cohorts = (Cohort("org", None, (group(2),)), Cohort("dept", "org"))
    t = tree(cq("x", 2, "dept"), cq("y", 1, "org"), cohorts=cohorts)
    assert t.cohorts["dept"].subtree_quota[CPU] == 2
    assert t.cohorts["org"].subtree_quota[CPU] == 5
    assert potential_available(t.cq("x"), CPU) == 5
    assert t.cq("x").path() == "/org/dept/x"
    assert t.cq("y").path() == "/org/y"
    # 3 does not fit in x (2) nor in dept (2): it borrows from org, two levels up.
    assert borrowing_height(t.cq("x"), CPU, 3) == (2, False)
    t.add_workload(using("w", "x", 4))
    assert t.cohorts["dept"].usage[CPU] == 4
    assert t.cohorts["org"].usage[CPU] == 4
    assert available(t.cq("y"), CPU) == 1


def test_cohort_lending_limit_in_a_hierarchy():
    cohorts = (Cohort("org"), Cohort("dept", "org", (group(4, lending_limit=0),)))
    t = tree(cq("x", 0, "dept"), cq("y", 0, "org"), cohorts=cohorts)
    # dept keeps all its 4 for its own subtree: y can never get any.
    assert potential_available(t.cq("x"), CPU) == 4
    assert potential_available(t.cq("y"), CPU) == 0


def test_cohort_cycle_makes_its_queues_unschedulable():
    t = tree(cq("a", 1, "p"), cohorts=(Cohort("p", "q"), Cohort("q", "p")))
    assert t.in_cycle == {"a"}


@pytest.mark.parametrize(
    ("resource", "text", "value", "printed"),
    [
        ("cpu", "1", 1000, "1"),
        ("cpu", "500m", 500, "500m"),
        ("cpu", "2.5", 2500, "2500m"),
        ("cpu", "100u", 1, "1m"),
        ("memory", "8G", 8_000_000_000, "7812500Ki"),
        ("memory", "4Gi", 4 * 1024**3, "4Gi"),
        ("memory", "200Mi", 200 * 1024**2, "200Mi"),
        ("memory", "1000", 1000, "1k"),
        ("nvidia.com/gpu", "2", 2, "2"),
        ("nvidia.com/gpu", "2k", 2000, "2k"),
    ],
)
def test_quantities_parse_to_kueue_units_and_print_like_kueue(resource, text, value, printed):
    assert quantity.to_canonical(resource, text) == value
    assert quantity.to_string(resource, value) == printed


def test_zero_and_negative_quantities_print():
    assert quantity.to_string("cpu", 0) == "0"
    assert quantity.to_string("memory", -2048) == "-2Ki"
