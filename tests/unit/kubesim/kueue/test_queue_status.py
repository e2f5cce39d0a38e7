"""A ClusterQueue's ``Active`` condition: every cause that keeps it from admitting, worded as Kueue does."""

import pytest

from kubesim.kueue.queue_status import cluster_queue_active


def cluster_queue(*, stop_policy: str | None = None) -> dict:
    spec: dict = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [
                    {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": "4"}]},
                    {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "4"}]},
                ],
            },
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1"}]}],
            },
        ]
    }
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    return {"metadata": {"name": "cq"}, "spec": spec}


ALL_FLAVORS = {"on-demand": {}, "spot": {}, "a100": {}}


@pytest.mark.parametrize(
    ("stop_policy", "flavors", "expected"),
    [
        (None, ALL_FLAVORS, (True, "Ready", "Can admit new workloads")),
        ("None", ALL_FLAVORS, (True, "Ready", "Can admit new workloads")),
        ("Hold", ALL_FLAVORS, (False, "Stopped", "Can't admit new workloads: is stopped.")),
        (
            None,
            {"on-demand": {}, "spot": {}},
            (
                False,
                "FlavorNotFound",
                "Can't admit new workloads: references missing ResourceFlavor(s): a100.",
            ),
        ),
        (
            None,
            {"on-demand": {}},
            (
                False,
                "FlavorNotFound",
                "Can't admit new workloads: references missing ResourceFlavor(s): spot,a100.",
            ),
        ),
        (
            "HoldAndDrain",
            {"on-demand": {}},
            (
                False,
                "Stopped",
                "Can't admit new workloads: is stopped, references missing ResourceFlavor(s): spot,a100.",
            ),
        ),
    ],
)
def test_active_condition_lists_every_cause_and_takes_the_first_ones_reason(stop_policy, flavors, expected):
    assert cluster_queue_active(cluster_queue(stop_policy=stop_policy), flavors) == expected
