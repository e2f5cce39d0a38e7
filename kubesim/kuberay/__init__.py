"""KubeRay v1.7.0 for kubesim: one module per controller of a CRD, plus the Ray clusters' insides.

``operator`` watches the kinds and runs the reconcilers of ``rayjob``, ``raycluster`` and ``rayservice``;
``submitter`` is the submitter Job a RayJob gets (which the cluster's Job controller, ``kubesim.batch``,
runs) and the ray CLI inside it; ``kubelet`` places and starts pods, as a real cluster's scheduler and
kubelet do; ``dashboard`` is what KubeRay asks about a Ray job (the head's job table and the drivers).
``make_controller(cluster)`` makes this package a controller module of ``kubesim.cluster.Cluster``. The import is local so that importing one submodule
(``kubesim.kuberay.dashboard``) does not load every reconciler.
"""

from __future__ import annotations


def make_controller(cluster):
    from kubesim.kuberay.operator import KubeRay

    return KubeRay(cluster.store, cluster.clock, cluster.logs, cluster.container_programs)
