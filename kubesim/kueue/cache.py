"""The Kueue controller's informer cache: the objects it decides over, kept current by store subscriptions.

Kueue reads from its informers' caches, not from the API server, on every decision; ``ClusterView`` is
that cache here. Reading it copies nothing, and it indexes the Workloads (queued ones, quota holders,
per-queue usage sums) as they change, so a pass costs O(changed + queued), not a read of every object.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

from kubesim.kueue.conditions import admission_of, condition_true, holds_quota, is_queued, owner_uid
from kubesim.kueue.convert import model_admission
from kubesim.kueue.jobs import WORKLOAD_KEY
from kubesim.kueue.queue_status import Tally
from kubesim.kueue.world import CONFIG_KEYS, CQ_KEY, LQ_KEY, World
from kubesim.watch import Delivery


class WorkloadIndex:
    """What a pass asks of the Workloads, kept per change instead of recomputed by scanning them all.

    Like Kueue's queue manager and cache: the queued workloads, who holds quota in which ClusterQueue,
    per-queue reservation sums, and Workloads by uid and by owner. ``update`` is fed each change with the
    object before and after it, so every entry is exact after every write.
    """

    def __init__(self) -> None:
        self.by_uid: dict[str, dict] = {}
        self.by_owner: dict[str, dict[tuple[str, str], dict]] = {}
        self.queued: dict[tuple[str, str], dict] = {}
        self.queued_count: dict[tuple[str, str], int] = {}
        self.holders: dict[str, dict[tuple[str, str], dict]] = {}
        self.cluster_queue_tally: dict[str, Tally] = {}
        self.local_queue_tally: dict[tuple[str, str], Tally] = {}
        self.holders_version = 0
        """Bumped whenever a quota holder appears, changes or leaves: the admitted snapshot is stale."""
        self._queued_changes: set[tuple[str, str]] = set()

    def take_queued_changes(self) -> set[tuple[str, str]]:
        """The idents whose queued Workload appeared, changed or left since the last call."""
        changes, self._queued_changes = self._queued_changes, set()
        return changes

    def update(self, ident: tuple[str, str], old: dict | None, new: dict | None) -> None:
        if old is not None:
            self._apply(ident, old, -1)
        if new is not None:
            self._apply(ident, new, 1)

    def owned_by(self, uid: str) -> dict | None:
        """The Workload a job owns (the last in list order, should there be several)."""
        owned = self.by_owner.get(uid)
        return owned[max(owned)] if owned else None

    def _apply(self, ident: tuple[str, str], wl: dict, sign: int) -> None:
        uid = wl["metadata"]["uid"]
        owner = owner_uid(wl)
        local_queue = (ident[0], (wl.get("spec") or {}).get("queueName", ""))
        if sign > 0:
            self.by_uid[uid] = wl
            self.by_owner.setdefault(owner, {})[ident] = wl
        else:
            self.by_uid.pop(uid, None)
            owned = self.by_owner.get(owner, {})
            owned.pop(ident, None)
            if not owned:
                self.by_owner.pop(owner, None)
        if is_queued(wl):
            self._queued_changes.add(ident)
            if sign > 0:
                self.queued[ident] = wl
            else:
                self.queued.pop(ident, None)
            self.queued_count[local_queue] = self.queued_count.get(local_queue, 0) + sign
        if holds_quota(wl):
            cq = admission_of(wl)["clusterQueue"]
            if sign > 0:
                self.holders.setdefault(cq, {})[ident] = wl
            else:
                self.holders.get(cq, {}).pop(ident, None)
            usage = model_admission(wl).usage()
            admitted = condition_true(wl, "Admitted")
            self.cluster_queue_tally.setdefault(cq, Tally()).add(usage, admitted, sign)
            self.local_queue_tally.setdefault(local_queue, Tally()).add(usage, admitted, sign)
            self.holders_version += 1


class ClusterView:
    """The current objects of the kinds Kueue watches, kept by store subscriptions (its informer caches).

    The store calls back inside each write, so the view is never behind the store, not even behind the
    controller's own writes within a pass, and reading it copies nothing. The objects are the store's
    frozen ones: read-only. ``on_event(key, type, obj)`` is told of every change. Workloads are also
    indexed (`WorkloadIndex`), and the configuration objects are kept apart from them (`config`), so a
    pass that reads the queues' configuration does not rebuild anything after a Workload write.

    It is empty until ``open`` subscribes (the controller's loop opens it when it starts, and closes it
    when it stops), so the controller's parts can be handed the view when they are built.
    """

    def __init__(self, store, keys: tuple[str, ...], on_event: Callable[[str, str, dict], None]) -> None:
        self._store = store
        self._keys = keys
        self._objects: dict[str, dict[tuple[str, str], dict]] = {key: {} for key in keys}
        self._on_event = on_event
        self._world: World | None = None
        self._config: World | None = None
        self.index = WorkloadIndex()
        self.config_generation = 0
        """Counts the configuration changes a decision reads: any but a ClusterQueue's or a LocalQueue's
        status, which the controller itself writes after every admission and completion."""
        self._subscriptions: list = []
        self.is_open = False

    def open(self) -> None:
        """Subscribe to every watched kind: the store delivers the existing objects, then each change."""
        self.is_open = True
        self._subscriptions = [
            self._store.subscribe(key, functools.partial(self._deliver, key)) for key in self._keys
        ]

    def _deliver(self, key: str, delivery: Delivery) -> None:
        obj = delivery.object
        meta = obj["metadata"]
        ident = (meta.get("namespace", ""), meta["name"])
        objects = self._objects[key]
        old = objects.get(ident)
        if delivery.type == "DELETED":
            objects.pop(ident, None)
        else:
            objects[ident] = obj
        if key == WORKLOAD_KEY:
            self.index.update(ident, old, None if delivery.type == "DELETED" else obj)
        elif key in CONFIG_KEYS:
            self._config = None
            status_only = (
                delivery.type == "MODIFIED"
                and key in (CQ_KEY, LQ_KEY)
                and old is not None
                and _beside_status(old) == _beside_status(obj)
            )
            if not status_only:
                self.config_generation += 1
        self._world = None
        self._on_event(key, delivery.type, obj)

    def get(self, key: str, namespace: str, name: str) -> dict | None:
        return self._objects[key].get((namespace, name))

    def items(self, key: str) -> list[dict]:
        """A kind's objects in the store's list order (namespace, then name)."""
        objects = self._objects[key]
        return [objects[ident] for ident in sorted(objects)]

    def config(self) -> World:
        """The configuration objects (queues, flavors, priority classes, namespaces), without Workloads:
        rebuilt only after one of them changed."""
        if self._config is None:
            self._config = World.build(lambda key: [] if key == WORKLOAD_KEY else self.items(key))
        return self._config

    def world(self) -> World:
        """A World of the current objects, rebuilt only after something changed."""
        if self._world is None:
            self._world = replace(self.config(), workloads=self.items(WORKLOAD_KEY))
        return self._world

    def close(self) -> None:
        self.is_open = False
        for subscription in self._subscriptions:
            subscription.close()
        self._subscriptions = []


def _beside_status(obj: dict) -> dict:
    """A queue without its status and the metadata every write changes: what a status write leaves."""
    metadata = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "status": None, "metadata": metadata}
