"""What the KubeRay reconcilers share: the store, the clock, the simulated dashboards, and the queue.

A reconcile is a plain synchronous function. The store never awaits, so one reconcile reads and
writes without any other coroutine in between, which is why the reconcilers need no locks. Anything
that takes time (pods starting, a driver running, a deadline) is a timer that puts a key back on the
queue, never a loop polling every object.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from datetime import datetime

from kubesim.clock import Clock, format_time, parse_time
from kubesim.events import record_event
from kubesim.kuberay.dashboard import RayDashboards

logger = logging.getLogger("kubesim.kuberay")

RAYJOBS = "rayjobs.ray.io"
RAYCLUSTERS = "rayclusters.ray.io"
RAYSERVICES = "rayservices.ray.io"
PODS = "pods"
JOBS = "jobs.batch"
SERVICES = "services"

CREATED_BY = "app.kubernetes.io/created-by"
OPERATOR = "kuberay-operator"

# Kubernetes' generateName alphabet (no vowels, no confusable digits).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

Key = tuple[str, str, str]  # (kind, namespace, name)


def random_suffix(length: int = 5) -> str:
    return "".join(random.choice(_NAME_ALPHABET) for _ in range(length))


def owner_reference(obj: dict, *, controller: bool = True) -> dict:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: dict) -> dict | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


class Context:
    """The reconcilers' handle on the world. Built by ``kubesim.kuberay``; tests may build one directly."""

    def __init__(self, store, clock: Clock, logs, enqueue: Callable[[Key], None]) -> None:
        self.store = store
        self.clock = clock
        self.logs = logs
        self.enqueue = enqueue
        self.dashboards = RayDashboards(clock, self._dashboard_changed)
        self._timers: set[asyncio.TimerHandle] = set()
        self._processes: dict[str, asyncio.Task] = {}
        self._armed: set[tuple[Key, str]] = set()
        # Kubernetes timestamps have whole seconds, far too coarse for simulated durations at a high
        # --time-scale. We remember the precise moment behind each timestamp we wrote.
        self._moments: dict[tuple[str, str], tuple[str, datetime]] = {}
        # The RayJob (namespace, name) whose current attempt runs on a cluster, for dashboard callbacks.
        self.cluster_users: dict[tuple[str, str], Key] = {}
        # What KubeRay's RayService controller keeps in memory: the Serve config it submitted to each
        # cluster (its ``ServeConfigs`` cache, with the simulated Serve deployment behind it), and when it
        # deletes each RayCluster its RayService no longer uses (``RayClusterDeletionTimestamps``).
        self.serve_deployments: dict[tuple[str, str], object] = {}
        self.cluster_deletions: dict[tuple[str, str], datetime] = {}

    # -- time ---------------------------------------------------------------------------------
    def stamp(self, uid: str, field: str) -> str:
        """Now as a Kubernetes timestamp for ``field`` of object ``uid``; the precise moment is remembered."""
        moment = self.clock.now()
        text = format_time(moment)
        self._moments[(uid, field)] = (text, moment)
        return text

    def simulated_since(self, uid: str, field: str, timestamp: str) -> float:
        """Simulated seconds since ``timestamp``: precise if we wrote it, else from its whole second."""
        remembered = self._moments.get((uid, field))
        moment = remembered[1] if remembered and remembered[0] == timestamp else parse_time(timestamp)
        return self.clock.simulated_since(moment)

    def requeue_after(self, key: Key, simulated_seconds: float) -> None:
        """Reconcile ``key`` again once ``simulated_seconds`` have passed."""
        loop = asyncio.get_running_loop()
        delay = max(0.0, self.clock.real_seconds(simulated_seconds))
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            self._timers.discard(handle)
            self.enqueue(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    def requeue_once(self, key: Key, tag: str, simulated_seconds: float) -> None:
        """Like :meth:`requeue_after`, but only the first request per (key, tag) arms a timer."""
        if (key, tag) in self._armed:
            return
        self._armed.add((key, tag))
        self.requeue_after(key, simulated_seconds)

    def call_after(self, simulated_seconds: float, action: Callable[[], None]) -> None:
        """Run ``action`` (a synchronous store-only step) once ``simulated_seconds`` have passed."""
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            self._timers.discard(handle)
            try:
                action()
            except Exception:  # a timer must never take the event loop down with it
                logger.exception("kuberay timer failed")

        handle = loop.call_later(max(0.0, self.clock.real_seconds(simulated_seconds)), fire)
        self._timers.add(handle)

    def start_process(self, pod_uid: str, process: Coroutine) -> None:
        """Run a simulated container process; it dies with its pod (see :meth:`kill_process`)."""
        task = asyncio.get_running_loop().create_task(process)
        self._processes[pod_uid] = task
        task.add_done_callback(lambda _: self._processes.pop(pod_uid, None))

    def kill_process(self, pod_uid: str) -> None:
        task = self._processes.pop(pod_uid, None)
        if task:
            task.cancel()

    def close(self) -> None:
        for task in list(self._processes.values()):
            task.cancel()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        self.dashboards.close()

    # -- events -------------------------------------------------------------------------------
    def event(self, obj: dict, event_type: str, reason: str, message: str) -> None:
        record_event(self.store, obj, event_type, reason, message, component=OPERATOR)

    # -- writes -------------------------------------------------------------------------------
    def write_status(self, key: str, obj: dict, status: dict) -> dict:
        """Replace ``.status`` through the status subresource (409 on a stale resourceVersion)."""
        body = dict(obj)
        body["status"] = status
        return self.store.update(key, body, subresource="status")

    def _dashboard_changed(self, namespace: str, cluster: str) -> None:
        user = self.cluster_users.get((namespace, cluster))
        if user is not None:
            self.enqueue(user)
