"""Talking to the cluster from a worker: RayJobs, their Kueue Workloads, queues, positions and submitter
logs. The triggerer's asynchronous counterpart is ``kueue_ray.async_hook`` (importable from here too).

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
  CONFLICT and the caller decides again on what it reads now (the rules are ``kueue_ray.deletion``'s).

A queue position is a nicety: whatever the visibility API answers, or if it cannot be reached, the caller
gets None and carries on (``queue_position``, ``pending_positions``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
from kubernetes.client.exceptions import ApiException

from kueue_ray.adoption import Earlier
from kueue_ray.async_hook import AsyncRayJobHook
from kueue_ray.deletion import (
    DELETE_DECISIONS,
    DeleteOutcome,
    DeleteResult,
    DeleteRule,
    after_conflict,
    delete_options,
    foreign_run,
    not_waiting_reason,
    refused_delete,
    while_owned,
)
from kueue_ray.errors import PreflightError
from kueue_ray.hook_common import (
    SUBMITTER_CONTAINER,
    SUBMITTER_JOB_LABEL,
    VISIBILITY_LIMIT,
    VISIBILITY_PATH,
    VISIBILITY_TIMEOUT_S,
    QueuePosition,
    newest,
    position_from_summary,
    positions_from_summary,
    quota_unread,
)
from kueue_ray.kube.api import (
    CLUSTER_QUEUE,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUE,
    RAY_GROUP,
    RAY_VERSION,
    RAYJOB,
    WORKLOAD,
)
from kueue_ray.kube.errors import describe_error, may_be_missing_api, reading
from kueue_ray.kube.pages import Listing, list_all
from kueue_ray.kube.refusals import explained as explain_access
from kueue_ray.kube.server_clock import server_clock
from kueue_ray.manifests import BuiltRayJob
from kueue_ray.naming import JOB_UID_LABEL, MANAGED_BY_SELECTOR, WAITER_ANNOTATION, AirflowIdentity, Waiter
from kueue_ray.pod_states import CLUSTER_LABEL
from kueue_ray.preflight import WORKER_TIMEOUT, KueueReads, Preflight, QueueCapacity, TimedReads

__all__ = [
    "CONFLICT",
    "DELETED",
    "GONE",
    "AsyncRayJobHook",
    "DeleteOutcome",
    "DeleteResult",
    "PreflightError",
    "QueueCapacity",
    "QueuePosition",
    "RayJobHook",
    "foreign_run",
    "not_waiting_reason",
    "position_from_summary",
    "positions_from_summary",
]

log = logging.getLogger(__name__)

DELETED, GONE, CONFLICT = DeleteResult.DELETED, DeleteResult.GONE, DeleteResult.CONFLICT


def _written(answer: dict | None, rayjob: dict, problem: str, fix: str) -> dict:
    """The object a write on ``rayjob``'s name answered with; a PreflightError when there is none, because
    the name changed hands or the object disappeared meanwhile."""
    if answer is None:
        raise PreflightError(problem, field="metadata.name", value=rayjob["metadata"]["name"], fix=fix)
    return answer


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
            created = _written(
                self._create_rayjob(body, namespace),
                body,
                "the RayJob name keeps changing hands while submitting",
                "check for another controller creating or deleting RayJobs with this name",
            )
            return created, True
        return existing, False

    def _create_rayjob(self, body: dict, namespace: str) -> dict | None:
        try:
            with reading("create", f"{RAYJOB.plural}.{RAY_GROUP}", RAY_GROUP, RAY_VERSION):
                return self._create_rayjob_retried(body, namespace)
        except ApiException as exc:
            self.raise_explained(exc, namespace)
            raise

    @generic_api_retry
    def _create_rayjob_retried(self, body: dict, namespace: str) -> dict | None:
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
            with reading("get", f"{RAYJOB.plural}.{RAY_GROUP}", RAY_GROUP, RAY_VERSION):
                return self.custom_object_client.get_namespaced_custom_object(
                    RAY_GROUP, RAY_VERSION, namespace, RAYJOB.plural, name
                )
        except ApiException as exc:
            if exc.status == 404 and not may_be_missing_api(exc):  # the object is gone, not its API
                return None
            raise

    def list_managed_rayjobs(self, namespace: str, label_selector: str = MANAGED_BY_SELECTOR) -> list[dict]:
        """The RayJobs this integration created in ``namespace`` (the managed-by label, or a narrower
        ``label_selector``: one deployment's, one task instance's), in pages."""
        return self.managed_rayjobs(namespace, label_selector).items

    @generic_api_retry
    def managed_rayjobs(self, namespace: str, label_selector: str = MANAGED_BY_SELECTOR) -> Listing:
        """``list_managed_rayjobs`` with the API server's time of the answer (``Listing.server_time``),
        which the janitor measures the RayJobs' server timestamps against."""
        with reading("list", f"{RAYJOB.plural}.{RAY_GROUP}", RAY_GROUP, RAY_VERSION):
            return list_all(
                partial(
                    self.custom_object_client.list_namespaced_custom_object_with_http_info,
                    RAY_GROUP,
                    RAY_VERSION,
                    namespace,
                    RAYJOB.plural,
                ),
                label_selector=label_selector,
            )

    def earlier_tries(self, namespace: str, identity: AirflowIdentity) -> list[Earlier]:
        """Every RayJob of ``identity``'s task instance in its deployment (any try), and the one a try made
        under the task instance's legacy name before RayJobs carried their deployment, with what each is
        doing: what ``kueue_ray.adoption.plan`` decides on."""
        from kueue_ray.status import observe

        found = self.list_managed_rayjobs(namespace, label_selector=identity.task_instance_selector())
        legacy = self.get_rayjob(identity.legacy_rayjob_name(), namespace)
        earlier = []
        for rayjob in found + ([legacy] if legacy is not None else []):
            holder = AirflowIdentity.from_annotations(rayjob["metadata"].get("annotations"))
            if holder is not None:
                workload = self.find_workload(rayjob["metadata"]["uid"], namespace)
                earlier.append(Earlier(rayjob, holder, observe(rayjob, workload)))
        return earlier

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

    def _annotate(
        self, rayjob: dict, annotations: dict[str, str], labels: dict[str, str] | None = None
    ) -> dict | None:
        """Set ``annotations`` (and ``labels``) on exactly this RayJob (same uid); the patched object, or None
        when it changed hands or disappeared meanwhile.

        The patch carries the version it was decided on (optimistic lock); controllers update status all
        the time, so a conflict re-reads and tries again while the object is still the same uid.
        """
        metadata = rayjob["metadata"]
        name, namespace, uid = metadata["name"], metadata["namespace"], metadata["uid"]
        for _ in range(10):
            patch = {"metadata": {"resourceVersion": metadata["resourceVersion"], "annotations": annotations}}
            if labels:
                patch["metadata"]["labels"] = labels
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

    def delete_rayjob(
        self, name: str, namespace: str, uid: str, resource_version: str | None = None
    ) -> DeleteResult:
        """Delete exactly this RayJob (its RayCluster and submitter follow by garbage collection).

        Preconditions make it safe against a new try that replaced or re-claimed the name meanwhile:
        ``uid`` always, ``resource_version`` when the caller decided from a specific version. Returns
        DELETED (deleted, or already being deleted), GONE (404, or the name is another object's now: ours
        is gone) or CONFLICT (it changed since the caller read it: read it and decide again).
        """
        result = self._delete(name, namespace, uid, resource_version)
        if result is not DeleteResult.CONFLICT:
            return result
        return after_conflict(self.get_rayjob(name, namespace), uid)

    @generic_api_retry
    def _delete(
        self, name: str, namespace: str, uid: str, resource_version: str | None, plural: str = RAYJOB.plural
    ) -> DeleteResult:
        """Delete exactly this object (uid, and version when given, as preconditions) of a ray.io
        ``plural``; DELETED, GONE (404) or CONFLICT (409)."""
        try:
            self.custom_object_client.delete_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, plural, name, body=delete_options(uid, resource_version)
            )
            return DeleteResult.DELETED
        except ApiException as exc:
            if (refused := refused_delete(exc.status)) is None:
                raise
            return refused

    def delete_if_owned(self, name: str, namespace: str, uid: str, owner: AirflowIdentity) -> DeleteOutcome:
        """Delete the RayJob only while ``owner`` (one task try) still owns it; deleted, gone or conflict.

        Reads and deletes with the read version as precondition, so a new try re-annotating the RayJob in
        between turns the delete into a no-op instead of killing the job that try adopted.
        """
        return self._delete_by_rule(
            self.get_rayjob, self.delete_rayjob, name, namespace, uid, while_owned(owner)
        )

    @staticmethod
    def _delete_by_rule(
        get: Callable[[str, str], dict | None],
        delete: Callable[[str, str, str, str | None], DeleteResult],
        name: str,
        namespace: str,
        uid: str,
        rule: DeleteRule,
    ) -> DeleteOutcome:
        """Read, decide by ``rule``, delete with the read version as precondition; again on a conflict."""
        for _ in range(DELETE_DECISIONS):
            decision = rule.decide(get(name, namespace), uid)
            outcome = decision.outcome or rule.settled(
                delete(name, namespace, uid, decision.resource_version)
            )
            if outcome is not None:
                return outcome
        return rule.exhausted

    def read_state(self, name: str, namespace: str, uid: str) -> tuple[dict | None, dict | None]:
        """(RayJob, Workload) now; the RayJob is None once it is gone or replaced by another uid."""
        rayjob = self.get_rayjob(name, namespace)
        if rayjob is None or rayjob["metadata"].get("uid") != uid:
            return None, None
        return rayjob, self.find_workload(uid, namespace)

    def claim_rayjob(self, rayjob: dict, owner: AirflowIdentity) -> dict:
        """Record ``owner`` (this task try) in the RayJob's annotations, for exactly this RayJob.

        Used when a retry adopts a RayJob: the try number moves to the new try, so the previous try's
        trigger no longer owns it and its on_kill leaves it alone. A legacy RayJob (made before RayJobs
        carried their deployment) gets this deployment's labels too: from now on it is this deployment's.
        """
        return _written(
            self._annotate(rayjob, owner.annotations(), owner.labels()),
            rayjob,
            "could not take over the RayJob an earlier try submitted: it changed or disappeared meanwhile",
            "retry the task",
        )

    # --- Kueue objects -------------------------------------------------------------------------------

    @generic_api_retry
    def find_workload(self, uid: str, namespace: str) -> dict | None:
        """The Workload Kueue made for the RayJob with this uid (newest if several), or None yet."""
        with reading("list", f"{WORKLOAD.plural}.{KUEUE_GROUP}", KUEUE_GROUP, KUEUE_VERSION):
            listing = list_all(
                partial(
                    self.custom_object_client.list_namespaced_custom_object_with_http_info,
                    KUEUE_GROUP,
                    KUEUE_VERSION,
                    namespace,
                    WORKLOAD.plural,
                ),
                label_selector=f"{JOB_UID_LABEL}={uid}",
            )
        server_clock(self.conn_id or "kubernetes_default").observe(listing.server_time)
        return newest(listing.items)

    @generic_api_retry
    def get_kueue_object(
        self,
        plural: str,
        name: str,
        namespace: str | None = None,
        *,
        timeout: float | tuple[float, float] | None = None,
    ) -> dict | None:
        """``timeout``: the client's ``_request_timeout`` (seconds, or (connect, read)); None: none."""
        api = self.custom_object_client
        bound = {"_request_timeout": timeout} if timeout is not None else {}
        try:
            with reading("get", f"{plural}.{KUEUE_GROUP}", KUEUE_GROUP, KUEUE_VERSION):
                if namespace is None:
                    return api.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, plural, name, **bound)
                return api.get_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, namespace, plural, name, **bound
                )
        except ApiException as exc:
            if exc.status == 404 and not may_be_missing_api(exc):  # the object is gone, not its API
                return None
            raise

    @generic_api_retry
    def list_kueue_objects(
        self, plural: str, namespace: str | None = None, *, timeout: float | tuple[float, float] | None = None
    ) -> list[dict]:
        api = self.custom_object_client
        bound = {"_request_timeout": timeout} if timeout is not None else {}
        if namespace is None:
            call = partial(api.list_cluster_custom_object_with_http_info, KUEUE_GROUP, KUEUE_VERSION, plural)
        else:
            call = partial(
                api.list_namespaced_custom_object_with_http_info,
                KUEUE_GROUP,
                KUEUE_VERSION,
                namespace,
                plural,
            )
        with reading("list", f"{plural}.{KUEUE_GROUP}", KUEUE_GROUP, KUEUE_VERSION):
            return list_all(call, **bound).items

    def quota_state(self, local_queue: str, namespace: str) -> tuple[dict | None, list[dict]]:
        """As ``AsyncRayJobHook.quota_state``: (the ClusterQueue behind ``local_queue``, the Workloads of
        ``namespace``) for a queue timeout's failure message; (None, []) when a read fails."""
        try:
            lq = self.get_kueue_object(LOCAL_QUEUE.plural, local_queue, namespace) or {}
            queue = self.get_kueue_object(CLUSTER_QUEUE.plural, (lq.get("spec") or {})["clusterQueue"])
            return queue, self.list_kueue_objects(WORKLOAD.plural, namespace)
        except Exception as exc:  # noqa: BLE001 - the timeout stands without the detail
            return quota_unread(exc, namespace, local_queue)

    def preflight(
        self, built: BuiltRayJob, namespace: str, queue: str, priority: str | None
    ) -> QueueCapacity:
        """Everything that can be known to fail before submitting (``kueue_ray.preflight``); a MultiKueue
        worker is read through its own connection (``kueue_ray.multikueue.worker_connection_id``)."""
        from kueue_ray.multikueue import worker_connection_id

        def worker_hook(cluster: str) -> KueueReads:
            return TimedReads(type(self)(kubernetes_conn_id=worker_connection_id(cluster)), WORKER_TIMEOUT)

        return Preflight(self, worker_hook).run(built, namespace, queue, priority)

    # --- refusals and missing APIs --------------------------------------------------------------------

    def identity(self) -> str | None:
        """Who this hook's client authenticates as, when its bearer token says (``kueue_ray.tokens``)."""
        from kueue_ray.tokens import identity_of

        return identity_of(self.custom_object_client.api_client.configuration)

    def explained(self, exc: ApiException, namespace: str | None) -> Exception:
        """``kueue_ray.kube.refusals.explained`` for this hook's client: a refusal or missing API in words."""
        return explain_access(self.custom_object_client, exc, namespace, self.identity, self.conn_id)

    def raise_explained(self, exc: ApiException, namespace: str | None) -> None:
        """Raise ``explained``'s ``ClusterAccessError`` for ``exc`` when there is one, without the client's
        exception chained to it: its dump of headers and body is what the explanation replaces."""
        explained = self.explained(exc, namespace)
        if explained is not exc:
            raise explained from None

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

    def cluster_pods(self, ray_cluster: str, namespace: str) -> list[dict] | None:
        """``AsyncRayJobHook.cluster_pods`` for the worker-slot wait: the RayCluster's pods as plain API
        dicts (``kueue_ray.pod_states``); None when they may not be read."""
        try:
            pods = list_all(
                partial(self.core_v1_client.list_namespaced_pod_with_http_info, namespace),
                label_selector=f"{CLUSTER_LABEL}={ray_cluster}",
            ).items
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise
        return [self.core_v1_client.api_client.sanitize_for_serialization(pod) for pod in pods]

    # --- logs ----------------------------------------------------------------------------------------

    @generic_api_retry
    def submitter_log_tail(self, rayjob_name: str, namespace: str, tail_lines: int = 50) -> str | None:
        """The last lines of the RayJob's submitter (K8sJobMode) — the driver's output as Ray printed it.

        None when there is no submitter pod (HTTPMode, or it was deleted on preemption/retry).
        """
        try:
            pods = list_all(
                partial(self.core_v1_client.list_namespaced_pod_with_http_info, namespace),
                label_selector=f"{SUBMITTER_JOB_LABEL}={rayjob_name}",
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
