"""Maximum capacity of a ClusterQueue, as Kueue computes it (its potentialAvailable, as kueue_ray.capacity explains)."""

from decimal import Decimal

from kueue_ray.capacity import best_flavor_capacity, max_capacity, total_capacity


def cluster_queue(name, resources, *, cohort=None, flavor="default"):
    spec = {
        "resourceGroups": [
            {
                "coveredResources": [r["name"] for r in resources],
                "flavors": [{"name": flavor, "resources": resources}],
            }
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"metadata": {"name": name}, "spec": spec}


def cohort(name, *, parent=None, resources=None):
    spec = {}
    if parent:
        spec["parentName"] = parent
    if resources:
        spec["resourceGroups"] = [
            {
                "coveredResources": [r["name"] for r in resources],
                "flavors": [{"name": "default", "resources": resources}],
            }
        ]
    return {"metadata": {"name": name}, "spec": spec}


def test_queue_without_cohort_offers_its_nominal_quota():
    cq = cluster_queue(
        "solo", [{"name": "cpu", "nominalQuota": "2"}, {"name": "memory", "nominalQuota": "8Gi"}]
    )
    assert max_capacity(cq) == {"default": {"cpu": Decimal(2), "memory": Decimal(8 * 2**30)}}


def test_cohort_members_lend_everything_without_lending_limits():
    a = cluster_queue("team-a", [{"name": "nvidia.com/gpu", "nominalQuota": "4"}], cohort="shared")
    b = cluster_queue("team-b", [{"name": "nvidia.com/gpu", "nominalQuota": "4"}], cohort="shared")
    assert max_capacity(a, cluster_queues=[a, b]) == {"default": {"nvidia.com/gpu": Decimal(8)}}


def test_borrowing_limit_caps_what_a_queue_can_borrow():
    a = cluster_queue(
        "team-a", [{"name": "nvidia.com/gpu", "nominalQuota": "4", "borrowingLimit": "2"}], cohort="shared"
    )
    b = cluster_queue("team-b", [{"name": "nvidia.com/gpu", "nominalQuota": "8"}], cohort="shared")
    assert max_capacity(a, cluster_queues=[a, b])["default"]["nvidia.com/gpu"] == Decimal(6)
    # team-b may borrow all of team-a's lent quota: 8 + 4
    assert max_capacity(b, cluster_queues=[a, b])["default"]["nvidia.com/gpu"] == Decimal(12)


def test_lending_limit_keeps_quota_out_of_the_cohort():
    a = cluster_queue("team-a", [{"name": "cpu", "nominalQuota": "10", "lendingLimit": "3"}], cohort="shared")
    b = cluster_queue("team-b", [{"name": "cpu", "nominalQuota": "5"}], cohort="shared")
    # team-b sees its own 5 plus the 3 team-a lends; team-a keeps 7 for itself plus the cohort's 8.
    assert max_capacity(b, cluster_queues=[a, b])["default"]["cpu"] == Decimal(8)
    assert max_capacity(a, cluster_queues=[a, b])["default"]["cpu"] == Decimal(15)


def test_hierarchical_cohorts_and_cohort_own_quota():
    root = cohort("root", resources=[{"name": "cpu", "nominalQuota": "4"}])
    child = cohort(
        "child", parent="root", resources=[{"name": "cpu", "nominalQuota": "1", "borrowingLimit": "2"}]
    )
    a = cluster_queue("a", [{"name": "cpu", "nominalQuota": "2"}], cohort="child")
    other = cluster_queue("other", [{"name": "cpu", "nominalQuota": "10"}], cohort="root")
    # child subtree = 1 + 2 = 3; it may borrow at most 2 more from root, so a can reach 5.
    assert max_capacity(a, cluster_queues=[a, other], cohorts=[root, child])["default"]["cpu"] == Decimal(5)
    # other can use root's 4, its own 10 and everything child lends (3): 17.
    assert max_capacity(other, cluster_queues=[a, other], cohorts=[root, child])["default"]["cpu"] == Decimal(
        17
    )


def test_only_the_queue_s_own_flavors_are_reported_and_combined():
    cq = {
        "metadata": {"name": "two-flavors"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu"],
                    "flavors": [
                        {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": "2"}]},
                        {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "3"}]},
                    ],
                }
            ]
        },
    }
    capacity = max_capacity(cq)
    assert capacity == {"on-demand": {"cpu": Decimal(2)}, "spot": {"cpu": Decimal(3)}}
    assert best_flavor_capacity(capacity, "cpu") == Decimal(3)
    assert total_capacity(capacity, "cpu") == Decimal(5)
    assert best_flavor_capacity(capacity, "nvidia.com/gpu") is None


def test_shortfall_names_the_resource_that_can_never_fit():
    from kueue_ray.capacity import find_shortfall

    capacity = {"default": {"cpu": Decimal(2), "memory": Decimal(2**34)}}
    head_and_submitter = [
        {"name": "head", "count": 1, "requests": {"cpu": "2", "memory": "1Gi"}},
        {"name": "submitter", "count": 1, "requests": {"cpu": "500m", "memory": "200Mi"}},
    ]
    assert find_shortfall(head_and_submitter, capacity) == ("cpu", Decimal(2))
    assert find_shortfall(head_and_submitter[:1], capacity) is None
    gpu = [{"name": "head", "count": 1, "requests": {"nvidia.com/gpu": "1"}}]
    assert find_shortfall(gpu, capacity) == ("nvidia.com/gpu", Decimal(0))


def test_the_fix_for_a_refused_request_starts_with_what_applies_to_its_queue():
    from kueue_ray.capacity import Shortfall, queue_fix

    why = Shortfall("RayJob needs 8 nvidia.com/gpu", "raise nominalQuota or request less nvidia.com/gpu")
    assert queue_fix(why, fitting_queues=["team-b", "team-a"]).fix == (
        "use LocalQueue team-a or team-b, whose ClusterQueue can admit it; "
        "or raise nominalQuota or request less nvidia.com/gpu"
    )
    assert queue_fix(why, other_setup="team-a/team-b (the team-queues setup)").fix.startswith(
        "use team-a/team-b (the team-queues setup); or raise nominalQuota"
    )
    assert queue_fix(why) == why
