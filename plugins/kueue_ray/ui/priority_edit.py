"""Changing a task's RayJob priority from its Kueue tab: who is offered it, and the change itself.

Offered to a user who may edit the DAG (``PUT`` on it in Airflow's auth manager, as for clearing or
marking its tasks), while the RayJob exists and has not finished, with the classes the task's
``priority_policy`` allows a run of its kind (``kueue_ray.priority_change``: a backfill stays at most
``backfill_priority``). The change is one merge patch of the RayJob: the ``kueue.x-k8s.io/priority-class``
label, which Kueue carries to the Workload's priority (pending: it moves in the queue; admitted: it may be
preempted or preempt), and ``CHANGED_BY_ANNOTATION`` naming the user and the previous class, which the
task log quotes when the waiting trigger sees the Workload's new priority.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kueue_ray.kube import api
from kueue_ray.naming import PRIORITY_CHANGED_BY_ANNOTATION
from kueue_ray.priority_change import choices, may_change, relabel_patch
from kueue_ray.ui.access import READABLE_TTL_SECONDS
from kueue_ray.ui.cache import ClusterCache

CHANGED_BY_ANNOTATION = PRIORITY_CHANGED_BY_ANNOTATION


class EditableDags:
    """The DAG ids a user may edit (``PUT``), kept ``ttl`` seconds per user as ``access.ReadableDags``
    keeps the readable ones: every open tab's full answer asks, one query per user serves them all."""

    def __init__(
        self, ttl: float = READABLE_TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl, self.clock = ttl, clock
        self._cache: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}

    def may_edit(self, user: Any, dag_id: str) -> bool:
        """Blocking (the auth manager may query the database): call from a worker thread."""
        from airflow.api_fastapi.app import get_auth_manager

        key, now = (type(user).__name__, str(user.get_id())), self.clock()
        cached = self._cache.get(key)
        if cached is None or now - cached[0] >= self.ttl:
            dag_ids = frozenset(get_auth_manager().get_authorized_dag_ids(user=user, method="PUT"))
            cached = self._cache[key] = (now, dag_ids)
            if len(self._cache) > 1000:
                self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.ttl}
        return dag_id in cached[1]


EDITABLE = EditableDags()


def editable_dag(user: Any, dag_id: str) -> bool:
    """Whether ``user`` may edit DAG ``dag_id`` (``EditableDags``; blocking)."""
    return EDITABLE.may_edit(user, dag_id)


def offer(view: dict[str, Any], rayjob_xcom: dict | None, editable: bool) -> dict[str, Any] | None:
    """What the tab offers: the classes to choose from and the current one; None when nothing is offered
    (no edit rights, no RayJob or a finished one, or a task with a fixed priority)."""
    rayjob = view.get("rayjob") or {}
    if not editable or not rayjob.get("exists") or (view.get("phase") or {}).get("terminal"):
        return None
    options = choices((rayjob_xcom or {}).get("priority_policy"), (rayjob_xcom or {}).get("run_type"))
    if not options:
        return None
    return {"current": (rayjob.get("priority") or {}).get("class"), "choices": list(options)}


def dispatched_to(workloads: list[dict], rayjob_xcom: dict) -> str | None:
    """The MultiKueue worker cluster the task's RayJob was dispatched to, from its Workload among
    ``workloads`` (the cache's snapshot); None before dispatch and without MultiKueue."""
    from kueue_ray.multikueue import worker_cluster
    from kueue_ray.naming import JOB_UID_LABEL

    uid, namespace = rayjob_xcom.get("uid"), rayjob_xcom.get("namespace")
    for workload in workloads:
        metadata = workload.get("metadata") or {}
        if (
            metadata.get("namespace") == namespace
            and (metadata.get("labels") or {}).get(JOB_UID_LABEL) == uid
        ):
            return worker_cluster(workload)
    return None


async def change_priority(
    cache: ClusterCache,
    rayjob_xcom: dict,
    current: str | None,
    requested: str,
    user_name: str,
    worker: str | None = None,
) -> tuple[int, str]:
    """(HTTP status, message): 409 when the policy refuses or MultiKueue dispatched the RayJob to ``worker``
    (``kueue_ray.priority_change.may_change``), else the patch's outcome."""
    decision = may_change(
        rayjob_xcom.get("priority_policy"), rayjob_xcom.get("run_type"), current, requested, worker
    )
    if not decision.allowed:
        return 409, f"Not changed: {decision.reason}."
    patch = relabel_patch(requested)
    patch["metadata"]["annotations"] = {CHANGED_BY_ANNOTATION: f"{user_name}: {current} -> {requested}"}
    name, namespace = rayjob_xcom["name"], rayjob_xcom["namespace"]
    try:
        async with cache.client.lease() as api_client:
            await api_client.call_api(
                f"/apis/{api.RAY_GROUP}/{api.RAY_VERSION}/namespaces/{namespace}/{api.RAYJOB.plural}/{name}",
                "PATCH",
                header_params={"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
                body=patch,
                response_types_map={200: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=30,
            )
    except Exception as exc:  # noqa: BLE001 - said to the user as the API server said it
        from kueue_ray.ui.cache import describe_error

        return 502, f"Not changed: the Kubernetes API refused the change ({describe_error(exc)})."
    return (
        200,
        f"Priority of RayJob {namespace}/{name} changed: {current} -> {requested}; Kueue reorders its queue.",
    )
