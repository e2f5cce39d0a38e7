"""Preflight: everything that can be known to fail before a RayJob or RayService is submitted.

The LocalQueue, the WorkloadPriorityClass and the ClusterQueue behind them exist, and the request fits
the ClusterQueue's maximum capacity (with cohort borrowing); each error names the field, the value and
the fix, and a refused request suggests the queues it would fit. Only quota is judged, never nodes: on a
MultiKueue manager the ClusterQueue's quota is the manager's and the capacity the workers', so a RayJob no
manager node could hold is submitted, and one the manager's quota can never admit is refused. A manager's
ClusterQueue whose MultiKueue check dispatches to workers Airflow has a connection to
(``kueue_worker_<name>``) is judged on the workers too: when every worker of its MultiKueueConfig was read
and none has the LocalQueue or the quota, the request is refused naming each; a worker that cannot be read
(no connection, refused, unreachable) may admit it, so it is submitted
(``tests/integration/kueue_ray/test_multikueue.py``). ``Preflight`` is given the hook it reads through
and, for the workers, a function making a worker's hook (``RayJobHook.preflight`` makes both); the
capacity arithmetic is ``kueue_ray.capacity``'s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

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
from kueue_ray.multikueue import CONTROLLER as MULTIKUEUE
from kueue_ray.multikueue import multikueue_config_name, worker_connection_id, workers_refusal
from kueue_ray.params import QUEUE_ALTERNATIVES

if TYPE_CHECKING:
    from kueue_ray.manifests import BuiltRayJob

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueCapacity:
    """What preflight learned about the queue a RayJob is submitted to."""

    cluster_queue: str
    capacity: dict[str, dict[str, Decimal]]
    admission_checks: tuple[dict, ...] = ()
    """The ClusterQueue's ``spec.admissionChecksStrategy.admissionChecks`` rules (``name``, ``onFlavors``)."""


class KueueReads(Protocol):
    """What preflight reads through: ``RayJobHook`` (and ``RayServiceHook``, a ``RayJobHook``)."""

    def get_kueue_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None: ...

    def list_kueue_objects(self, plural: str, namespace: str | None = None) -> list[dict]: ...

    def raise_explained(self, exc: ApiException, namespace: str | None) -> None: ...


WORKER_TIMEOUT = (5.0, 10.0)
"""(connect, read) seconds of each read of a MultiKueue worker (``TimedReads``)."""
WORKER_DEADLINE = 15.0
"""Seconds the preflight waits for the workers' answers (read side by side): a worker out of Airflow's
reach delays a submission by this at most, never by the system's TCP timeouts and the client's retries,
and is then left to Kueue."""


class TimedReads:
    """``hook``'s reads, each bounded by ``timeout`` (the client's ``_request_timeout``)."""

    def __init__(self, hook: Any, timeout: float | tuple[float, float]) -> None:
        self.hook, self.timeout = hook, timeout

    def get_kueue_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        return self.hook.get_kueue_object(plural, name, namespace, timeout=self.timeout)

    def list_kueue_objects(self, plural: str, namespace: str | None = None) -> list[dict]:
        return self.hook.list_kueue_objects(plural, namespace, timeout=self.timeout)

    def raise_explained(self, exc: ApiException, namespace: str | None) -> None:
        self.hook.raise_explained(exc, namespace)


class Preflight:
    """The checks, reading through ``hook``; a MultiKueue worker's through ``worker_hook(cluster)``."""

    def __init__(self, hook: KueueReads, worker_hook: Callable[[str], KueueReads] | None = None) -> None:
        self.hook = hook
        self.worker_hook = worker_hook

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
        checks = ((cluster_queue.get("spec") or {}).get("admissionChecksStrategy") or {}).get(
            "admissionChecks"
        )
        return QueueCapacity(cluster_queue=cq_name, capacity=capacity, admission_checks=tuple(checks or ()))

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
        if self.worker_hook is not None and queue_capacity.admission_checks:
            self.check_workers(built, namespace, queue, queue_capacity)
        return queue_capacity

    def check_workers(self, built: BuiltRayJob, namespace: str, queue: str, on: QueueCapacity) -> None:
        """Refuse ``built`` when the ClusterQueue's MultiKueue check dispatches to workers none of which can
        ever admit it (``multikueue.workers_refusal``): MultiKueue copies the Workload to every worker of the
        check's MultiKueueConfig under the same LocalQueue and namespace, and Kueue would leave it pending
        there until ``queue_timeout``. Reads that fail leave the request to Kueue."""
        workers = self.multikueue_workers(on)
        if not workers:
            return
        verdicts = self.worker_verdicts(workers, built, namespace, queue)
        refusals = {worker: verdict for worker, verdict in verdicts.items() if verdict is not None}
        if len(refusals) == len(workers):  # else one may admit it, or could not be judged
            raise workers_refusal(on.cluster_queue, refusals)

    def worker_verdicts(
        self, workers: list[str], built: BuiltRayJob, namespace: str, queue: str
    ) -> dict[str, PreflightError | None]:
        """``worker_verdict`` of each worker, read side by side (a thread each), all within
        ``WORKER_DEADLINE``: a worker that has not answered by then is not judged."""
        found: dict[str, PreflightError | None] = {}

        def judge(worker: str) -> None:
            found[worker] = self.worker_verdict(worker, built, namespace, queue)

        threads = [
            threading.Thread(target=judge, args=(worker,), daemon=True, name=f"preflight-{worker}")
            for worker in workers
        ]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + WORKER_DEADLINE
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        late = [worker for worker in workers if worker not in found]
        if late:
            log.info(
                "MultiKueue worker cluster(s) %s did not answer within %gs: whether they can ever admit "
                "the RayJob is left to Kueue there",
                ", ".join(late),
                WORKER_DEADLINE,
            )
        return {worker: found.get(worker) for worker in workers}

    def multikueue_workers(self, on: QueueCapacity) -> list[str]:
        """The worker clusters the ClusterQueue's MultiKueue check dispatches every Workload to (its
        MultiKueueConfig's ``spec.clusters``); none when it has no such check, the check applies to some
        flavors only (a Workload may be admitted without it), or the objects cannot be read."""
        try:
            for rule in on.admission_checks:
                check = self.hook.get_kueue_object("admissionchecks", str(rule.get("name")))
                if ((check or {}).get("spec") or {}).get("controllerName") != MULTIKUEUE:
                    continue
                config_name = multikueue_config_name(check)
                if rule.get("onFlavors") or config_name is None:
                    return []
                config = self.hook.get_kueue_object("multikueueconfigs", config_name)
                return [str(c) for c in ((config or {}).get("spec") or {}).get("clusters") or ()]
        except Exception as exc:  # noqa: BLE001 - the workers are then left to Kueue
            log.info("ClusterQueue %s's admission checks not read: %s", on.cluster_queue, describe_error(exc))
        return []

    def worker_verdict(
        self, worker: str, built: BuiltRayJob, namespace: str, queue: str
    ) -> PreflightError | None:
        """Why MultiKueue worker ``worker`` can never admit ``built``, or None when it may, or when it cannot
        be read through its Airflow connection (the log says which)."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        assert self.worker_hook is not None
        try:
            on_worker = Preflight(self.worker_hook(worker)).check_queue(namespace, queue, None)
        except PreflightError as exc:
            return exc
        except AirflowNotFoundException:
            log.info(
                "No Airflow connection %r for MultiKueue worker cluster %r: whether it can ever admit the "
                "RayJob is left to Kueue there",
                worker_connection_id(worker),
                worker,
            )
            return None
        except Exception as exc:  # noqa: BLE001 - Kueue on that worker will tell
            log.info("MultiKueue worker cluster %s not read: %s", worker, describe_error(exc))
            return None
        shortfall = find_shortfall(built.pod_sets, on_worker.capacity)
        if shortfall is None:
            return None
        resource, available = shortfall
        why = explain_capacity_shortfall(built.pod_sets, resource, available, on_worker.cluster_queue)
        return PreflightError(
            why.problem, field=f"resources[{resource}]", value=built.total_request.get(resource), fix=why.fix
        )

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
