"""Preflight: everything that can be known to fail before a RayJob or RayService is submitted.

The LocalQueue, the WorkloadPriorityClass and the ClusterQueue behind them exist, and the request fits
the ClusterQueue's maximum capacity (with cohort borrowing); each error names the field, the value and
the fix, and a refused request suggests the queues it would fit. ``Preflight`` is given the hook it reads
through (``RayJobHook.preflight`` makes one); the capacity arithmetic is ``kueue_ray.capacity``'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from kubernetes.client.exceptions import ApiException

from kueue_ray.capacity import (
    explain_capacity_shortfall,
    find_shortfall,
    max_capacity,
    queue_fix,
    queues_that_fit,
)
from kueue_ray.errors import PreflightError
from kueue_ray.kube.api import CLUSTER_QUEUE, LOCAL_QUEUE, WORKLOAD_PRIORITY_CLASS
from kueue_ray.kube.errors import describe_error
from kueue_ray.params import QUEUE_ALTERNATIVES

if TYPE_CHECKING:
    from kueue_ray.manifests import BuiltRayJob

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueCapacity:
    """What preflight learned about the queue a RayJob is submitted to."""

    cluster_queue: str
    capacity: dict[str, dict[str, Decimal]]


class KueueReads(Protocol):
    """What preflight reads through: ``RayJobHook`` (and ``RayServiceHook``, a ``RayJobHook``)."""

    def get_kueue_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None: ...

    def list_kueue_objects(self, plural: str, namespace: str | None = None) -> list[dict]: ...

    def raise_explained(self, exc: ApiException, namespace: str | None) -> None: ...


class Preflight:
    """The checks, reading through ``hook``."""

    def __init__(self, hook: KueueReads) -> None:
        self.hook = hook

    def check_queue(self, namespace: str, queue: str, priority: str | None) -> QueueCapacity:
        """Preflight: the LocalQueue exists here, the WorkloadPriorityClass exists, and the ClusterQueue
        behind them exists; returns that ClusterQueue's maximum capacity (with cohort borrowing).

        Each error names the field, the value and the fix, because Kueue itself would only leave the
        RayJob queued forever with a message nobody reads.
        """
        local_queue = self.hook.get_kueue_object(LOCAL_QUEUE.plural, queue, namespace)
        if local_queue is None:
            names = sorted(
                q["metadata"]["name"] for q in self.hook.list_kueue_objects(LOCAL_QUEUE.plural, namespace)
            )
            raise PreflightError(
                f"LocalQueue {queue!r} does not exist in namespace {namespace!r}",
                field="local_queue",
                value=queue,
                fix=f"use one of {names}" if names else f"create a LocalQueue in namespace {namespace!r}",
            )
        if (
            priority is not None
            and self.hook.get_kueue_object(WORKLOAD_PRIORITY_CLASS.plural, priority) is None
        ):
            names = sorted(
                c["metadata"]["name"] for c in self.hook.list_kueue_objects(WORKLOAD_PRIORITY_CLASS.plural)
            )
            raise PreflightError(
                f"WorkloadPriorityClass {priority!r} does not exist, so Kueue would never create a Workload",
                field="priority",
                value=priority,
                fix=f"use one of {names}" if names else "create the WorkloadPriorityClass",
            )
        cq_name = (local_queue.get("spec") or {}).get("clusterQueue")
        cluster_queue = self.hook.get_kueue_object(CLUSTER_QUEUE.plural, cq_name) if cq_name else None
        if cluster_queue is None:
            raise PreflightError(
                f"LocalQueue {queue!r} points to ClusterQueue {cq_name!r}, which does not exist",
                field="local_queue",
                value=queue,
                fix=f"create ClusterQueue {cq_name!r} or point the LocalQueue at an existing one",
            )
        if (cluster_queue.get("spec") or {}).get("stopPolicy", "None") != "None":
            log.warning("ClusterQueue %s is stopped: the RayJob will wait until it is resumed", cq_name)
        cohort_members: list[dict] = []
        cohorts: list[dict] = []
        if (cluster_queue.get("spec") or {}).get("cohortName"):
            cohort_members = self.hook.list_kueue_objects(CLUSTER_QUEUE.plural)
            cohorts = self.hook.list_kueue_objects("cohorts")
        capacity = max_capacity(cluster_queue, cluster_queues=cohort_members, cohorts=cohorts)
        return QueueCapacity(cluster_queue=cq_name, capacity=capacity)

    def run(self, built: BuiltRayJob, namespace: str, queue: str, priority: str | None) -> QueueCapacity:
        """Everything that can be known to fail before submitting: queue, priority class, capacity; a
        refused read or an API the cluster does not serve is a ``ClusterAccessError`` saying so."""
        try:
            queue_capacity = self.check_queue(namespace, queue, priority)
        except ApiException as exc:
            self.hook.raise_explained(exc, namespace)
            raise
        shortfall = find_shortfall(built.pod_sets, queue_capacity.capacity)
        if shortfall is not None:
            resource, available = shortfall
            why = queue_fix(
                explain_capacity_shortfall(built.pod_sets, resource, available, queue_capacity.cluster_queue),
                fitting_queues=self.queues_that_fit(built, namespace, queue),
                other_setup=QUEUE_ALTERNATIVES.get(queue),
            )
            raise PreflightError(
                f"{why.problem}, counting what its cohort can lend",
                field=f"resources[{resource}]",
                value=built.total_request.get(resource),
                fix=why.fix,
            )
        return queue_capacity

    def queues_that_fit(self, built: BuiltRayJob, namespace: str, refused: str) -> list[str]:
        """The other LocalQueues of ``namespace`` whose ClusterQueue could ever admit ``built``: the fix a
        refused request needs first. Read only once preflight has refused, so a run that fits pays nothing;
        a list that fails (e.g. forbidden) leaves the suggestion out, never the refusal."""
        try:
            cluster_queues = {
                q["metadata"]["name"]: q for q in self.hook.list_kueue_objects(CLUSTER_QUEUE.plural)
            }
            cohorts = self.hook.list_kueue_objects("cohorts")
            local_queues = self.hook.list_kueue_objects(LOCAL_QUEUE.plural, namespace)
        except Exception as exc:  # noqa: BLE001 - only the suggestion is lost
            log.info("Other LocalQueues of %s not listed: %s", namespace, describe_error(exc))
            return []
        return queues_that_fit(built.pod_sets, local_queues, cluster_queues, cohorts, refused)
