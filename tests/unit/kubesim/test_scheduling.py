"""Which node takes a pod (taints, selectors)."""

from __future__ import annotations

import pytest

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
