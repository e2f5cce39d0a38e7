"""The queues page's preemption policy in words and its cohort usage (Kueue v0.19's ``spec.preemption``)."""

from __future__ import annotations

import pytest
from kueue_ray.ui.policy import cohort_usage, may_preempt_words, preemption_words

CLASSES = {"dev-priority": 100, "prod-priority": 1000}


def cq(name: str, cohort: str | None = "shared", usage: dict | None = None, **preemption) -> dict:
    spec: dict = {
        "preemption": preemption,
        "resourceGroups": [
            {
                "flavors": [
                    {
                        "name": "default",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 48},
                            {"name": "memory", "nominalQuota": "384Gi"},
                        ],
                    },
                    {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]},
                ]
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    status = {
        "flavorsUsage": [
            {"name": flavor, "resources": [{"name": r, "total": v} for r, v in resources.items()]}
            for flavor, resources in (usage or {}).items()
        ]
    }
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_the_shipped_team_queues_dev_work_can_be_preempted_by_prod_and_reclaimed_by_the_other_team():
    a = cq("team-a-cq", withinClusterQueue="LowerPriority", reclaimWithinCohort="Any")
    b = cq("team-b-cq", withinClusterQueue="LowerPriority", reclaimWithinCohort="Any")
    assert preemption_words(a, [a, b], CLASSES) == [
        "dev-priority work here can be preempted by prod-priority work in this queue, and reclaimed by "
        "team-b-cq (any priority) while this queue borrows.",
        "prod-priority work here can be reclaimed by team-b-cq (any priority) while this queue borrows.",
    ]
    assert may_preempt_words(a, [a, b]) == (
        "Work queued here may preempt lower-priority work in this queue; any work of team-b-cq beyond "
        "their nominal quota, to take back its own."
    )


@pytest.mark.parametrize(
    ("within", "dev", "prod"),
    [
        (
            "Never",
            "dev-priority work here is never preempted.",
            "prod-priority work here is never preempted.",
        ),
        (
            "LowerPriority",
            "dev-priority work here can be preempted by prod-priority work in this queue.",
            "prod-priority work here is never preempted.",
        ),
        (
            "LowerOrNewerEqualPriority",
            "dev-priority work here can be preempted by prod-priority or older dev-priority work in this queue.",
            "prod-priority work here can be preempted by older prod-priority work in this queue.",
        ),
    ],
)
def test_within_cluster_queue_without_a_cohort(within, dev, prod):
    alone = cq("alone", cohort=None, withinClusterQueue=within)
    assert preemption_words(alone, [alone], CLASSES) == [dev, prod]


@pytest.mark.parametrize(
    ("reclaim", "dev_tail", "prod_words"),
    [
        ("Never", None, "prod-priority work here is never preempted."),
        (
            "LowerPriority",
            "reclaimed by team-b-cq's prod-priority work while this queue borrows.",
            "prod-priority work here is never preempted.",
        ),
        (
            "Any",
            "reclaimed by team-b-cq (any priority) while this queue borrows.",
            "prod-priority work here can be reclaimed by team-b-cq (any priority) while this queue borrows.",
        ),
    ],
)
def test_a_peers_reclaim_within_cohort_is_read_from_the_side_of_the_work_here(reclaim, dev_tail, prod_words):
    a = cq("team-a-cq")  # withinClusterQueue defaults to Never
    b = cq("team-b-cq", reclaimWithinCohort=reclaim)
    dev, prod = preemption_words(a, [a, b], CLASSES)
    assert dev == (
        "dev-priority work here is never preempted."
        if dev_tail is None
        else f"dev-priority work here can be {dev_tail}"
    )
    assert prod == prod_words


def test_a_peers_borrow_within_cohort_preempts_only_up_to_its_threshold():
    a = cq("team-a-cq")
    b = cq(
        "team-b-cq",
        reclaimWithinCohort="LowerPriority",
        borrowWithinCohort={"policy": "LowerPriority", "maxPriorityThreshold": 100},
    )
    classes = {"dev-priority": 100, "staging-priority": 500, "prod-priority": 1000}
    dev, staging, prod = preemption_words(a, [a, b], classes)
    assert dev == (
        "dev-priority work here can be reclaimed by team-b-cq's staging-priority or prod-priority work "
        "(also while it borrows itself) while this queue borrows."
    )
    assert (
        "also while it borrows" not in staging
    )  # above the threshold: only reclaimed, not taken by a borrower
    assert staging == (
        "staging-priority work here can be reclaimed by team-b-cq's prod-priority work while this queue borrows."
    )
    assert prod == "prod-priority work here is never preempted."
    assert may_preempt_words(b, [a, b]).endswith(
        "lower-priority work at priority 100 or less of borrowing peers while it borrows itself."
    )


def test_without_known_priority_classes_one_sentence_covers_all_work():
    a = cq("team-a-cq", withinClusterQueue="LowerPriority")
    b = cq("team-b-cq", reclaimWithinCohort="Any", borrowWithinCohort={"policy": "Never"})
    assert preemption_words(a, [a, b]) == [
        "Work here can be preempted by higher-priority work in this queue, and reclaimed by team-b-cq (any "
        "priority) while this queue borrows."
    ]
    assert may_preempt_words(cq("c", cohort=None), []) == "Work queued here waits: it preempts nothing."


def test_a_cohort_shows_each_members_usage_against_its_nominal_quota_and_who_borrows():
    a = cq("team-a-cq", usage={"default": {"cpu": "60", "memory": "480Gi"}, "gpu": {"nvidia.com/gpu": "6"}})
    b = cq("team-b-cq", usage={"default": {"cpu": "2", "memory": "8000000Ki"}})
    cohort = cohort_usage("shared", [b, a])
    assert cohort["cluster_queues"] == ["team-a-cq", "team-b-cq"]
    assert [r["resource"] for r in cohort["resources"]] == ["cpu", "memory", "nvidia.com/gpu"]
    [team_a, team_b] = cohort["members"]
    assert team_a["usage"] == [
        {"usage": "60", "nominal": "48", "borrowed": "12"},
        {"usage": "480Gi", "nominal": "384Gi", "borrowed": "96Gi"},
        {"usage": "6", "nominal": "4", "borrowed": "2"},
    ]
    assert team_b["usage"][1] == {"usage": "7.63Gi", "nominal": "384Gi", "borrowed": None}
    assert team_b["usage"][2] == {"usage": "0", "nominal": "4", "borrowed": None}
    assert cohort["total"][2] == {"usage": "6", "nominal": "8", "borrowed": None}


def test_the_module_examples_hold():
    import doctest

    from kueue_ray.ui import policy

    assert doctest.testmod(policy).failed == 0
