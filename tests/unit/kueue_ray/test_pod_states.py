"""The Ray cluster's pods after admission: phase and the scheduler's or kubelet's reason, head first."""

import doctest

from kueue_ray import pod_states as module
from kueue_ray.pod_states import describe_pods, pod_states

TAINT = (
    "0/3 nodes are available: 1 node(s) had untolerated taint {sku: gpu}, 2 node(s) didn't match Pod's "
    "node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
)


def pod(name, role, phase="Pending", *, unschedulable=None, waiting=None):
    conditions = [{"type": "PodScheduled", "status": "True"}]
    if unschedulable:
        conditions = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
    containers = [{"name": "ray", "state": {"waiting": waiting} if waiting else {"running": {}}}]
    return {
        "metadata": {"name": name, "labels": {"ray.io/node-type": role}},
        "status": {"phase": phase, "conditions": conditions, "containerStatuses": containers},
    }


def test_the_module_examples_hold():
    assert doctest.testmod(module).failed == 0


def test_an_unschedulable_worker_and_a_head_in_image_pull_back_off_are_told_head_first():
    backoff = {
        "reason": "ImagePullBackOff",
        "message": 'Back-off pulling image "rayproject/ray:nope": ErrImagePull: x',
    }
    states = pod_states([pod("w-1", "worker", unschedulable=TAINT), pod("h", "head", waiting=backoff)])
    assert [(s.role, s.reason) for s in states] == [("head", "ImagePullBackOff"), ("worker", "Unschedulable")]
    line = describe_pods(states)
    assert line.startswith('head h Pending (ImagePullBackOff: Back-off pulling image "rayproject/ray:nope"')
    assert f"worker w-1 Pending (Unschedulable: {TAINT})" in line


def test_creating_containers_are_no_reason_and_running_pods_are_counted():
    states = pod_states(
        [pod("h", "head", "Running"), pod("w", "worker", waiting={"reason": "ContainerCreating"})]
    )
    assert describe_pods(states) == "worker w Pending; 1 running"
    assert describe_pods([]) == "no pods yet"
