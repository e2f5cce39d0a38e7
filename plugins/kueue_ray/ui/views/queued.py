"""The "Why still queued" part of a RayJob's Kueue tab (``kueue_ray.why_queued`` on the cache's objects).

Holders are named under the pages' one security rule: a holder submitted by a task of a DAG the viewer
may not read is called "a workload of a DAG you cannot read" (its Workload name would tell the DAG); a
RayService's RayCluster is attributed to the deploy task whose annotations the RayService carries (KubeRay
names the RayClusters in the RayService's status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kueue_ray.holdings import holdings_of
from kueue_ray.naming import JOB_UID_LABEL, AirflowIdentity
from kueue_ray.ui.access import Access
from kueue_ray.ui.snapshot import Snapshot
from kueue_ray.ui.views.common import HIDDEN_OWNER, Links, describe_owner, metadata_of
from kueue_ray.why_queued import explain_queued


def holder_identity(workload: Mapping, snapshot: Snapshot) -> AirflowIdentity | None:
    """The task instance behind an admitted Workload: its RayJob's (the cache remembers every RayJob's),
    or for a RayCluster's Workload the RayService that names that cluster as active or pending."""
    metadata = metadata_of(dict(workload))
    identity = snapshot.identities.get((metadata.get("labels") or {}).get(JOB_UID_LABEL) or "")
    if identity is not None:
        return identity
    owner = next(iter(metadata.get("ownerReferences") or ()), {})
    if owner.get("kind") == "RayService":
        services = [s for s in snapshot.rayservices if metadata_of(s).get("name") == owner.get("name")]
    elif owner.get("kind") == "RayCluster":
        services = [s for s in snapshot.rayservices if owner.get("name") in _cluster_names(s)]
    else:
        return None
    for service in services:
        if metadata_of(service).get("namespace") == metadata.get("namespace"):
            return AirflowIdentity.from_annotations(metadata_of(service).get("annotations"))
    return None


def _cluster_names(service: dict) -> set[str]:
    status = service.get("status") or {}
    return {
        (status.get(key) or {}).get("rayClusterName")
        for key in ("activeServiceStatus", "pendingServiceStatus")
    } - {None}


def why_queued_view(
    workload: dict | None, cluster_queue: str | None, snapshot: Snapshot, access: Access, links: Links
) -> dict[str, Any] | None:
    """The explanation for a pending Workload, None when there is none to give (no Workload yet, admitted,
    or its ClusterQueue unknown to the cache)."""
    if workload is None or ((workload.get("status") or {}).get("admission")):
        return None
    queue = next((q for q in snapshot.cluster_queues if metadata_of(q).get("name") == cluster_queue), None)
    if queue is None:
        return None

    def described(holder: Mapping) -> dict[str, Any] | None:
        identity = holder_identity(holder, snapshot)
        return describe_owner(identity, access, links) if identity else None

    def describe(holder: Mapping) -> str | None:
        owner = described(holder)
        if owner is None or "foreign_deployment" in owner:
            return owner["description"] if owner else None
        return f"DAG {owner['dag_id']}, run {owner['run_id']}, task {owner['task_id']}"

    def conceal(holder: Mapping) -> str | None:
        identity = holder_identity(holder, snapshot)
        if identity is None:
            return None
        owner = described(holder)
        if owner is None:
            return HIDDEN_OWNER
        return owner["description"] if "foreign_deployment" in owner else None

    why = explain_queued(
        workload,
        queue,
        holdings=holdings_of(snapshot.workloads),
        cluster_queues=snapshot.cluster_queues,
        describe=describe,
        conceal=conceal,
    )
    return why.to_dict()
