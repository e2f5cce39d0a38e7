"""The KubeRay operator: the RayJob, RayCluster and RayService controllers as one store client.

Like controller-runtime, it watches its kinds and their children, maps every event to the key of the
object to reconcile, and runs reconciles one at a time from a de-duplicating queue. The reconcilers
live in ``rayjob`` / ``raycluster`` / ``rayservice``; the submitter Job and its pods (which a real
cluster's Job controller and kubelet would run) in ``submitter``; the Ray dashboard and drivers in
``dashboard``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from kubesim.errors import ApiError
from kubesim.kuberay.context import (
    CREATED_BY,
    JOBS,
    OPERATOR,
    PODS,
    RAYCLUSTERS,
    RAYJOBS,
    RAYSERVICES,
    Context,
    Key,
    controller_of,
    logger,
)
from kubesim.kuberay.raycluster import CLUSTER_LABEL, reconcile_raycluster
from kubesim.kuberay.rayjob import REQUEUE, reconcile_rayjob
from kubesim.kuberay.rayservice import reconcile_rayservice
from kubesim.kuberay.submitter import JOB_NAME, reconcile_submitter_job
from kubesim.watch import WatchEvent

RECONCILERS: dict[str, Callable[[Context, str, str], None]] = {
    "rayjob": reconcile_rayjob,
    "raycluster": reconcile_raycluster,
    "rayservice": reconcile_rayservice,
    "job": reconcile_submitter_job,
}
CONFLICT_RETRY = 0.1  # simulated seconds before retrying a reconcile that lost a write race
_OWNER_KINDS = {"RayJob": "rayjob", "RayService": "rayservice"}


class KubeRay:
    def __init__(self, store, clock, logs) -> None:
        self._queue: asyncio.Queue[Key] = asyncio.Queue()
        self._queued: set[Key] = set()
        self.ctx = Context(store, clock, logs, self.enqueue)

    def enqueue(self, key: Key) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def install(self) -> None:
        """KubeRay validates in its reconcile loop, not in an admission webhook: nothing to install."""

    async def run(self) -> None:
        watches = {
            RAYJOBS: self._on_rayjob,
            RAYCLUSTERS: self._on_raycluster,
            RAYSERVICES: self._on_rayservice,
            PODS: self._on_pod,
            JOBS: self._on_job,
        }
        tasks = [asyncio.create_task(self._watch(key, handler)) for key, handler in watches.items()]
        tasks.append(asyncio.create_task(self._work()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self.ctx.close()

    async def _watch(self, key: str, handler: Callable[[WatchEvent], None]) -> None:
        """List+watch forever; a fresh watch replays every object as ADDED, so nothing is missed."""
        while True:
            watcher = self.ctx.store.watch(key)
            try:
                async for event in watcher:
                    if event.type == "ERROR":
                        break
                    if event.type != "BOOKMARK":
                        handler(event)
            finally:
                watcher.close()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._reconcile(key)
            await asyncio.sleep(0)  # let the API server and the other controllers breathe

    def _reconcile(self, key: Key) -> None:
        kind, namespace, name = key
        try:
            RECONCILERS[kind](self.ctx, namespace, name)
        except ApiError as exc:
            if exc.code in (404, 409):  # a child vanished or someone wrote first: look again shortly
                self.ctx.requeue_after(key, CONFLICT_RETRY)
            else:
                logger.warning("reconcile %s failed: %s", key, exc)
                self.ctx.requeue_after(key, REQUEUE)
        except Exception:
            logger.exception("reconcile %s crashed", key)
            self.ctx.requeue_after(key, REQUEUE)

    # -- event → key mapping ------------------------------------------------------------------
    def _on_rayjob(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        self.enqueue(("rayjob", meta["namespace"], meta["name"]))

    def _on_rayservice(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        self.enqueue(("rayservice", meta["namespace"], meta["name"]))

    def _on_raycluster(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        self.enqueue(("raycluster", meta["namespace"], meta["name"]))
        self._enqueue_owner(event.object)

    def _on_job(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if (meta.get("labels") or {}).get(CREATED_BY) != OPERATOR:
            return
        self.enqueue(("job", meta["namespace"], meta["name"]))
        self._enqueue_owner(event.object)

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(CREATED_BY) != OPERATOR:
            return
        if event.type == "DELETED":
            self.ctx.kill_process(meta["uid"])
            self.ctx.logs.forget(meta["namespace"], meta["name"])
        if CLUSTER_LABEL in labels:
            self.enqueue(("raycluster", meta["namespace"], labels[CLUSTER_LABEL]))
        if JOB_NAME in labels:
            self.enqueue(("job", meta["namespace"], labels[JOB_NAME]))

    def _enqueue_owner(self, obj: dict) -> None:
        owner = controller_of(obj)
        if owner and owner.get("kind") in _OWNER_KINDS:
            self.enqueue((_OWNER_KINDS[owner["kind"]], obj["metadata"]["namespace"], owner["name"]))
