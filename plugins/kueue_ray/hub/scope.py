"""What the hub keeps per (connection, namespace): the ``_Scope`` with its subscribers, shared ApiClient
and shared visibility reads, and the ``_WatchLoop`` of each resource it watches there.

Apart from ``kueue_ray.hub.watchhub.WatchHub`` because these are the per-namespace state the hub creates with a
scope's first subscriber and drops with its last; the hub itself decides what to cache and whom to tell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from kueue_ray.holdings import Holding
from kueue_ray.hub.resources import RAYJOB, RAYSERVICE, WORKLOAD, WatchedResource
from kueue_ray.hub.settings import HubSettings
from kueue_ray.hub.subscriptions import ServiceSubscription, Subscription
from kueue_ray.kube.errors import can_i, not_served_message
from kueue_ray.kube.listwatch import ListWatchLoop
from kueue_ray.kube.packed import PackedObjects
from kueue_ray.kube.refusals import ApiNotServed, Denial, RefusalWindow, Refused, refusal_timeout
from kueue_ray.kube.shared_client import SharedApiClient
from kueue_ray.kube.watch_target import RefusalMemory, Target
from kueue_ray.wait_policy import DEFAULT_RESYNC_SECONDS


class LoopOwner(Protocol):
    """What a watch loop hands its objects and news to (``kueue_ray.hub.watchhub.WatchHub``)."""

    settings: HubSettings
    watch_refusals: RefusalMemory

    def offer(self, loop: _WatchLoop, key: str, obj: dict, deliver: bool = True) -> bool: ...

    def deliver(self, loop: _WatchLoop, key: str, obj: dict | None) -> None: ...

    def offer_deleted(self, loop: _WatchLoop, key: str, obj: dict | None = None) -> None: ...

    def notify(self, scope: _Scope, message: str) -> None: ...


log = logging.getLogger(__name__)


class _WatchLoop(ListWatchLoop):
    """The list+watch of one resource (RayJobs, RayServices or Workloads) in one namespace of one connection, serving
    every subscription of that scope: objects are cached by ``resource.key_of`` and offered to the hub,
    which hands newer versions to their subscribers. While the watch is refused, every subscriber is told
    in its task log how waiting works instead (``polling_notice``)."""

    def __init__(self, hub: LoopOwner, scope: _Scope, resource: WatchedResource) -> None:
        self.hub = hub
        self.scope = scope
        self.conn_id, self.namespace, _ = scope.key
        self.resource = resource
        super().__init__(
            Target(
                self.conn_id,
                resource.group,
                resource.version,
                resource.plural,
                self.namespace,
                resource.label_selector,
            ),
            scope.client,
            hub.settings,
            hub.watch_refusals,
        )
        self.window = RefusalWindow(hub.settings.refusal_timeout or refusal_timeout())
        """The row of 401/403 to this loop's list or watch, which ends its subscribers' waits once long."""
        self.not_served: ApiNotServed | None = None
        """Set when a 404 to the list turned out (discovery) to mean the API group/version is not served."""
        self._probe: asyncio.Task | None = None
        self.failing = False
        """The loop's last request failed and nothing succeeded since: reads wait on it (``hub.reads``)."""
        self._outcome: asyncio.Event | None = None
        self._listed: set[str] = set()
        """The keys the list in progress has delivered so far."""
        self._undelivered: set[str] = set()
        """The keys the first list has cached anew and not delivered yet (``end_list`` does), including
        those of an attempt whose continue token expired."""
        if resource.packed:
            self.objects = PackedObjects()

    def outcome(self) -> asyncio.Event:
        """Set at the loop's next outcome (a request that succeeded or failed), or when it stops: what a
        read waits on instead of asking the API server itself (``kueue_ray.hub.reads``)."""
        if self._outcome is None:
            self._outcome = asyncio.Event()
        return self._outcome

    def _settle(self) -> None:
        if self._outcome is not None:
            self._outcome.set()
            self._outcome = None

    def resync_interval(self) -> float:
        return self.scope.resync_interval()

    def begin_list(self) -> None:
        self._listed = set()

    def apply_page(self, items: Iterable[dict]) -> None:
        """Cache what changed, and deliver it, except in the loop's first list: its subscribers see that
        whole at its end (``end_list``), and their reads wait for it (``partial``), so nothing that reads
        the namespace as a whole (who holds the quota, the queue's version) is told from part of it."""
        deliver = self.listed.is_set()
        for obj in items:
            key = self.resource.key_of(obj)
            if key is not None:
                self._listed.add(key)
                if self.hub.offer(self, key, obj, deliver=deliver) and not deliver:
                    self._undelivered.add(key)

    def partial(self, key: str) -> bool:
        """Whether ``key`` is cached only from the first list, still arriving: no answer to a read yet."""
        return key in self._undelivered

    def end_list(self) -> None:
        """Deliver the first list, and what disappeared since the last list: a cached object the list would
        have returned but did not was deleted while we were not watching."""
        listed, self._listed = self._listed, set()
        undelivered, self._undelivered = self._undelivered, set()
        for key in undelivered:
            if (obj := self.objects.get(key)) is not None:  # not found gone by a read meanwhile
                self.hub.deliver(self, key, obj)
        gone = [k for k in self.objects if k not in listed and self.resource.selects(self.objects[k])]
        for key in gone:
            self.hub.offer_deleted(self, key)

    def apply_event(self, kind: str, obj: dict) -> None:
        key = self.resource.key_of(obj)
        if key is None:
            return
        if kind == "DELETED":
            self.hub.offer_deleted(self, key, obj)
        else:
            self.hub.offer(self, key, obj)

    def failed(self, exc: BaseException) -> None:
        """Whatever failed, the loop is failing until a request succeeds: the reads waiting on it are told
        (they judge again, e.g. whether a refusal lasted the window), and new ones wait too."""
        self.failing = True
        try:
            self._judge(exc)
        finally:
            self._settle()

    def _judge(self, exc: BaseException) -> None:
        """A 401/403 starts or continues the refusal row (the first one is told to every subscriber); a
        404 to the list asks discovery, once, whether the API group is served at all."""
        if not isinstance(exc, Refused):
            return
        if exc.status == 404 and self._probe is None:
            self._probe = asyncio.ensure_future(self._ask_discovery())
            return
        target = self.target
        denial = Denial.of(exc.verb, target.qualified, target.namespace, exc)
        if denial is None:
            return
        if not self.window.refused(denial, time.monotonic()):
            if self.window.expired():  # every subscriber's wait ends (``Subscription.access``)
                self.hub.notify(
                    self.scope,
                    f"The API server still refuses to {denial.verb} {target.qualified} in namespace "
                    f"{self.namespace} after {self.window.timeout:g}s ({denial.message})",
                )
            return
        self.hub.notify(
            self.scope,
            f"The API server refuses to {denial.verb} {target.qualified} in namespace {self.namespace} "
            f"({denial.message}): this task keeps waiting, and fails if the refusal lasts "
            f"{self.window.timeout:g}s ([kueue_ray] refusal_timeout). Check: "
            f"{can_i(denial.verb, target.qualified, self.namespace, self.scope.client.identity())}",
        )

    def retry_delay(self, delay: float) -> float:
        """While refused, ask again no later than the refusal window's end: that answer decides."""
        return self.window.pace(delay, time.monotonic())

    def succeeded(self) -> None:
        self.failing = False
        self._settle()
        if self.window.since is not None:
            log.info("The API server answers %s %s again", self.target.qualified, self.target.where)
            self.window.cleared()

    async def _ask_discovery(self) -> None:
        """Whether this loop's API group/version is served (one GET of its discovery document); when it is
        not, every subscriber's wait ends with the reason (``Subscription.access``)."""
        from kubernetes_asyncio.client import CustomObjectsApi

        group, version = self.target.group, self.target.version
        try:
            async with self.client.lease() as api_client:
                await CustomObjectsApi(api_client).get_api_resources(group, version)
        except Exception as exc:  # noqa: BLE001 - only a 404 means "not served"; anything else: ask later
            if getattr(exc, "status", None) == 404:
                self.not_served = ApiNotServed(group, version, not_served_message(group, version))
                log.error(self.not_served.message)
                self.hub.notify(self.scope, self.not_served.message)
                self._settle()  # the reads waiting on this loop end with the reason
                return
        self._probe = None  # served (or unknown): a later 404 asks again

    async def stop(self) -> None:
        self._settle()
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        await super().stop()

    def polling_started(self) -> None:
        self.hub.notify(self.scope, self.polling_notice())

    def watching_again(self) -> None:
        self.hub.notify(
            self.scope,
            f"The API server lets connection {self.conn_id} watch {self.resource.plural} in namespace "
            f"{self.namespace} again: changes reach this task as they happen",
        )


@dataclass
class _PendingRead:
    """One shared visibility read of a LocalQueue: in flight, or done and fresh until ``fresh_until``."""

    task: asyncio.Task
    fresh_until: float = math.inf


@dataclass
class _Scope:
    """Everything the hub keeps for one (connection, namespace, deployment): subscribers indexed by what events are
    keyed on, the shared ApiClient, the two watch loops, and the shared visibility reads."""

    key: tuple[str, str, str]
    """(connection, namespace, Airflow deployment): ``Subscription.scope``."""
    client: SharedApiClient
    by_name: dict[str, list[Subscription]] = field(default_factory=dict)
    by_uid: dict[str, list[Subscription]] = field(default_factory=dict)
    services: dict[str, list[ServiceSubscription]] = field(default_factory=dict)
    """RayService subscriptions by name (a RayJob and a RayService may share a name)."""
    loops: dict[str, _WatchLoop] = field(default_factory=dict)
    pending_reads: dict[str, _PendingRead] = field(default_factory=dict)
    reads: dict[tuple[str, str], asyncio.Task] = field(default_factory=dict)
    """The reads in flight by (resource kind, name or uid), each shared by whoever asks meanwhile
    (``kueue_ray.hub.reads.shared_read``)."""
    workload_changes: int = 0
    """Workload changes cached so far (``Subscription.workloads_version``)."""
    rayjob_names: dict[str, str] = field(default_factory=dict)
    """The cached RayJobs' names by uid: a preemptor or a quota holder is named by its job's uid."""
    holdings: dict[str, Holding] = field(default_factory=dict)
    """What each cached Workload that is admitted and unfinished holds, by cache key, read once per
    version as the watch brings it (``kueue_ray.holdings.Holding``): the "why still queued" of every
    queued task of the namespace reads these instead of every Workload again."""
    service_workloads: set[str] = field(default_factory=set)
    """The cache keys of the Workloads a RayService or a RayCluster controls: what a RayService's wait
    reads (``ServiceSubscription.snapshot``) instead of decoding every Workload of the namespace."""
    explanations: dict[tuple, list[str]] = field(default_factory=dict)
    """The "why still queued" sentences by ``why_queued_log.sentences_key``, emptied when a holding changes or
    a RayJob is added or removed by uid (what they read besides the key): the queued tasks of one shape
    share one explanation per change of the holders (bench/README.md, run AC)."""

    def _indexes(self, subscription: Subscription) -> tuple[tuple[dict, str], ...]:
        by_name = self.services if isinstance(subscription, ServiceSubscription) else self.by_name
        return ((by_name, subscription.name), (self.by_uid, subscription.uid))

    def _cached_keys(self, subscription: Subscription) -> tuple[tuple[str, dict, str], ...]:
        """(loop kind, index, key) of what a RayJob wait reads on every step: its RayJob and its Workload."""
        if isinstance(subscription, ServiceSubscription):
            return ()
        return ((RAYJOB, self.by_name, subscription.name), (WORKLOAD, self.by_uid, subscription.uid))

    def add(self, subscription: Subscription) -> None:
        for index, key in self._indexes(subscription):
            index.setdefault(key, []).append(subscription)
        for kind, _, key in self._cached_keys(subscription):
            objects = self.loops[kind].objects if kind in self.loops else None
            if isinstance(objects, PackedObjects):
                objects.keep_decoded(key)

    def remove(self, subscription: Subscription) -> None:
        for index, key in self._indexes(subscription):
            index[key].remove(subscription)
            if not index[key]:
                del index[key]
        for kind, index, key in self._cached_keys(subscription):
            objects = self.loops[kind].objects if kind in self.loops else None
            if isinstance(objects, PackedObjects) and key not in index:
                objects.pack(key)

    def empty(self) -> bool:
        return not self.by_name and not self.services

    def needed_kinds(self) -> set[str]:
        """The watch loops the current subscribers need."""
        kinds = set()
        if self.by_name:
            kinds |= {RAYJOB, WORKLOAD}
        if self.services:
            kinds |= {RAYSERVICE, WORKLOAD}
        return kinds

    def subscribers_of(self, kind: str, key: str) -> list[Subscription]:
        index = {RAYJOB: self.by_name, RAYSERVICE: self.services}.get(kind, self.by_uid)
        return index.get(key, [])

    def workload_watchers(self, workload: dict | None) -> list[ServiceSubscription]:
        """The RayService subscribers a Workload change may concern beyond its job-uid key (their
        clusters' Workloads)."""
        if workload is None:
            return []
        return [s for group in self.services.values() for s in group if s.cares_about(workload)]

    def resync_interval(self) -> float:
        """The shortest safety-net interval any subscriber asked for."""
        groups = [*self.by_name.values(), *self.services.values()]
        intervals = [s.resync_interval for group in groups for s in group]
        return min(intervals, default=DEFAULT_RESYNC_SECONDS)
