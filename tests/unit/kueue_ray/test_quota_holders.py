"""What held the quota when a queue timeout fired: usage against quota, the admitted Workloads with their
priority, and whether this task could preempt them under the ClusterQueue's policy."""

import doctest

import pytest
from kueue_ray import quota_holders as module
from kueue_ray.quota_holders import can_preempt, quota_holders


def cluster_queue(policy=None, admitted=2):
    spec = {
        "resourceGroups": [
            {
                "flavors": [
                    {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4"}]},
                    {"name": "cpu", "resources": [{"name": "memory", "nominalQuota": "64Gi"}]},
                ]
            }
        ]
    }
    if policy:
        spec["preemption"] = {"withinClusterQueue": policy}
    status = {
        "admittedWorkloads": admitted,
        "flavorsReservation": [
            {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "total": "4"}]},
            {"name": "cpu", "resources": [{"name": "memory", "total": "32Gi"}]},
        ],
    }
    return {"metadata": {"name": "team-a"}, "spec": spec, "status": status}


def workload(name, priority, klass, *, cq="team-a", created="2026-12-01T10:00:00Z", finished=False):
    conditions = [{"type": "Finished", "status": "True"}] if finished else []
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"priority": priority, "priorityClassRef": {"name": klass}},
        "status": {"admission": {"clusterQueue": cq}, "conditions": conditions},
    }


def test_usage_against_quota_and_the_holders_by_priority():
    told = quota_holders(
        cluster_queue("LowerPriority"),
        [
            workload("dev-run", 100, "dev-priority"),
            workload("serve", 1000, "prod-priority"),
            workload("elsewhere", 100, "dev-priority", cq="team-b"),
            workload("done", 100, "dev-priority", finished=True),
        ],
        own_priority=1000,
    )
    assert told == (
        "ClusterQueue team-a at the end: nvidia.com/gpu 4 of 4 (flavor gpu), memory 32Gi of 64Gi (flavor cpu); "
        "admitted: serve (prod-priority 1000, not preemptible by this task's priority 1000), "
        "dev-run (dev-priority 100, preemptible by this task's priority 1000)"
    )


def test_a_queue_that_never_preempts_says_so_and_others_are_counted():
    told = quota_holders(
        cluster_queue(admitted=3), [workload("dev-run", 100, "dev-priority")], own_priority=1000
    )
    assert "dev-run (dev-priority 100, not preemptible" in told
    assert "(+2 more admitted, in other namespaces or not listed)" in told
    assert told.endswith("it never preempts within itself (preemption.withinClusterQueue: Never)")


@pytest.mark.parametrize(
    "policy,theirs,created,expected",
    [
        ("LowerPriority", 100, "2026-12-01T11:00:00Z", True),
        ("LowerPriority", 1000, "2026-12-01T11:00:00Z", False),
        ("LowerOrNewerEqualPriority", 1000, "2026-12-01T11:00:00Z", True),  # newer, same priority
        ("LowerOrNewerEqualPriority", 1000, "2026-12-01T09:00:00Z", False),  # older, same priority
        ("Never", 1, "2026-12-01T11:00:00Z", False),
    ],
)
def test_can_preempt_follows_within_cluster_queue(policy, theirs, created, expected):
    other = workload("x", theirs, "c", created=created)
    assert can_preempt(policy, 1000, "2026-12-01T10:00:00Z", other) is expected


def test_an_unreadable_cluster_queue_adds_nothing():
    assert quota_holders(None, [workload("x", 1, "c")], own_priority=1) is None


def test_the_module_example_holds():
    assert doctest.testmod(module).failed == 0


def test_memory_usage_is_spelled_in_binary_units_beside_a_binary_quota():
    """Not "~343.81G of 384Gi": both sides in the one spelling the Kueue pages use too."""
    from kueue_ray.quota_holders import usage

    cq = {
        "spec": {
            "resourceGroups": [
                {"flavors": [{"name": "default", "resources": [{"name": "memory", "nominalQuota": "384Gi"}]}]}
            ]
        },
        "status": {
            "flavorsReservation": [
                {"name": "default", "resources": [{"name": "memory", "total": "335750000Ki"}]}
            ]
        },
    }
    assert usage(cq) == ["memory 320.2Gi of 384Gi (flavor default)"]
