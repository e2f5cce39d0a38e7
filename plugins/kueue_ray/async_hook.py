"""The triggerer's one-off calls to the cluster: read a RayJob, find its Workload, delete it when a
task is killed, the LocalQueue's pending Workloads and the submitter's log.

Apart from ``kueue_ray.hook`` because it runs in the triggerer's event loop on ``kubernetes_asyncio``,
while the synchronous hook runs in workers on ``kubernetes``; the decisions both make (what a deletion
may do, what an answer means) are shared from ``kueue_ray.deletion`` and ``kueue_ray.hook_common``. The
watch hub does the streaming; this is for single requests, on the hub's long-lived ApiClient when given.
Retries follow the provider's ``generic_api_retry``, as in the synchronous hook.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
from kubernetes_asyncio.client import CustomObjectsApi as AsyncCustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from kueue_ray.deletion import (
    DELETE_DECISIONS,
    DeleteOutcome,
    DeleteResult,
    DeleteRule,
    after_conflict,
    delete_options,
    refused_delete,
    while_owned,
    while_waiting,
)
from kueue_ray.hook_common import (
    SUBMITTER_CONTAINER,
    SUBMITTER_JOB_LABEL,
    VISIBILITY_LIMIT,
    VISIBILITY_PATH,
    VISIBILITY_TIMEOUT_S,
    QueuePosition,
    newest,
    positions_from_items,
    quota_unread,
)
from kueue_ray.kube.api import KUEUE_GROUP, KUEUE_VERSION, RAY_GROUP, RAY_VERSION, RAYJOB, WORKLOAD
from kueue_ray.kube.errors import describe_error, may_be_missing_api
from kueue_ray.kube.listbody import ListBody
from kueue_ray.kube.pages import EXPIRED_RESTARTS, PAGE_SIZE, continue_token, list_all_async
from kueue_ray.naming import JOB_UID_LABEL, AirflowIdentity
from kueue_ray.pod_states import CLUSTER_LABEL

log = logging.getLogger(__name__)

PODS_TIMEOUT_S = 30
"""How long one page of a starting Ray cluster's pods may take (a read only the task log's pod line waits on)."""


class AsyncRayJobHook(AsyncKubernetesHook):
    """The few one-off async calls of the triggerer (the watch hub does the streaming)."""

    async def _get_ray_object(self, plural: str, name: str, namespace: str, api_client: Any) -> dict | None:
        """The ray.io object ``plural/name``; None once it is gone (a 404 that is not its API missing)."""
        async with self._client(api_client) as client:
            try:
                return await AsyncCustomObjectsApi(client).get_namespaced_custom_object(
                    RAY_GROUP, RAY_VERSION, namespace, plural, name
                )
            except AsyncApiException as exc:
                if exc.status == 404 and not may_be_missing_api(exc):  # the object is gone, not its API
                    return None
                raise

    @staticmethod
    async def _workloads(client: Any, namespace: str, **selector: str) -> list[dict]:
        """The Workloads of ``namespace`` (``label_selector=`` narrows them), every page."""
        list_page = AsyncCustomObjectsApi(client).list_namespaced_custom_object_with_http_info
        listing = await list_all_async(
            partial(list_page, KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOAD.plural), **selector
        )
        return listing.items

    @generic_api_retry
    async def get_rayjob(self, name: str, namespace: str, api_client: Any = None) -> dict | None:
        return await self._get_ray_object(RAYJOB.plural, name, namespace, api_client)

    @generic_api_retry
    async def find_workload(self, uid: str, namespace: str, api_client: Any = None) -> dict | None:
        async with self._client(api_client) as client:
            workloads = await self._workloads(client, namespace, label_selector=f"{JOB_UID_LABEL}={uid}")
        return newest(workloads)

    async def quota_state(
        self, local_queue: str, namespace: str, api_client: Any = None
    ) -> tuple[dict | None, list[dict]]:
        """(the ClusterQueue behind ``local_queue``, the Workloads of ``namespace``) for a queue timeout's
        failure message (``kueue_ray.quota_holders``); (None, []) when a read fails, which only shortens
        the message."""
        try:
            async with self._client(api_client) as client:
                queue = await self.cluster_queue_of(local_queue, namespace, api_client=client)
                workloads = await self._workloads(client, namespace)
            return queue, workloads
        except Exception as exc:  # noqa: BLE001 - the timeout stands without the detail
            return quota_unread(exc, namespace, local_queue)

    async def cluster_queue_of(self, local_queue: str, namespace: str, api_client: Any = None) -> dict | None:
        """The ClusterQueue behind LocalQueue ``namespace/local_queue`` (raises when it cannot be read)."""
        async with self._client(api_client) as client:
            api = AsyncCustomObjectsApi(client)
            lq = await api.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, namespace, "localqueues", local_queue
            )
            return await api.get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", lq["spec"]["clusterQueue"]
            )

    async def cohort_queues(self, cluster_queue: dict | None, api_client: Any = None) -> list[dict]:
        """Every ClusterQueue when ``cluster_queue`` is in a cohort (what its cohort may lend: the "why
        still queued" explanation, ``kueue_ray.why_queued``), else none; [] when the read fails."""
        if not ((cluster_queue or {}).get("spec") or {}).get("cohortName"):
            return []
        try:
            async with self._client(api_client) as client:
                listing = await list_all_async(
                    partial(
                        AsyncCustomObjectsApi(client).list_cluster_custom_object_with_http_info,
                        KUEUE_GROUP,
                        KUEUE_VERSION,
                        "clusterqueues",
                    )
                )
            return listing.items
        except Exception as exc:  # noqa: BLE001 - the explanation then leaves the cohort out
            log.info("The ClusterQueues of the cohort could not be read: %s", describe_error(exc))
            return []

    async def delete_rayjob(
        self, name: str, namespace: str, uid: str, resource_version: str | None = None
    ) -> DeleteResult:
        """As ``RayJobHook.delete_rayjob``: DELETED, GONE or CONFLICT."""
        result = await self._delete(name, namespace, uid, resource_version)
        if result is not DeleteResult.CONFLICT:
            return result
        return after_conflict(await self.get_rayjob(name, namespace), uid)

    @generic_api_retry
    async def _delete(
        self, name: str, namespace: str, uid: str, resource_version: str | None, plural: str = RAYJOB.plural
    ) -> DeleteResult:
        """As ``RayJobHook._delete``."""
        async with self.get_conn() as client:
            try:
                await AsyncCustomObjectsApi(client).delete_namespaced_custom_object(
                    RAY_GROUP,
                    RAY_VERSION,
                    namespace,
                    plural,
                    name,
                    body=delete_options(uid, resource_version),
                )
                return DeleteResult.DELETED
            except AsyncApiException as exc:
                if (refused := refused_delete(exc.status)) is None:
                    raise
                return refused

    async def delete_if_owned(
        self, name: str, namespace: str, uid: str, owner: AirflowIdentity
    ) -> DeleteOutcome:
        """As ``RayJobHook.delete_if_owned``: only while ``owner`` still owns it; deleted, gone or conflict."""
        return await self._delete_by_rule(
            self.get_rayjob, self.delete_rayjob, name, namespace, uid, while_owned(owner)
        )

    async def delete_if_waiting(
        self, name: str, namespace: str, uid: str, waiter: AirflowIdentity
    ) -> DeleteOutcome:
        """Delete the RayJob for a killed sensor try, only while it is that try's to delete (see
        ``not_waiting_reason``): deleted, gone, or "not deleted: <why>".

        The delete carries the uid and the version the decision was made on, so a newer try registering
        as waiter in between turns it into a conflict, and the decision is made again.
        """
        return await self._delete_by_rule(
            self.get_rayjob, self.delete_rayjob, name, namespace, uid, while_waiting(waiter)
        )

    @staticmethod
    async def _delete_by_rule(
        get: Callable[[str, str], Awaitable[dict | None]],
        delete: Callable[[str, str, str, str | None], Awaitable[DeleteResult]],
        name: str,
        namespace: str,
        uid: str,
        rule: DeleteRule,
    ) -> DeleteOutcome:
        """As ``RayJobHook._delete_by_rule``."""
        for _ in range(DELETE_DECISIONS):
            decision = rule.decide(await get(name, namespace), uid)
            outcome = decision.outcome or rule.settled(
                await delete(name, namespace, uid, decision.resource_version)
            )
            if outcome is not None:
                return outcome
        return rule.exhausted

    async def pending_positions(
        self, namespace: str, queue: str, api_client: Any = None
    ) -> dict[str, QueuePosition] | None:
        """The positions of the LocalQueue's pending Workloads by name, from Kueue's visibility API, for
        every trigger waiting in it at once (``positions_from_items``); None when the API is not served,
        not allowed, failing or unreachable (as ``RayJobHook.queue_position``).

        The answer is decoded one Workload at a time (``kueue_ray.kube.listbody``): a deep queue's summary,
        read again every few seconds while thousands of tasks wait in it, is never held whole."""
        try:
            async with self._client(api_client) as client:
                response = await client.call_api(
                    VISIBILITY_PATH.format(namespace=namespace, name=queue),
                    "GET",
                    query_params=[("limit", VISIBILITY_LIMIT)],
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=VISIBILITY_TIMEOUT_S,
                )
                try:
                    if response.status != 200:
                        raise AsyncApiException(status=response.status, reason=response.reason)
                    body = ListBody((await response.content.read()).decode())
                finally:
                    response.release()
            # Decoding thousands of items takes a while: in a thread, so the event loop (other triggers'
            # events) gets its turns meanwhile.
            return await asyncio.to_thread(positions_from_items, body.items())
        except Exception as exc:  # noqa: BLE001 - any answer or none: only the position is lost
            log.info(
                "Queue position in LocalQueue %s/%s unavailable: %s", namespace, queue, describe_error(exc)
            )
            return None

    async def clusters_pods(
        self, ray_clusters: list[str], namespace: str, api_client: Any = None
    ) -> list[dict] | None:
        """The pods of the RayClusters ``ray_clusters`` in one list (KubeRay's ``ray.io/cluster`` label,
        ``in (...)``) as plain API dicts, for the pods' states between admission and the Ray job running
        (``kueue_ray.pod_states``); None when they may not be read.

        Read as text and decoded in a thread (``kueue_ray.kube.listbody``), in pages as every list: the
        client's own decoding into ``V1Pod`` models and back to dicts took ~300 ms of the triggerer's event
        loop for 200 pods, while every other trigger's events waited (bench/README.md, run AA)."""
        selector = f"{CLUSTER_LABEL} in ({','.join(ray_clusters)})"
        pods: list[dict] = []
        token: str | None = None
        restarts = 0
        async with self._client(api_client) as client:
            while True:
                query: list[tuple[str, Any]] = [("labelSelector", selector), ("limit", PAGE_SIZE)]
                if token:
                    query.append(("continue", token))
                response = await client.call_api(
                    f"/api/v1/namespaces/{namespace}/pods",
                    "GET",
                    query_params=query,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=PODS_TIMEOUT_S,
                )
                try:
                    if response.status in (403, 404):
                        return None
                    if response.status == 410 and token and restarts < EXPIRED_RESTARTS:
                        restarts += 1  # the continue token expired: list again from the first page
                        pods, token = [], None
                        continue
                    if response.status != 200:
                        raise AsyncApiException(status=response.status, reason=response.reason)
                    body = ListBody((await response.content.read()).decode())
                finally:
                    response.release()
                pods.extend(await asyncio.to_thread(list, body.items()))
                token = continue_token(body.fields)
                if token is None:
                    return pods

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
                    await list_all_async(
                        partial(core.list_namespaced_pod_with_http_info, namespace),
                        label_selector=f"{SUBMITTER_JOB_LABEL}={rayjob_name}",
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
