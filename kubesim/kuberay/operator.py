"""The KubeRay operator: the RayJob, RayCluster and RayService controllers as one store client.

Like controller-runtime, it watches its kinds and their children, maps every event to the key of the
object to reconcile, and runs reconciles one at a time from a de-duplicating queue
(``kubesim.workqueue``). The reconcilers live in ``rayjob`` / ``raycluster`` / ``rayservice``; the Ray
dashboard and drivers in ``dashboard``. The submitter Job it creates for a RayJob is run by the cluster's
Job controller (``kubesim.batch``), as on a real cluster; its container runs the ray CLI of ``submitter``,
which ``install`` offers the cluster's kubelet.
"""

from __future__ import annotations

from collections.abc import Callable

from kubesim.kubelet import ContainerProgram
from kubesim.kuberay.context import (
    CREATED_BY,
    JOBS,
    OPERATOR,
    PODS,
    RAYCLUSTERS,
    RAYJOBS,
    RAYSERVICES,
    SERVICES,
    Context,
    Key,
    controller_of,
    logger,
)
from kubesim.kuberay.raycluster import CLUSTER_LABEL, reconcile_raycluster
from kubesim.kuberay.rayjob import reconcile_rayjob
from kubesim.kuberay.rayservice import reconcile_rayservice
from kubesim.kuberay.submitter import ray_job_cli
from kubesim.watch import WatchEvent
from kubesim.workqueue import WorkQueue

RECONCILERS: dict[str, Callable[[Context, str, str], None]] = {
    "rayjob": reconcile_rayjob,
    "raycluster": reconcile_raycluster,
    "rayservice": reconcile_rayservice,
}
_OWNER_KINDS = {"RayJob": "rayjob", "RayService": "rayservice"}


class KubeRay:
    def __init__(self, store, clock, logs, container_programs: list[ContainerProgram] | None = None) -> None:
        """``container_programs`` is the cluster's list of programs its kubelet can run in a container
        (``Cluster.container_programs``); ``install`` adds the ray CLI the submitter runs."""
        self.ctx = Context(store, clock, logs, self._enqueue)
        self.queue: WorkQueue[Key] = WorkQueue(self._reconcile, self.ctx.timers, logger)
        self._container_programs = container_programs if container_programs is not None else []
        # What the RayService controller's predicates compare: generation, labels, annotations.
        self._rayservice_seen: dict[tuple[str, str], tuple] = {}

    def _enqueue(self, key: Key) -> None:
        self.queue.enqueue(key)

    def install(self) -> None:
        """KubeRay validates in its reconcile loop, not in an admission webhook. What it does install is
        no part of the operator but of the Ray image: the ``ray job`` CLI its submitter pods run."""
        self._container_programs.append(ray_job_cli(self.ctx))

    async def run(self) -> None:
        watches = {
            RAYJOBS: self._on_rayjob,
            RAYCLUSTERS: self._on_raycluster,
            RAYSERVICES: self._on_rayservice,
            PODS: self._on_pod,
            JOBS: self._on_job,
            SERVICES: self._on_service,
        }
        try:
            await self.queue.run(self.ctx.store, watches)
        finally:
            self.ctx.close()

    def _reconcile(self, key: Key) -> None:
        kind, namespace, name = key
        RECONCILERS[kind](self.ctx, namespace, name)

    # -- event → key mapping ------------------------------------------------------------------
    def _on_rayjob(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        self._enqueue(("rayjob", meta["namespace"], meta["name"]))

    def _on_rayservice(self, event: WatchEvent) -> None:
        """``GenerationChangedPredicate`` or ``LabelChangedPredicate`` or ``AnnotationChangedPredicate``:
        an update of the status or of the finalizers alone reconciles nothing."""
        meta = event.object["metadata"]
        where = (meta["namespace"], meta["name"])
        seen = (meta.get("generation"), meta.get("labels") or {}, meta.get("annotations") or {})
        if event.type == "DELETED":
            self._rayservice_seen.pop(where, None)
        else:
            before = self._rayservice_seen.get(where)
            self._rayservice_seen[where] = seen
            if event.type == "MODIFIED" and before == seen:
                return
        self._enqueue(("rayservice", *where))

    def _on_service(self, event: WatchEvent) -> None:
        """``Owns(&corev1.Service{})``: a RayService's Services bring it back."""
        self._enqueue_owner(event.object)

    def _on_raycluster(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        self._enqueue(("raycluster", meta["namespace"], meta["name"]))
        self._enqueue_owner(event.object)

    def _on_job(self, event: WatchEvent) -> None:
        """The submitter Job's status (its ``Complete`` / ``Failed`` conditions) is the RayJob's business."""
        if (event.object["metadata"].get("labels") or {}).get(CREATED_BY) == OPERATOR:
            self._enqueue_owner(event.object)

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(CREATED_BY) != OPERATOR or CLUSTER_LABEL not in labels:
            return
        if event.type == "DELETED":
            self.ctx.logs.forget(meta["namespace"], meta["name"])
        self._enqueue(("raycluster", meta["namespace"], labels[CLUSTER_LABEL]))

    def _enqueue_owner(self, obj: dict) -> None:
        owner = controller_of(obj)
        if owner and owner.get("kind") in _OWNER_KINDS:
            self._enqueue((_OWNER_KINDS[owner["kind"]], obj["metadata"]["namespace"], owner["name"]))
