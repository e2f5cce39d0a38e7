"""Who a Workload on the queues page belongs to, and what it asks for: the rows of "who holds the quota"
and "who wants it".

Kueue makes a Workload for a RayJob, for a RayService (its shipped configuration) or for each RayCluster
KubeRay creates for a RayService (``ray.io/rayservice`` left out of Kueue's frameworks); the Workload's
``kueue.x-k8s.io/job-uid`` label and its controller owner reference carry that object's uid, and so does
an entry of Kueue's visibility API (its owner references). KubeRay copies a RayService's labels and
annotations onto its RayClusters, so every one of those objects Airflow made names its task instance:
the cache keeps them by uid (``Snapshot.identities``), and ``attribute`` reads them here.

Requests are what Kueue counts against the quota: an admitted Workload's ``resourceUsage`` per pod set,
a pending one's pod sets (count x the pod's effective requests), in the units the queue's quota is shown
in (``kueue_ray.quantity.readable_amount``: "2.5" CPUs, "7.45Gi" bytes, "1" GPU).

Example::

    >>> workload_requests({"spec": {"podSets": [{"count": 2, "template": {"spec": {"containers": [
    ...     {"resources": {"requests": {"cpu": "1500m", "memory": "4G", "nvidia.com/gpu": "1"}}}]}}}]}})
    [{'resource': 'cpu', 'amount': '3'}, {'resource': 'memory', 'amount': '7.45Gi'}, {'resource': 'nvidia.com/gpu', 'amount': '2'}]
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from kueue_ray.manifests import pod_requests
from kueue_ray.naming import JOB_UID_LABEL
from kueue_ray.phases import ServicePhase
from kueue_ray.quantity import (
    QuantityError,
    add_resources,
    parse_resources,
    readable_amount,
    scale_resources,
)
from kueue_ray.rayservice.status import observe_service
from kueue_ray.ui.access import Access
from kueue_ray.ui.snapshot import Snapshot
from kueue_ray.ui.views.common import FOREIGN_OWNER, Links, describe_owner, metadata_of

NOT_FROM_AIRFLOW = "not from Airflow"


def owner_reference(meta: dict) -> dict:
    """The object a Workload (or a visibility entry, by its ``metadata``) was made for: its controller
    owner reference, else its first one."""
    refs = meta.get("ownerReferences") or ()
    return next((ref for ref in refs if ref.get("controller")), next(iter(refs), {}))


def job_uid(meta: dict) -> str | None:
    """The uid of the object Kueue made the Workload for (``job-uid`` label, else its owner reference)."""
    return (meta.get("labels") or {}).get(JOB_UID_LABEL) or owner_reference(meta).get("uid")


def attribute(meta: dict, snapshot: Snapshot, access: Access, links: Links) -> dict[str, Any] | None:
    """The row's ``owner``: the task instance (DAG, run, task, links) and the object Kueue admits, for a
    user who may read its DAG; another Airflow deployment's or a workload not from Airflow, labelled as
    such; None when it belongs to a DAG the user may not read (the page only counts those).

    ``meta`` is a Workload's metadata or a visibility entry's (both carry the owner references)."""
    ref = owner_reference(meta)
    identity = snapshot.identities.get(job_uid(meta) or "")
    if identity is None:
        kind = ref.get("kind") or "object"
        return {
            "not_airflow": True,
            "description": f"{NOT_FROM_AIRFLOW}: {kind} {meta.get('namespace')}/{ref.get('name') or '?'}",
            "detail": FOREIGN_OWNER,
        }
    owner = describe_owner(identity, access, links)
    if owner is None or "foreign_deployment" in owner:
        return owner
    return owner | {"object": _object(ref, meta.get("namespace"), snapshot)}


def _object(ref: dict, namespace: str | None, snapshot: Snapshot) -> dict[str, Any]:
    """``{"kind", "name"}`` of the object Kueue admits; for a RayService's RayCluster also the RayService
    and the cluster's role there (``active`` serves traffic, ``pending`` is being brought up)."""
    found: dict[str, Any] = {"kind": ref.get("kind"), "name": ref.get("name")}
    if ref.get("kind") != "RayCluster":
        return found
    cluster = next(
        (c for c in snapshot.rayclusters if metadata_of(c).get("uid") == ref.get("uid")),
        None,
    )
    service_ref = next(
        (r for r in metadata_of(cluster).get("ownerReferences") or () if r.get("kind") == "RayService"), None
    )
    if service_ref is None:
        return found
    found["rayservice"] = service_ref.get("name")
    service = next(
        (
            s
            for s in snapshot.rayservices
            if metadata_of(s).get("uid") == service_ref.get("uid")
            and metadata_of(s).get("namespace") == namespace
        ),
        None,
    )
    status = (service or {}).get("status") or {}
    for role, field in (("active", "activeServiceStatus"), ("pending", "pendingServiceStatus")):
        if (status.get(field) or {}).get("rayClusterName") == ref.get("name"):
            found["role"] = role
    return found


def service_row_phase(workload: dict, owner: dict[str, Any], snapshot: Snapshot) -> str | None:
    """The phase column of a workload Kueue admitted for a RayService (its own Workload, or one of its
    RayClusters'): the service's phase (``observe_service``) when this is the Workload the service is
    admitted through; the active cluster an upgrade replaces is SERVING while the RayService is Ready.
    None for anything else (the page shows "–")."""
    found = owner.get("object") or {}
    name = found.get("rayservice") or (found.get("name") if found.get("kind") == "RayService" else None)
    namespace = metadata_of(workload).get("namespace")
    service = next(
        (
            s
            for s in snapshot.rayservices
            if (metadata_of(s).get("name"), metadata_of(s).get("namespace")) == (name, namespace)
        ),
        None,
    )
    if name is None or service is None:
        return None
    in_namespace = [w for w in snapshot.workloads if metadata_of(w).get("namespace") == namespace]
    observation = observe_service(service, in_namespace)
    if observation.workload_name == metadata_of(workload).get("name"):
        return observation.phase.value
    conditions = (service.get("status") or {}).get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ServicePhase.SERVING.value if found.get("role") == "active" and ready else None


def requested(workload: dict | None) -> dict[str, Decimal]:
    """What the Workload counts against the quota: the admission's ``resourceUsage`` once admitted, else
    the pod sets' count x pod requests. Empty when unknown (no Workload in the cache) or unreadable."""
    if not workload:
        return {}
    try:
        admission = (workload.get("status") or {}).get("admission") or {}
        assignments = admission.get("podSetAssignments") or ()
        if any(a.get("resourceUsage") for a in assignments):
            return add_resources(*(parse_resources(a.get("resourceUsage")) for a in assignments))
        return add_resources(
            *(
                scale_resources(pod_requests(pod_set.get("template") or {}), int(pod_set.get("count") or 0))
                for pod_set in (workload.get("spec") or {}).get("podSets") or ()
            )
        )
    except (QuantityError, TypeError, ValueError):
        return {}


def readable_requests(totals: dict[str, Decimal]) -> list[dict[str, str]]:
    """[{"resource", "amount"}]: CPU, memory, then the rest by name, as the quota rows spell them."""
    order = ["cpu", "memory", *sorted(name for name in totals if name not in ("cpu", "memory"))]
    return [
        {"resource": name, "amount": readable_amount(name, totals[name])} for name in order if name in totals
    ]


def workload_requests(workload: dict | None) -> list[dict[str, str]]:
    return readable_requests(requested(workload))
