"""Talking to the cluster about RayServices: create, adopt, update, read with their Workloads, delete.

The RayJob hooks' connection handling, retries (the provider's ``generic_api_retry``), preflight and queue
positions serve RayServices unchanged; this adds the RayService calls. As for RayJobs, the two 409s that
mean something are answered inside the retried function and never retried: create -> AlreadyExists (a
service with this deterministic name exists: adopt or update it), update / delete with a precondition ->
Conflict (someone wrote in between, or the name belongs to another object now: decide again).

A RayService's Workloads are found by listing the namespace's Workloads that carry Kueue's
``kueue.x-k8s.io/job-uid`` label and keeping the RayService's own and its current clusters' (Kueue may
admit either, see ``kueue_ray.rayservice.status``): a cluster's Workload is labelled with the cluster's uid,
which the RayService's status does not give.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import generic_api_retry
from kubernetes.client.exceptions import ApiException

from kueue_ray.async_hook import AsyncRayJobHook
from kueue_ray.deletion import DeleteOutcome, DeleteResult, while_owned
from kueue_ray.errors import PreflightError
from kueue_ray.hook import RayJobHook
from kueue_ray.kube.api import KUEUE_GROUP, KUEUE_VERSION, RAY_GROUP, RAY_VERSION, RAYSERVICE, WORKLOAD
from kueue_ray.kube.errors import may_be_missing_api
from kueue_ray.kube.pages import list_all
from kueue_ray.kube.server_clock import server_clock
from kueue_ray.naming import JOB_UID_LABEL, AirflowIdentity
from kueue_ray.workload import related_workload


class RayServiceHook(RayJobHook):
    """Synchronous RayService access for the deploy operator (worker side)."""

    @generic_api_retry
    def get_rayservice(self, name: str, namespace: str) -> dict | None:
        try:
            return self.custom_object_client.get_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYSERVICE.plural, name
            )
        except ApiException as exc:
            if exc.status == 404 and not may_be_missing_api(exc):  # the object is gone, not its API
                return None
            raise

    @generic_api_retry
    def _create_rayservice(self, body: dict, namespace: str) -> dict | None:
        try:
            return self.custom_object_client.create_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYSERVICE.plural, body
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise

    def create_or_get_rayservice(self, body: dict, namespace: str) -> tuple[dict, bool]:
        """Create the RayService; if its name is taken, return the existing one. (object, created)."""
        for _ in range(3):
            created = self._create_rayservice(body, namespace)
            if created is not None:
                return created, True
            existing = self.get_rayservice(body["metadata"]["name"], namespace)
            if existing is not None:
                return existing, False
        raise PreflightError(
            "the RayService name keeps changing hands while deploying",
            field="metadata.name",
            value=body["metadata"]["name"],
            fix="check for another controller creating or deleting RayServices with this name",
        )

    @generic_api_retry
    def replace_rayservice(self, body: dict) -> dict | None:
        """PUT ``body`` (its ``metadata.resourceVersion`` is the optimistic lock); None on 409: someone wrote
        the RayService in between, read it again and decide again."""
        metadata = body["metadata"]
        try:
            return self.custom_object_client.replace_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, metadata["namespace"], RAYSERVICE.plural, metadata["name"], body
            )
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise

    @generic_api_retry
    def list_rayservices(self, namespace: str, label_selector: str) -> list[dict]:
        api = self.custom_object_client
        return list_all(
            partial(
                api.list_namespaced_custom_object_with_http_info,
                RAY_GROUP,
                RAY_VERSION,
                namespace,
                RAYSERVICE.plural,
            ),
            label_selector=label_selector,
        ).items

    def delete_rayservice(
        self, name: str, namespace: str, uid: str, resource_version: str | None = None
    ) -> DeleteResult:
        """Delete exactly this RayService (its clusters follow); DELETED, GONE (404) or CONFLICT (409)."""
        return self._delete(name, namespace, uid, resource_version, plural=RAYSERVICE.plural)

    def delete_rayservice_if_owned(
        self, name: str, namespace: str, uid: str, owner: AirflowIdentity
    ) -> DeleteOutcome:
        """Delete the RayService only while ``owner`` (one task try) still owns it; deleted, gone or conflict."""
        return self._delete_by_rule(
            self.get_rayservice, self.delete_rayservice, name, namespace, uid, while_owned(owner)
        )

    @generic_api_retry
    def list_job_workloads(self, namespace: str) -> list[dict]:
        """Every Workload Kueue made for a job in ``namespace`` (they all carry the job-uid label)."""
        api = self.custom_object_client
        listing = list_all(
            partial(
                api.list_namespaced_custom_object_with_http_info,
                KUEUE_GROUP,
                KUEUE_VERSION,
                namespace,
                WORKLOAD.plural,
            ),
            label_selector=JOB_UID_LABEL,
        )
        server_clock(self.conn_id or "kubernetes_default").observe(listing.server_time)
        return listing.items

    def read_service(self, name: str, namespace: str, uid: str) -> tuple[dict | None, list[dict]]:
        """(RayService, its Workloads) now; the RayService is None once it is gone or replaced."""
        service = self.get_rayservice(name, namespace)
        if service is None or service["metadata"].get("uid") != uid:
            return None, []
        return service, [w for w in self.list_job_workloads(namespace) if related_workload(service, w)]


class AsyncRayServiceHook(AsyncRayJobHook):
    """The triggerer's one-off RayService calls (the watch hub streams the rest)."""

    @generic_api_retry
    async def get_rayservice(self, name: str, namespace: str, api_client: Any = None) -> dict | None:
        return await self._get_ray_object(RAYSERVICE.plural, name, namespace, api_client)

    @generic_api_retry
    async def list_job_workloads(self, namespace: str, api_client: Any = None) -> list[dict]:
        async with self._client(api_client) as client:
            return await self._workloads(client, namespace, label_selector=JOB_UID_LABEL)

    async def delete_rayservice(
        self, name: str, namespace: str, uid: str, resource_version: str | None = None
    ) -> DeleteResult:
        """As ``RayServiceHook.delete_rayservice``."""
        return await self._delete(name, namespace, uid, resource_version, plural=RAYSERVICE.plural)

    async def delete_rayservice_if_owned(
        self, name: str, namespace: str, uid: str, owner: AirflowIdentity
    ) -> DeleteOutcome:
        """As ``RayServiceHook.delete_rayservice_if_owned``."""
        return await self._delete_by_rule(
            self.get_rayservice, self.delete_rayservice, name, namespace, uid, while_owned(owner)
        )
