"""Which node takes a pod (taints, selectors), and Kueue's waitForPodsReady configuration."""

from __future__ import annotations

import pytest

from kubesim.kueue.config import KueueConfig, parse_duration
from kubesim.scheduling import tolerates, unschedulable_message

GPU_NODE = {
    "metadata": {"name": "gpu-0", "labels": {"accelerator": "nvidia"}},
    "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
}
CPU_NODE = {"metadata": {"name": "cpu-0", "labels": {}}, "spec": {}}


def test_without_nodes_every_pod_is_placed():
    assert unschedulable_message({"nodeSelector": {"accelerator": "nvidia"}}, []) is None


def test_a_gpu_pod_without_the_pool_toleration_fits_nowhere():
    pod = {"nodeSelector": {"accelerator": "nvidia"}}
    assert unschedulable_message(pod, [GPU_NODE, CPU_NODE]) == (
        "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {sku: gpu}. preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling."
    )
    pod["tolerations"] = [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert unschedulable_message(pod, [GPU_NODE, CPU_NODE]) is None


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "sku", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "sku", "value": "cpu", "effect": "NoSchedule"}, False),
        ({"key": "sku", "value": "gpu", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_rules(toleration, expected):
    assert tolerates([toleration], {"key": "sku", "value": "gpu", "effect": "NoSchedule"}) is expected


def test_a_cordoned_node_takes_nothing():
    cordoned = {"metadata": {"name": "n"}, "spec": {"unschedulable": True}}
    assert "node(s) were unschedulable" in unschedulable_message({}, [cordoned])


def test_kueue_defaults_and_backoff():
    config = KueueConfig()
    assert (config.pods_ready_timeout, config.effective_recovery_timeout) == (1800.0, 1800.0)
    assert [config.requeue_backoff(n) for n in (1, 2, 3, 7, 8)] == [60, 120, 240, 3600, 3600]


def test_kueue_configuration_document_is_read():
    config = KueueConfig.from_configuration(
        {
            "waitForPodsReady": {
                "timeout": "1h30m",
                "recoveryTimeout": "90s",
                "requeuingStrategy": {
                    "backoffBaseSeconds": 5,
                    "backoffMaxSeconds": 30,
                    "backoffLimitCount": 3,
                },
            }
        }
    )
    assert (config.pods_ready_timeout, config.recovery_timeout) == (5400.0, 90.0)
    assert (config.backoff_base, config.backoff_max, config.backoff_limit_count) == (5.0, 30.0, 3)
    with pytest.raises(ValueError, match="30 minutes"):
        parse_duration("30 minutes")


def test_kueue_integrations_default_to_the_shipped_frameworks_and_can_leave_rayservice_out():
    assert KueueConfig().frameworks == {
        "ray.io/rayjob",
        "ray.io/raycluster",
        "ray.io/rayservice",
        "batch/job",
    }
    config = KueueConfig.from_configuration(
        {"integrations": {"frameworks": ["batch/job", "ray.io/rayjob", "ray.io/raycluster"]}}
    )
    assert "ray.io/rayservice" not in config.frameworks
    assert "ray.io/raycluster" in config.frameworks
