"""KubeRay v1.7.0 for kubesim: one module per controller of a CRD, plus the Ray clusters' insides.

``operator`` watches the kinds and runs the reconcilers of ``rayjob``, ``raycluster``, ``rayservice`` and
``submitter`` (the submitter Job and its pods, which a real cluster's Job controller and kubelet run);
``dashboard`` is what KubeRay asks about a Ray job (the head's job table and the drivers). ``install`` and
``run`` make this package a controller module of ``kubesim.cluster.Cluster``. The imports are local so
that importing one submodule (``kubesim.kuberay.dashboard``) does not load every reconciler.
"""

from __future__ import annotations


def install(cluster) -> None:
    from kubesim.kuberay import operator

    operator.install(cluster)


async def run(cluster) -> None:
    from kubesim.kuberay import operator

    await operator.run(cluster)
