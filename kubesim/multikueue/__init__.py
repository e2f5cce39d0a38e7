"""Kueue v0.19.2's MultiKueue for kubesim: a manager cluster's Kueue dispatching RayJobs to worker clusters.

A controller module of ``kubesim.cluster.Cluster`` (``MANAGER_CONTROLLERS``), run beside ``kubesim.kueue``
on the manager of ``kubesim.apiserver.clusters.start_clusters``; the workers are ordinary kubesim clusters.
``connections`` decides the ``Active`` conditions of MultiKueueClusters and MultiKueue AdmissionChecks,
``dispatch`` the Workloads, ``controller`` runs both on one work queue. The import is local so that the
pure modules stay cheap to import.
"""

from __future__ import annotations


def make_controller(cluster):
    from kubesim.multikueue.controller import MultiKueue

    return MultiKueue(cluster)
