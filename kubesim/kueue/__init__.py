"""Kueue v0.19.2 for kubesim: webhooks, job integration and Workload lifecycle, scheduler, visibility API.

``make_controller(cluster)`` makes this package a controller module of ``kubesim.cluster.Cluster``: the
``KueueController`` it returns installs what must exist before any object is accepted (the admission
webhooks, the visibility API) and runs the reconcile loop. The scheduler's decisions are pure
(``kubesim.kueue.scheduler``). The import is local so that importing a pure submodule
(``kubesim.kueue.model``) stays cheap.
"""

from __future__ import annotations


def make_controller(cluster):
    from kubesim.kueue.controller import KueueController

    return KueueController(cluster)
