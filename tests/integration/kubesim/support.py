"""Helpers the kubesim HTTP tests share."""

from __future__ import annotations

import time


def eventually(check, timeout: float = 20.0, interval: float = 0.05):
    """Poll ``check()`` until it is truthy and return it; AssertionError with its last answer otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition never held; last: {result!r}")
        time.sleep(interval)


def multikueue_objects(
    check: str, config: str = "workers", clusters: tuple[str, ...] = ("worker1", "worker2")
):
    """What a MultiKueue manager needs besides its queues: Kueue's namespace (for the workers' kubeconfig
    Secrets), the ``check`` AdmissionCheck of controller ``kueue.x-k8s.io/multikueue`` and the
    MultiKueueConfig ``config`` it names, listing ``clusters``."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {
                "controllerName": "kueue.x-k8s.io/multikueue",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config},
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueConfig",
            "metadata": {"name": config},
            "spec": {"clusters": list(clusters)},
        },
    ]
