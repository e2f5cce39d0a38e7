"""A RayJob's priority changed from Airflow only under the task's priority policy: a backfill cannot
become prod unless the policy allows it; a fixed priority is not changed."""

import doctest

from kueue_ray import priority_change as module
from kueue_ray.priority_change import choices, may_change, relabel_patch

POLICY = {"allowed": ["dev-priority", "prod-priority"]}


def test_the_module_examples_hold():
    assert doctest.testmod(module).failed == 0


def test_a_manual_run_may_become_prod_and_go_back():
    assert may_change(POLICY, "manual", "dev-priority", "prod-priority").allowed
    assert may_change(POLICY, "manual", "prod-priority", "dev-priority").allowed


def test_a_backfill_cannot_become_prod_unless_the_policy_allows_it():
    refused = may_change(POLICY, "backfill", "dev-priority", "prod-priority")
    assert not refused.allowed
    assert refused.reason == (
        "priority 'prod-priority' is not allowed: a backfill run may have at most dev-priority "
        "(allow_backfill_priority is not set)"
    )
    assert choices(POLICY, "backfill") == ("dev-priority",)
    assert may_change(
        {**POLICY, "allow_backfill_priority": True}, "backfill", "dev-priority", "prod-priority"
    ).allowed


def test_unknown_classes_fixed_priorities_and_no_ops_are_refused():
    assert (
        "allows dev-priority, prod-priority" in may_change(POLICY, "manual", "dev-priority", "urgent").reason
    )
    assert "fixed priority" in may_change(None, "manual", "dev-priority", "prod-priority").reason
    assert "already has" in may_change(POLICY, "manual", "dev-priority", "dev-priority").reason


def test_classes_given_with_values_are_ranked_by_value():
    assert choices({"allowed": {"prod": 1000, "dev": 100}}, "scheduled") == ("dev", "prod")


def test_only_the_label_is_patched():
    assert relabel_patch("prod-priority") == {
        "metadata": {"labels": {"kueue.x-k8s.io/priority-class": "prod-priority"}}
    }


def test_a_rayjob_multikueue_dispatched_is_not_relabelled_and_the_refusal_says_why():
    from kueue_ray.priority_change import may_change

    policy = {"allowed": ["dev-priority", "prod-priority"]}
    refused = may_change(policy, "manual", "dev-priority", "prod-priority", worker="gpu-east")
    assert not refused.allowed
    assert "dispatched by MultiKueue to worker cluster 'gpu-east'" in refused.reason
    assert "Change the priority before dispatch" in refused.reason
    assert may_change(policy, "manual", "dev-priority", "prod-priority", worker=None).allowed
