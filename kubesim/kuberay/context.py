"""What the KubeRay reconcilers share: the store, the clock, the simulated dashboards, and the queue.

A reconcile is a plain synchronous function. The store never awaits, so one reconcile reads and
writes without any other coroutine in between, which is why the reconcilers need no locks. Anything
that takes time (pods starting, a driver running, a deadline) is a timer (``kubesim.workqueue.Timers``)
that puts a key back on the queue, never a loop polling every object.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from datetime import datetime, timedelta

from kubesim.clock import Clock
from kubesim.events import record_event
from kubesim.kuberay.dashboard import RayDashboards
from kubesim.workqueue import Moments, Timers

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
        self.timers = Timers(clock, logger)
        self.call_after = self.timers.call_after
        self.moments = Moments(clock)
        self.stamp = self.moments.stamp
        self.simulated_since = self.moments.simulated_since
        self._armed: set[tuple[Key, str]] = set()
        self._due: dict[Key, datetime] = {}
        self._failures: dict[Key, int] = {}
        # The RayJob (namespace, name) whose current attempt runs on a cluster, for dashboard callbacks.
        self.cluster_users: dict[tuple[str, str], Key] = {}
        # What KubeRay's RayService controller keeps in memory: the Serve config it submitted to each
        # cluster (its ``ServeConfigs`` cache, with the simulated Serve deployment behind it), and when it
        # deletes each RayCluster its RayService no longer uses (``RayClusterDeletionTimestamps``).
        self.serve_deployments: dict[tuple[str, str], object] = {}
        self.cluster_deletions: dict[tuple[str, str], datetime] = {}

    # -- time ---------------------------------------------------------------------------------
    def requeue_after(self, key: Key, simulated_seconds: float) -> None:
        """Reconcile ``key`` again once ``simulated_seconds`` have passed."""
        self.call_after(simulated_seconds, lambda: self.enqueue(key))

    def requeue_within(self, key: Key, simulated_seconds: float) -> None:
        """controller-runtime's ``RequeueAfter``: the delaying queue holds one entry per key, so of several
        requests the earliest wins and the later ones add nothing."""
        due = self.clock.now() + timedelta(seconds=self.clock.real_seconds(simulated_seconds))
        current = self._due.get(key)
        if current is not None and current <= due:
            return
        self._due[key] = due

        def fire() -> None:
            if self._due.get(key) == due:
                del self._due[key]
                self.enqueue(key)

        self.call_after(simulated_seconds, fire)

    def requeue_failed(self, key: Key) -> None:
        """A reconcile that ended in an error: controller-runtime ignores its ``RequeueAfter`` and retries
        with the workqueue's per-item exponential backoff (5 ms, doubling, at most 1000 s)."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        self.requeue_within(key, min(1000.0, 0.005 * 2**failures))

    def forget(self, key: Key) -> None:
        """A reconcile that succeeded: the next failure starts the backoff again (``Forget``)."""
        self._failures.pop(key, None)

    def requeue_once(self, key: Key, tag: str, simulated_seconds: float) -> None:
        """Like :meth:`requeue_after`, but only the first request per (key, tag) arms a timer."""
        if (key, tag) in self._armed:
            return
        self._armed.add((key, tag))
        self.requeue_after(key, simulated_seconds)

    def close(self) -> None:
        self.timers.close()
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
