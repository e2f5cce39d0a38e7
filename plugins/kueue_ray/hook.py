"""Talking to the cluster: RayJobs, their Kueue Workloads, queues, positions and submitter logs.

Built on the cncf provider's ``KubernetesHook`` / ``AsyncKubernetesHook`` so that the one ``kubernetes``
Airflow connection (kubeconfig path or content, in-cluster, context, SSL options) configures everything;
there is no second way to point this project at a cluster.

Retries follow the provider: reads and deletes go through ``generic_api_retry`` (429/5xx/connection
errors, Retry-After honoured). The provider counts 409 as transient, which is wrong for the places it
means something here, so those are answered inside the retried function and never retried:

* create -> 409 AlreadyExists means "a RayJob with this deterministic name exists": the caller adopts it;
* delete with preconditions -> 409 Conflict means "this is not the object, or not the version, the
  deletion was decided on". ``delete_rayjob`` reads it again: if it is gone, or the name now belongs to
  another uid, or it is already being deleted, the deletion is done (which is also what a retry after a
  lost answer finds: the first attempt did delete it, which changed its version); otherwise it answers
  CONFLICT and the caller decides again on what it reads now.

A queue position is a nicety: whatever the visibility API answers, or if it cannot be reached, the caller
gets None and carries on (``queue_position``, ``pending_workloads``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
from kubernetes.client.exceptions import ApiException
from kubernetes_asyncio.client import CustomObjectsApi as AsyncCustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from kueue_ray.api import (
    CLUSTER_QUEUE,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUE,
    RAY_GROUP,
    RAY_VERSION,
    RAYJOB,
    WORKLOAD,
    WORKLOAD_PRIORITY_CLASS,
)
from kueue_ray.api_errors import describe_error
from kueue_ray.capacity import find_shortfall, max_capacity
from kueue_ray.errors import KueueRayError
from kueue_ray.manifests import BuiltRayJob, explain_capacity_shortfall
from kueue_ray.naming import JOB_UID_LABEL, MANAGED_BY_SELECTOR, WAITER_ANNOTATION, AirflowIdentity, Waiter

log = logging.getLogger(__name__)

VISIBILITY_PATH = (
    "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{name}/pendingworkloads"
)
VISIBILITY_LIMIT = 100000
"""Kueue's cap for ``limit`` (default 1000): a deep queue's positions and pending count stay exact."""
VISIBILITY_TIMEOUT_S = 10
"""How long a queue position may hold up the log line it decorates."""
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_JOB_LABEL = "batch.kubernetes.io/job-name"

DELETED, GONE, CONFLICT = "deleted", "gone", "conflict"


class PreflightError(KueueRayError):
    """The cluster cannot run this RayJob as configured; raised before anything is created."""


@dataclass(frozen=True)
class QueuePosition:
    """Where a pending Workload stands (0-based, as Kueue's visibility API reports it)."""

    in_local_queue: int
    in_cluster_queue: int
    pending_in_local_queue: int

    def describe(self) -> str:
        return (
            f"position {self.in_local_queue + 1} of {self.pending_in_local_queue} pending in its LocalQueue "
            f"({self.in_cluster_queue + 1} in the ClusterQueue)"
        )


@dataclass(frozen=True)
class QueueCapacity:
    """What preflight learned about the queue a RayJob is submitted to."""

    cluster_queue: str
    capacity: dict[str, dict[str, Decimal]]


def positions_from_summary(summary: dict) -> dict[str, QueuePosition]:
    """Every pending Workload's position in a visibility ``PendingWorkloadsSummary``, by Workload name.

    One pass over the list: the triggerer shares one summary among all the tasks queued in a LocalQueue,
    and thousands of them looking their own Workload up in it must not each scan it."""
    items = summary.get("items") or []
    positions: dict[str, QueuePosition] = {}
    for item in items:
        name = (item.get("metadata") or {}).get("name")
        if name and name not in positions:
            positions[name] = QueuePosition(
                in_local_queue=int(item.get("positionInLocalQueue", 0)),
                in_cluster_queue=int(item.get("positionInClusterQueue", 0)),
                pending_in_local_queue=len(items),
            )
    return positions


def position_from_summary(summary: dict, workload_name: str) -> QueuePosition | None:
    """Find ``workload_name`` in a visibility ``PendingWorkloadsSummary``; None when it is not pending."""
    return positions_from_summary(summary).get(workload_name)


def _delete_options(uid: str, resource_version: str | None) -> dict:
    preconditions = {"uid": uid}
    if resource_version is not None:
        preconditions["resourceVersion"] = resource_version
    return {"preconditions": preconditions, "propagationPolicy": "Background"}


def foreign_run(rayjob: dict, waiter: AirflowIdentity) -> str | None:
    """Why the sensor try ``waiter`` must never delete ``rayjob`` (another DAG run, or not created by
    Airflow at all); None when it belongs to the sensor's own DAG run and map index."""
    submitter = AirflowIdentity.from_annotations(rayjob["metadata"].get("annotations"))
    if submitter is None:
        return "it was not created by an Airflow task"
    if (submitter.dag_id, submitter.run_id, submitter.map_index) != (
        waiter.dag_id,
        waiter.run_id,
        waiter.map_index,
    ):
        return (
            f"it belongs to DAG {submitter.dag_id} run {submitter.run_id} (map index {submitter.map_index})"
        )
    return None


def not_waiting_reason(rayjob: dict, waiter: AirflowIdentity) -> str | None:
    """Why a killed sensor try leaves ``rayjob`` alone; None when it may delete it: same DAG run, and the
    RayJob still names this very try as its waiter (a Clear's newer try re-registers before the old try's
    on_kill runs)."""
    foreign = foreign_run(rayjob, waiter)
    if foreign is not None:
        return foreign
    registered, this_try = Waiter.from_annotations(rayjob["metadata"].get("annotations")), Waiter.of(waiter)
    if registered != this_try:
        return f"its waiter is now {registered.stamp() if registered else 'nobody'}, not {this_try.stamp()}"
    return None


def _after_conflict(current: dict | None, uid: str) -> str:
    """What a deletion answered 409 (its preconditions no longer hold) comes to, from the RayJob as it is
    now: GONE when it no longer exists or the name is another object's, DELETED when it is already being
    deleted (by us: a retry after a lost answer, or by someone else), CONFLICT when it only changed."""
    if current is None or current["metadata"].get("uid") != uid:
        return GONE
    if current["metadata"].get("deletionTimestamp"):
        return DELETED
    return CONFLICT


def _newest(items: list[dict]) -> dict | None:
    return max(items, key=lambda o: o["metadata"].get("creationTimestamp") or "", default=None)


class RayJobHook(KubernetesHook):
    """Synchronous access for the operator (worker side) and the sensor's poke mode."""

    # --- RayJobs -------------------------------------------------------------------------------------

    def create_or_get_rayjob(self, body: dict, namespace: str) -> tuple[dict, bool]:
        """Create the RayJob; if its name is taken, return the existing object instead.

        Returns (object, created). A create whose response was lost (a 5xx after the server stored it) is
        retried and then answered with 409, which correctly turns into "adopt the one we made".
        """
        created = self._create_rayjob(body, namespace)
        if created is not None:
            return created, True
        existing = self.get_rayjob(body["metadata"]["name"], namespace)
        if existing is None:  # deleted between our create and get: try once more
            created = self._create_rayjob(body, namespace)
            if created is None:
                raise PreflightError(
                    "the RayJob name keeps changing hands while submitting",
                    field="metadata.name",
                    value=body["metadata"]["name"],
                    fix="check for another controller creating or deleting RayJobs with this name",
                )
            return created, True
        return existing, False

    @generic_api_retry
    def _create_rayjob(self, body: dict, namespace: str) -> dict | None:
        try:
            return self.custom_object_client.create_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYJOB.plural, body
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise

    @generic_api_retry
    def get_rayjob(self, name: str, namespace: str) -> dict | None:
        try:
            return self.custom_object_client.get_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYJOB.plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    @generic_api_retry
    def list_managed_rayjobs(self, namespace: str) -> list[dict]:
        """Every RayJob this integration created in ``namespace`` (the managed-by label), for the janitor."""
        return self.custom_object_client.list_namespaced_custom_object(
            RAY_GROUP, RAY_VERSION, namespace, RAYJOB.plural, label_selector=MANAGED_BY_SELECTOR
        )["items"]

    @generic_api_retry
    def _patch_rayjob(self, name: str, namespace: str, patch: dict) -> dict | None:
        """Merge-patch the RayJob; None on 409 (the patch's resourceVersion is stale: re-read, decide again)."""
        try:
            return self.custom_object_client.patch_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYJOB.plural, name, patch
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise

    def _annotate(self, rayjob: dict, annotations: dict[str, str]) -> dict | None:
        """Set ``annotations`` on exactly this RayJob (same uid); the patched object, or None when it changed
        hands or disappeared meanwhile.

        The patch carries the version it was decided on (optimistic lock); controllers update status all
        the time, so a conflict re-reads and tries again while the object is still the same uid.
        """
        metadata = rayjob["metadata"]
        name, namespace, uid = metadata["name"], metadata["namespace"], metadata["uid"]
        for _ in range(10):
            patch = {"metadata": {"resourceVersion": metadata["resourceVersion"], "annotations": annotations}}
            patched = self._patch_rayjob(name, namespace, patch)
            if patched is not None:
                return patched
            current = self.get_rayjob(name, namespace)
            if current is None or current["metadata"].get("uid") != uid:
                return None
            metadata = current["metadata"]
        return None

    def register_waiter(self, rayjob: dict, waiter: AirflowIdentity) -> dict | None:
        """Record the sensor try ``waiter`` as the RayJob's current waiter (``WAITER_ANNOTATION``), so its
        trigger's on_kill may delete the RayJob, and an older try's may not. None if the RayJob changed
        hands or disappeared meanwhile."""
        return self._annotate(rayjob, {WAITER_ANNOTATION: Waiter.of(waiter).stamp()})

    def delete_rayjob(self, name: str, namespace: str, uid: str, resource_version: str | None = None) -> str:
        """Delete exactly this RayJob (its RayCluster and submitter follow by garbage collection).

        Preconditions make it safe against a new try that replaced or re-claimed the name meanwhile:
        ``uid`` always, ``resource_version`` when the caller decided from a specific version. Returns
        DELETED (deleted, or already being deleted), GONE (404, or the name is another object's now: ours
        is gone) or CONFLICT (it changed since the caller read it: read it and decide again).
        """
        result = self._delete(name, namespace, uid, resource_version)
        if result != CONFLICT:
            return result
        return _after_conflict(self.get_rayjob(name, namespace), uid)

    @generic_api_retry
    def _delete(
        self, name: str, namespace: str, uid: str, resource_version: str | None, plural: str = RAYJOB.plural
    ) -> str:
        """Delete exactly this object (uid, and version when given, as preconditions) of a ray.io
        ``plural``; DELETED, GONE (404) or CONFLICT (409)."""
        try:
            self.custom_object_client.delete_namespaced_custom_object(
                RAY_GROUP,
                RAY_VERSION,
                namespace,
                plural,
                name,
                body=_delete_options(uid, resource_version),
            )
            return DELETED
        except ApiException as exc:
            if exc.status == 404:
                return GONE
            if exc.status == 409:
                return CONFLICT
            raise

    def wait_until_gone(self, name: str, namespace: str, uid: str, timeout: float = 120.0) -> None:
        """Wait for a deleted RayJob to disappear (KubeRay's finalizer stops the Ray job first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            current = self.get_rayjob(name, namespace)
            if current is None or current["metadata"].get("uid") != uid:
                return
            time.sleep(0.5)
        raise PreflightError(
            "the previous RayJob with this name is still being deleted",
            field="metadata.name",
            value=name,
            fix="check KubeRay's finalizer on the RayJob (kubectl describe rayjob) and retry the task",
        )

    def delete_if_owned(self, name: str, namespace: str, uid: str, owner: AirflowIdentity) -> str:
        """Delete the RayJob only while ``owner`` (one task try) still owns it; DELETED, GONE or CONFLICT.

        Reads and deletes with the read version as precondition, so a new try re-annotating the RayJob in
        between turns the delete into a no-op instead of killing the job that try adopted.
        """
        return self._delete_while_owned(self.get_rayjob, self.delete_rayjob, name, namespace, uid, owner)

    @staticmethod
    def _delete_while_owned(
        get: Callable[[str, str], dict | None],
        delete: Callable[[str, str, str, str | None], str],
        name: str,
        namespace: str,
        uid: str,
        owner: AirflowIdentity,
    ) -> str:
        """Read, check the owner, delete with the read version as precondition; again on a conflict."""
        for _ in range(5):
            obj = get(name, namespace)
            if obj is None or obj["metadata"].get("uid") != uid:
                return GONE
            if AirflowIdentity.from_annotations(obj["metadata"].get("annotations")) != owner:
                return CONFLICT
            result = delete(name, namespace, uid, obj["metadata"].get("resourceVersion"))
            if result != CONFLICT:
                return result
        return CONFLICT

    def read_state(self, name: str, namespace: str, uid: str) -> tuple[dict | None, dict | None]:
        """(RayJob, Workload) now; the RayJob is None once it is gone or replaced by another uid."""
        rayjob = self.get_rayjob(name, namespace)
        if rayjob is None or rayjob["metadata"].get("uid") != uid:
            return None, None
        return rayjob, self.find_workload(uid, namespace)

    def claim_rayjob(self, rayjob: dict, owner: AirflowIdentity) -> dict:
        """Record ``owner`` (this task try) in the RayJob's annotations, for exactly this RayJob.

        Used when a retry adopts a RayJob: the try number moves to the new try, so the previous try's
        trigger no longer owns it and its on_kill leaves it alone.
        """
        claimed = self._annotate(rayjob, owner.annotations())
        if claimed is None:
            raise PreflightError(
                "could not take over the RayJob an earlier try submitted: it changed or disappeared meanwhile",
                field="metadata.name",
                value=rayjob["metadata"]["name"],
                fix="retry the task",
            )
        return claimed

    # --- Kueue objects -------------------------------------------------------------------------------

    @generic_api_retry
    def find_workload(self, uid: str, namespace: str) -> dict | None:
        """The Workload Kueue made for the RayJob with this uid (newest if several), or None yet."""
        result = self.custom_object_client.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOAD.plural, label_selector=f"{JOB_UID_LABEL}={uid}"
        )
        return _newest(result.get("items") or [])

    @generic_api_retry
    def _get_kueue_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        api = self.custom_object_client
        try:
            if namespace is None:
                return api.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name)
            return api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    @generic_api_retry
    def _list_kueue_objects(self, plural: str, namespace: str | None = None) -> list[dict]:
        api = self.custom_object_client
        if namespace is None:
            result = api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural)
        else:
            result = api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, namespace, plural)
        return result.get("items") or []

    def check_queue(self, namespace: str, queue: str, priority: str | None) -> QueueCapacity:
        """Preflight: the LocalQueue exists here, the WorkloadPriorityClass exists, and the ClusterQueue
        behind them exists; returns that ClusterQueue's maximum capacity (with cohort borrowing).

        Each error names the field, the value and the fix, because Kueue itself would only leave the
        RayJob queued forever with a message nobody reads.
        """
        local_queue = self._get_kueue_object(LOCAL_QUEUE.plural, queue, namespace)
        if local_queue is None:
            names = sorted(
                q["metadata"]["name"] for q in self._list_kueue_objects(LOCAL_QUEUE.plural, namespace)
            )
            raise PreflightError(
                f"LocalQueue {queue!r} does not exist in namespace {namespace!r}",
                field="queue",
                value=queue,
                fix=f"use one of {names}" if names else f"create a LocalQueue in namespace {namespace!r}",
            )
        if priority is not None and self._get_kueue_object(WORKLOAD_PRIORITY_CLASS.plural, priority) is None:
            names = sorted(
                c["metadata"]["name"] for c in self._list_kueue_objects(WORKLOAD_PRIORITY_CLASS.plural)
            )
            raise PreflightError(
                f"WorkloadPriorityClass {priority!r} does not exist, so Kueue would never create a Workload",
                field="priority",
                value=priority,
                fix=f"use one of {names}" if names else "create the WorkloadPriorityClass",
            )
        cq_name = (local_queue.get("spec") or {}).get("clusterQueue")
        cluster_queue = self._get_kueue_object(CLUSTER_QUEUE.plural, cq_name) if cq_name else None
        if cluster_queue is None:
            raise PreflightError(
                f"LocalQueue {queue!r} points to ClusterQueue {cq_name!r}, which does not exist",
                field="queue",
                value=queue,
                fix=f"create ClusterQueue {cq_name!r} or point the LocalQueue at an existing one",
            )
        if (cluster_queue.get("spec") or {}).get("stopPolicy", "None") != "None":
            log.warning("ClusterQueue %s is stopped: the RayJob will wait until it is resumed", cq_name)
        cohort_members: list[dict] = []
        cohorts: list[dict] = []
        if (cluster_queue.get("spec") or {}).get("cohortName"):
            cohort_members = self._list_kueue_objects(CLUSTER_QUEUE.plural)
            cohorts = self._list_kueue_objects("cohorts")
        capacity = max_capacity(cluster_queue, cluster_queues=cohort_members, cohorts=cohorts)
        return QueueCapacity(cluster_queue=cq_name, capacity=capacity)

    def preflight(
        self, built: BuiltRayJob, namespace: str, queue: str, priority: str | None
    ) -> QueueCapacity:
        """Everything that can be known to fail before submitting: queue, priority class, capacity."""
        queue_capacity = self.check_queue(namespace, queue, priority)
        shortfall = find_shortfall(built.pod_sets, queue_capacity.capacity)
        if shortfall is not None:
            resource, available = shortfall
            problem, _, fix = explain_capacity_shortfall(
                built.pod_sets, resource, available, queue_capacity.cluster_queue
            ).partition("; ")
            raise PreflightError(
                f"{problem}, counting what its cohort can lend",
                field=f"resources[{resource}]",
                value=built.total_request.get(resource),
                fix=fix,
            )
        return queue_capacity

    def queue_position(self, namespace: str, queue: str, workload_name: str) -> QueuePosition | None:
        """Position from Kueue's visibility API; None when it is not pending, or the API is not served, not
        allowed, failing or unreachable: a position only decorates a log line, so it is asked once and a
        failure never holds up (or fails) the wait that wanted it."""
        try:
            summary = self.api_client.call_api(
                VISIBILITY_PATH.format(namespace=namespace, name=queue),
                "GET",
                query_params=[("limit", VISIBILITY_LIMIT)],
                response_types_map={200: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=VISIBILITY_TIMEOUT_S,
            )
        except Exception as exc:  # noqa: BLE001 - any answer or none: only the position is lost
            log.info(
                "Queue position in LocalQueue %s/%s unavailable: %s", namespace, queue, describe_error(exc)
            )
            return None
        return position_from_summary(summary or {}, workload_name)

    # --- logs ----------------------------------------------------------------------------------------

    @generic_api_retry
    def submitter_log_tail(self, rayjob_name: str, namespace: str, tail_lines: int = 50) -> str | None:
        """The last lines of the RayJob's submitter (K8sJobMode) — the driver's output as Ray printed it.

        None when there is no submitter pod (HTTPMode, or it was deleted on preemption/retry).
        """
        try:
            pods = self.core_v1_client.list_namespaced_pod(
                namespace, label_selector=f"{SUBMITTER_JOB_LABEL}={rayjob_name}"
            ).items
            if not pods:
                return None
            newest = max(pods, key=lambda p: p.metadata.creation_timestamp or 0)
            response = self.core_v1_client.read_namespaced_pod_log(
                newest.metadata.name,
                namespace,
                container=SUBMITTER_CONTAINER,
                tail_lines=tail_lines,
                _preload_content=False,  # raw bytes: the generated client would return their repr()
            )
            return response.data.decode("utf-8", errors="replace")
        except ApiException as exc:
            if exc.status in (400, 403, 404):
                return None
            raise


class AsyncRayJobHook(AsyncKubernetesHook):
    """The few one-off async calls of the triggerer (the watch hub does the streaming)."""

    @generic_api_retry
    async def get_rayjob(self, name: str, namespace: str, api_client: Any = None) -> dict | None:
        async with self._client(api_client) as client:
            try:
                return await AsyncCustomObjectsApi(client).get_namespaced_custom_object(
                    RAY_GROUP, RAY_VERSION, namespace, RAYJOB.plural, name
                )
            except AsyncApiException as exc:
                if exc.status == 404:
                    return None
                raise

    @generic_api_retry
    async def find_workload(self, uid: str, namespace: str, api_client: Any = None) -> dict | None:
        async with self._client(api_client) as client:
            result = await AsyncCustomObjectsApi(client).list_namespaced_custom_object(
                KUEUE_GROUP,
                KUEUE_VERSION,
                namespace,
                WORKLOAD.plural,
                label_selector=f"{JOB_UID_LABEL}={uid}",
            )
        return _newest(result.get("items") or [])

    async def delete_rayjob(
        self, name: str, namespace: str, uid: str, resource_version: str | None = None
    ) -> str:
        """As RayJobHook.delete_rayjob: DELETED, GONE or CONFLICT."""
        result = await self._delete(name, namespace, uid, resource_version)
        if result != CONFLICT:
            return result
        return _after_conflict(await self.get_rayjob(name, namespace), uid)

    @generic_api_retry
    async def _delete(
        self, name: str, namespace: str, uid: str, resource_version: str | None, plural: str = RAYJOB.plural
    ) -> str:
        """As RayJobHook._delete."""
        async with self.get_conn() as client:
            try:
                await AsyncCustomObjectsApi(client).delete_namespaced_custom_object(
                    RAY_GROUP,
                    RAY_VERSION,
                    namespace,
                    plural,
                    name,
                    body=_delete_options(uid, resource_version),
                )
                return DELETED
            except AsyncApiException as exc:
                if exc.status == 404:
                    return GONE
                if exc.status == 409:
                    return CONFLICT
                raise

    async def delete_if_owned(self, name: str, namespace: str, uid: str, owner: AirflowIdentity) -> str:
        """As RayJobHook.delete_if_owned: only while ``owner`` still owns it; DELETED, GONE or CONFLICT."""
        return await self._delete_while_owned(
            self.get_rayjob, self.delete_rayjob, name, namespace, uid, owner
        )

    @staticmethod
    async def _delete_while_owned(
        get: Callable[[str, str], Awaitable[dict | None]],
        delete: Callable[[str, str, str, str | None], Awaitable[str]],
        name: str,
        namespace: str,
        uid: str,
        owner: AirflowIdentity,
    ) -> str:
        """As RayJobHook._delete_while_owned."""
        for _ in range(5):
            obj = await get(name, namespace)
            if obj is None or obj["metadata"].get("uid") != uid:
                return GONE
            if AirflowIdentity.from_annotations(obj["metadata"].get("annotations")) != owner:
                return CONFLICT
            result = await delete(name, namespace, uid, obj["metadata"].get("resourceVersion"))
            if result != CONFLICT:
                return result
        return CONFLICT

    async def delete_if_waiting(self, name: str, namespace: str, uid: str, waiter: AirflowIdentity) -> str:
        """Delete the RayJob for a killed sensor try, only while it is that try's to delete (see
        ``not_waiting_reason``): DELETED, GONE, or "not deleted: <why>".

        The delete carries the uid and the version the decision was made on, so a newer try registering
        as waiter in between turns it into a conflict, and the decision is made again.
        """
        for _ in range(5):
            rayjob = await self.get_rayjob(name, namespace)
            if rayjob is None or rayjob["metadata"].get("uid") != uid:
                return GONE
            reason = not_waiting_reason(rayjob, waiter)
            if reason is not None:
                return f"not deleted: {reason}"
            result = await self.delete_rayjob(name, namespace, uid, rayjob["metadata"].get("resourceVersion"))
            if result != CONFLICT:
                return result
        return "not deleted: it kept changing while deciding"

    async def pending_workloads(self, namespace: str, queue: str, api_client: Any = None) -> dict | None:
        """The LocalQueue's ``PendingWorkloadsSummary`` from Kueue's visibility API, for every trigger
        waiting in it at once (see ``positions_from_summary``); None when the API is not served, not
        allowed, failing or unreachable (as ``RayJobHook.queue_position``)."""
        try:
            async with self._client(api_client) as client:
                summary = await client.call_api(
                    VISIBILITY_PATH.format(namespace=namespace, name=queue),
                    "GET",
                    query_params=[("limit", VISIBILITY_LIMIT)],
                    response_types_map={200: "object"},
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _request_timeout=VISIBILITY_TIMEOUT_S,
                )
        except Exception as exc:  # noqa: BLE001 - any answer or none: only the position is lost
            log.info(
                "Queue position in LocalQueue %s/%s unavailable: %s", namespace, queue, describe_error(exc)
            )
            return None
        return summary or {}

    async def submitter_log_tail(
        self, rayjob_name: str, namespace: str, tail_lines: int = 50, api_client: Any = None
    ) -> str | None:
        """``RayJobHook.submitter_log_tail`` for the triggerer, where a successful task ends: the last
        lines of the submitter pod's log; None when there is no such pod (HTTPMode, or deleted) or the
        log may not be read."""
        from kubernetes_asyncio.client import CoreV1Api

        async with self._client(api_client) as client:
            core = CoreV1Api(client)
            try:
                pods = (
                    await core.list_namespaced_pod(
                        namespace, label_selector=f"{SUBMITTER_JOB_LABEL}={rayjob_name}"
                    )
                ).items
                if not pods:
                    return None
                newest = max(pods, key=lambda p: p.metadata.creation_timestamp or 0)
                response = await core.read_namespaced_pod_log(
                    newest.metadata.name,
                    namespace,
                    container=SUBMITTER_CONTAINER,
                    tail_lines=tail_lines,
                    _preload_content=False,  # the raw text, not the client's decoding of it
                )
                try:
                    return (await response.read()).decode("utf-8", errors="replace")
                finally:
                    response.release()
            except AsyncApiException as exc:
                if exc.status in (400, 403, 404):
                    return None
                raise

    def _client(self, api_client: Any):
        """Use the caller's long-lived ApiClient (the hub's) when given, else a fresh one from the connection."""
        if api_client is not None:
            return _Borrowed(api_client)
        return self.get_conn()


class _Borrowed:
    """An async context manager lending an ApiClient someone else owns and closes."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    async def __aenter__(self) -> Any:
        return self.api_client

    async def __aexit__(self, *exc_info: object) -> None:
        return None
