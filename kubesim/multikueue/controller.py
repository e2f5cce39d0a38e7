"""The MultiKueue controllers of a manager cluster's Kueue, as one store client on one work queue.

Three reconcilers, keyed like controller-runtime's requests: ``("cluster", name)`` connects a
MultiKueueCluster (``clustersReconciler``), ``("check", name)`` writes a MultiKueue AdmissionCheck's
``Active`` condition (``ACReconciler``), ``("workload", namespace, name)`` dispatches a Workload
(``kubesim.multikueue.dispatch``). Each connected worker's Workloads and RayJobs that carry this manager's
origin label are watched, and their changes bring the manager's Workload back, as Kueue's remote watches do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime

from kubesim.kueue.admission_checks import ADMISSION_CHECK_KEY, MULTIKUEUE_CONTROLLER
from kubesim.kueue.conditions import find_condition, set_condition
from kubesim.kueue.config import KueueConfig
from kubesim.kueue.jobs import PREBUILT_WORKLOAD, WORKLOAD_KEY
from kubesim.multikueue.connections import (
    MULTIKUEUE_CLUSTER_KEY,
    MULTIKUEUE_CONFIG_KEY,
    ConfigError,
    check_verdict,
    endpoint_of,
    parameters_error,
    read_kubeconfig,
    retry_after,
    unreachable_message,
)
from kubesim.multikueue.dispatch import ORIGIN_LABEL, RAYJOB_KEY, Dispatcher, delete_if_present
from kubesim.watch import WatchEvent
from kubesim.workqueue import Timers, WorkQueue

log = logging.getLogger("kubesim.multikueue")

SECRETS = "secrets"
GC_INTERVAL = 60.0
"""``multiKueue.gcInterval`` (simulated seconds, Kueue's default 1 min)."""


@dataclass(eq=False)
class Connection:
    """A worker as the manager's remote client sees it."""

    server: str = ""
    token: str | None = None
    store: object | None = None
    lost_at: datetime | None = None
    """When it was last lost (or first tried): the worker-lost grace counts from here."""
    failed_attempts: int = 0
    watches: list[asyncio.Task] = field(default_factory=list)

    @property
    def connected(self) -> bool:
        return self.store is not None

    def close(self, now: datetime) -> None:
        for task in self.watches:
            task.cancel()
        self.watches.clear()
        if self.store is not None or self.lost_at is None:
            self.lost_at = now
        self.store = None


class MultiKueue:
    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.clock = cluster.clock
        config = cluster.kueue_config if isinstance(cluster.kueue_config, KueueConfig) else KueueConfig()
        self.namespace = config.namespace
        self.origin = config.multikueue_origin
        self.timers = Timers(self.clock, log)
        self.queue: WorkQueue[tuple] = WorkQueue(self._reconcile, self.timers, log)
        self.connections: dict[str, Connection] = {}
        self.dispatcher = Dispatcher(
            self.store, self.clock, self.origin, self._workers, config.worker_lost_timeout, self._lost_for
        )

    def install(self) -> None:
        """Nothing before the first request: MultiKueue has no webhook of its own (the RayJob's
        ``managedBy`` is defaulted by Kueue's RayJob webhook, ``kubesim.kueue.webhook``)."""

    async def run(self) -> None:
        watches = {
            MULTIKUEUE_CLUSTER_KEY: self._on_cluster,
            SECRETS: self._on_secret,
            MULTIKUEUE_CONFIG_KEY: self._on_config,
            ADMISSION_CHECK_KEY: self._on_check,
            WORKLOAD_KEY: self._on_workload,
        }
        self.timers.call_after(GC_INTERVAL, self._collect_garbage)
        try:
            await self.queue.run(self.store, watches)
        finally:
            self.timers.close()
            for connection in self.connections.values():
                connection.close(self.clock.now())
            for connection in self.connections.values():
                for task in connection.watches:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    # ------------------------------------------------------------------------------------------ events

    def _on_cluster(self, event: WatchEvent) -> None:
        self.queue.enqueue(("cluster", event.object["metadata"]["name"]))
        self._enqueue_checks()

    def _on_secret(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if meta.get("namespace") != self.namespace:
            return
        for mkc in self.store.list(MULTIKUEUE_CLUSTER_KEY)[0]:
            ref = ((mkc.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
            if ref.get("location") == meta["name"] and ref.get("locationType", "Secret") == "Secret":
                self.queue.enqueue(("cluster", mkc["metadata"]["name"]))

    def _on_config(self, event: WatchEvent) -> None:
        self._enqueue_checks()
        self._enqueue_workloads()

    def _on_check(self, event: WatchEvent) -> None:
        self.queue.enqueue(("check", event.object["metadata"]["name"]))

    def _on_workload(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if event.type == "DELETED":
            self.dispatcher.forget_deleted(event.object)
        self.queue.enqueue(("workload", meta["namespace"], meta["name"]))

    def _on_remote_workload(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        if (meta.get("labels") or {}).get(ORIGIN_LABEL) == self.origin:
            self.queue.enqueue(("workload", meta["namespace"], meta["name"]))

    def _on_remote_rayjob(self, event: WatchEvent) -> None:
        """``WorkloadKeysFor``: a remote RayJob names its Workload in the prebuilt-workload annotation."""
        meta = event.object["metadata"]
        name = (meta.get("annotations") or {}).get(PREBUILT_WORKLOAD)
        if (meta.get("labels") or {}).get(ORIGIN_LABEL) == self.origin and name:
            self.queue.enqueue(("workload", meta["namespace"], name))

    def _enqueue_checks(self) -> None:
        for check in self.store.list(ADMISSION_CHECK_KEY)[0]:
            self.queue.enqueue(("check", check["metadata"]["name"]))

    def _enqueue_workloads(self) -> None:
        for wl in self.store.list(WORKLOAD_KEY)[0]:
            self.queue.enqueue(("workload", wl["metadata"]["namespace"], wl["metadata"]["name"]))

    # ------------------------------------------------------------------------------------------ reconcile

    def _reconcile(self, key: tuple) -> None:
        if key[0] == "cluster":
            self._reconcile_cluster(key[1])
        elif key[0] == "check":
            self._reconcile_check(key[1])
        else:
            after = self.dispatcher.reconcile(key[1], key[2])
            if after:
                self.queue.requeue_after(key, after)

    def _reconcile_cluster(self, name: str) -> None:
        mkc = self.store.get_or_none(MULTIKUEUE_CLUSTER_KEY, name)
        if mkc is None or mkc["metadata"].get("deletionTimestamp"):
            connection = self.connections.pop(name, None)
            if connection is not None:
                connection.close(self.clock.now())
            return
        connection = self.connections.setdefault(name, Connection(lost_at=self.clock.now()))
        ref = ((mkc.get("spec") or {}).get("clusterSource") or {}).get("kubeConfig") or {}
        secret = None
        if ref.get("location") and ref.get("locationType", "Secret") == "Secret":
            secret = self.store.get_or_none(SECRETS, ref["location"], namespace=self.namespace)
        try:
            server, token = endpoint_of(read_kubeconfig(mkc, secret))
        except ConfigError as err:
            self._disconnect(name, connection)
            self._write_cluster_status(mkc, False, err.reason, f"load client config failed: {err}")
            return
        if connection.connected and (connection.server, connection.token) == (server, token):
            self._write_cluster_status(mkc, True, "Active", "Connected")
            return
        self._disconnect(name, connection)
        if (connection.server, connection.token) != (server, token):
            connection.server, connection.token, connection.failed_attempts = server, token, 0
        target = self.cluster.reachable.get(server)
        refusal = None
        if target is None:
            refusal = unreachable_message(server)
        elif not target.authenticates(token):
            refusal = "Unauthorized"  # the API server's 401 to the client's first watch
        if refusal is not None:
            connection.failed_attempts += 1
            self._write_cluster_status(mkc, False, "ClientConnectionFailed", refusal)
            self.queue.requeue_after(("cluster", name), retry_after(connection.failed_attempts))
            return
        connection.store = target.store
        connection.failed_attempts = 0
        connection.lost_at = None
        for key, handler in ((WORKLOAD_KEY, self._on_remote_workload), (RAYJOB_KEY, self._on_remote_rayjob)):
            connection.watches.append(asyncio.create_task(self.queue.watch(target.store, key, handler)))
        self._write_cluster_status(mkc, True, "Active", "Connected")
        self._enqueue_workloads()

    def _disconnect(self, name: str, connection: Connection) -> None:
        if connection.connected:
            connection.close(self.clock.now())
            self._enqueue_workloads()

    def _write_cluster_status(self, mkc: dict, active: bool, reason: str, message: str) -> None:
        """``updateStatus``: written only when the condition's state changes."""
        self._write_active(MULTIKUEUE_CLUSTER_KEY, mkc, "True" if active else "False", reason, message)

    def _reconcile_check(self, name: str) -> None:
        check = self.store.get_or_none(ADMISSION_CHECK_KEY, name)
        if check is None or (check.get("spec") or {}).get("controllerName") != MULTIKUEUE_CONTROLLER:
            return
        ref = (check.get("spec") or {}).get("parameters")
        config = None
        if parameters_error(ref) is None:
            config = self.store.get_or_none(MULTIKUEUE_CONFIG_KEY, ref["name"])
        clusters = {mkc["metadata"]["name"]: mkc for mkc in self.store.list(MULTIKUEUE_CLUSTER_KEY)[0]}
        self._write_active(ADMISSION_CHECK_KEY, check, *check_verdict(check, config, clusters))

    def _write_active(self, key: str, obj: dict, status: str, reason: str, message: str) -> None:
        generation = obj["metadata"].get("generation", 1)
        current = find_condition(obj, "Active") or {}
        wanted = (status, reason, message, generation)
        if (
            current.get("status"),
            current.get("reason"),
            current.get("message"),
            current.get("observedGeneration"),
        ) == wanted:
            return
        updated = dict(obj, status=dict(obj.get("status") or {}))
        updated["status"]["conditions"] = [dict(c) for c in updated["status"].get("conditions") or []]
        set_condition(updated, "Active", status, reason, message, self.clock.timestamp())
        self.store.update(key, updated, subresource="status")

    def _collect_garbage(self) -> None:
        """``remoteClient.runGC`` on every connected worker: a copy whose manager Workload is gone (or being
        deleted) is removed, with the RayJob that controls it when that one carries this origin."""
        self.timers.call_after(GC_INTERVAL, self._collect_garbage)
        for connection in list(self.connections.values()):
            if connection.store is None:
                continue
            store = connection.store
            selector = f"{ORIGIN_LABEL}={self.origin}"
            for remote in store.list(WORKLOAD_KEY, label_selector=selector)[0]:
                meta = remote["metadata"]
                local = self.store.get_or_none(WORKLOAD_KEY, meta["name"], namespace=meta["namespace"])
                if local is not None and not local["metadata"].get("deletionTimestamp"):
                    continue
                owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
                if owner is not None and (owner.get("apiVersion"), owner.get("kind")) == (
                    "ray.io/v1",
                    "RayJob",
                ):
                    job = store.get_or_none(RAYJOB_KEY, owner["name"], namespace=meta["namespace"])
                    if (
                        job is not None
                        and (job["metadata"].get("labels") or {}).get(ORIGIN_LABEL) == self.origin
                    ):
                        delete_if_present(store, RAYJOB_KEY, owner["name"], meta["namespace"])
                delete_if_present(store, WORKLOAD_KEY, meta["name"], meta["namespace"])

    # ------------------------------------------------------------------------------------------ workers

    def _workers(self, check_name: str) -> tuple[dict, list[str]]:
        """``remoteClientsForAC``: the connected clusters of the check's MultiKueueConfig, and the others."""
        check = self.store.get_or_none(ADMISSION_CHECK_KEY, check_name) or {}
        ref = (check.get("spec") or {}).get("parameters") or {}
        config = self.store.get_or_none(MULTIKUEUE_CONFIG_KEY, ref.get("name", "")) or {}
        available, unavailable = {}, []
        for name in (config.get("spec") or {}).get("clusters") or []:
            connection = self.connections.get(name)
            if connection is not None and connection.connected:
                available[name] = connection.store
            else:
                unavailable.append(name)
        return available, unavailable

    def _lost_for(self, name: str) -> float:
        connection = self.connections.get(name)
        if connection is None or connection.lost_at is None:
            return 0.0
        return self.clock.simulated_since(connection.lost_at)
