"""One shared view of the cluster per api-server process: what every Kueue page and API call reads.

The Kueue pages are live: every open tab asks again whenever something changes. If each of those requests
read the cluster itself, twenty open tabs would cost twenty sets of API calls per refresh. Instead the
api-server process keeps one informer-like cache, the triggerer's watch hub (``kueue_ray.hub``) applied
to what the pages show:

* one list+watch per watched namespace of this project's RayJobs, RayServices and RayClusters (the
  hub's label selector: KubeRay copies a RayService's labels and annotations onto the RayClusters it
  creates, so they carry the deploy task's identity), of Kueue Workloads (those Kueue made for a job:
  the ``kueue.x-k8s.io/job-uid`` label, which covers a RayService's Workload and its RayClusters' as
  well as a RayJob's) and of LocalQueues, and one cluster-wide list+watch of ClusterQueues;
* Kueue's visibility API (pending workloads in queue order, with positions) read once per ClusterQueue
  and shared by every viewer: re-read only when a Workload or ClusterQueue changed since, at most once per
  ``visibility_min_interval``, and at least every ``visibility_max_age`` while someone looks;
* a live :class:`~kueue_ray.timeline.Timeline` per RayJob, fed by the same ``status.observe`` as the
  trigger, so a task that is still waiting already has its timeline;
* who preempted whom (``Snapshot.preempted_by``), read from those live timelines;
* a change counter (``version``): a page that already shows the current version is answered "no
  change" without building anything.

Cost therefore grows with the number of namespaces and with changes in the cluster, not with viewers.

When the API server cannot be reached the cache keeps the last state it had and says since when it is
stale (``Health``); the pages show that instead of going blank. Each loop is the hub's
``kueue_ray.kube.listwatch.ListWatchLoop``: it resumes from its resourceVersion, relists on 410 Gone and every
``resync_seconds``, backs off with jitter, waits for ``Retry-After``, loads refused credentials again, and
lists every ``degraded_list_interval`` while a Role grants ``list`` but not ``watch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kueue_ray.kube import api
from kueue_ray.kube.essential import resource_version_newer
from kueue_ray.kube.listwatch import ListWatchLoop
from kueue_ray.kube.shared_client import SharedApiClient, provider_connection
from kueue_ray.kube.watch_target import ListWatchSettings, RefusalMemory, Target
from kueue_ray.naming import JOB_UID_LABEL, MANAGED_BY_SELECTOR, AirflowIdentity
from kueue_ray.priority_change import changed_by
from kueue_ray.status import observe
from kueue_ray.timeline import Timeline, to_epoch
from kueue_ray.ui.snapshot import Health, PendingRead, Snapshot
from kueue_ray.ui.spans import preemptor_job_uid

log = logging.getLogger(__name__)

RAYJOBS, WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES = (
    api.RAYJOB.plural,
    api.WORKLOAD.plural,
    api.LOCAL_QUEUE.plural,
    api.CLUSTER_QUEUE.plural,
)
RAYSERVICES = api.RAYSERVICE.plural
RAYCLUSTERS = api.RAYCLUSTER.plural
IDENTIFIED = (RAYJOBS, RAYSERVICES, RAYCLUSTERS)
"""The kinds whose annotations name the task instance that owns them, and whose uid a Workload's
``kueue.x-k8s.io/job-uid`` label (and owner reference) carries: Kueue makes a Workload for a RayJob, for a
RayService (its shipped configuration) or for each RayCluster of a RayService (``ray.io/rayservice`` left
out of its frameworks)."""
CLUSTER_QUEUE_PENDING_PATH = "/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{name}/pendingworkloads"
VISIBILITY_LIMIT = 100000
"""Kueue's cap for ``limit``: the whole queue, so positions and counts stay exact."""


def watched_resources(conn_id: str, namespaces: list[str]) -> list[Target]:
    """The loops one cache runs: per namespace RayJobs, RayServices, RayClusters, Workloads and
    LocalQueues; ClusterQueues once.

    RayServices are watched, not read when a deploy task's tab asks: what that tab shows changes with the
    RayService alone (its clusters' states, the Serve applications, the traffic switch) while its
    Workload stays as it is, and the pages' "unchanged" answer (``version``) is only right if every change
    they show bumps it. Reading on demand would either cost a read per open tab per poll or, cached with
    an age, answer "unchanged" over a switch that happened. The watch costs one connection per namespace
    and carries only this project's RayServices (the label selector), a few objects that change rarely.

    RayClusters are watched for who owns a RayService's cluster Workloads: each carries the annotations of
    the deploy try that created it, so during an upgrade the serving cluster stays attributed to the run
    that deployed it and the new one to the run upgrading it (the RayService's own annotations name only
    the latter). Same label selector: a RayJob's cluster carries it too, a few objects per running job.
    """
    loops = [Target(conn_id, api.KUEUE_GROUP, api.KUEUE_VERSION, CLUSTER_QUEUES, None)]
    for namespace in namespaces:
        loops += [
            Target(conn_id, api.RAY_GROUP, api.RAY_VERSION, RAYJOBS, namespace, MANAGED_BY_SELECTOR),
            Target(conn_id, api.RAY_GROUP, api.RAY_VERSION, RAYSERVICES, namespace, MANAGED_BY_SELECTOR),
            Target(conn_id, api.RAY_GROUP, api.RAY_VERSION, RAYCLUSTERS, namespace, MANAGED_BY_SELECTOR),
            Target(conn_id, api.KUEUE_GROUP, api.KUEUE_VERSION, WORKLOADS, namespace, JOB_UID_LABEL),
            Target(conn_id, api.KUEUE_GROUP, api.KUEUE_VERSION, LOCAL_QUEUES, namespace),
        ]
    return loops


@dataclass
class CacheSettings(ListWatchSettings):
    """Tunables; tests shorten them, production keeps the defaults (the loops' own in ``ListWatchSettings``)."""

    resync_seconds: float = 300.0
    """Safety-net relist of every loop."""
    watch_timeout_seconds: int = 300
    visibility_min_interval: float = 2.0
    visibility_max_age: float = 30.0
    max_timelines: int = 5000
    """Timelines of RayJobs (and identities of RayJobs, RayServices and RayClusters) kept after they are
    gone, oldest dropped first."""


def describe_error(exc: BaseException) -> str:
    """One line for the page: the API's status and message, or the connection error."""
    status = getattr(exc, "status", None)
    if status is not None:
        message = getattr(exc, "reason", "") or ""
        with contextlib.suppress(ValueError, AttributeError):
            message = json.loads(getattr(exc, "body", "") or "{}").get("message") or message
        return f"HTTP {status}: {message}"[:300]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300]


class _Loop(ListWatchLoop):
    """One list+watch of the cache, its objects by name, and whether it is in step with the API server."""

    def __init__(self, cache: ClusterCache, target: Target) -> None:
        super().__init__(target, cache.client, cache.settings, cache.watch_refusals)
        self.cache = cache
        self._listed: dict[str, dict] = {}
        """The pages of the list in progress, by name."""
        self.failing_since: float | None = None
        self.error: str | None = None
        self.synced_at: float | None = None

    def resync_interval(self) -> float:
        return self.cache.settings.resync_seconds

    def begin_list(self) -> None:
        self._listed = {}

    def apply_page(self, items: Iterable[dict]) -> None:
        self._listed.update((obj["metadata"]["name"], obj) for obj in items)

    def end_list(self) -> None:
        listed, self._listed = self._listed, {}
        for name in [name for name in self.objects if name not in listed]:
            self.cache._apply(self, "DELETED", self.objects[name])
        for obj in listed.values():
            self.cache._apply(self, "MODIFIED", obj)
        if not self.listed.is_set():
            self.listed.set()
            self.cache._listed(self)

    def apply_event(self, kind: str, obj: dict) -> None:
        self.cache._apply(self, kind, obj)

    def succeeded(self) -> None:
        self.synced_at = time.time()
        if self.failing_since is not None:
            self.failing_since = self.error = None
            self.cache._bump()

    def failed(self, exc: BaseException) -> None:
        self.error = describe_error(exc)
        if self.failing_since is None:
            self.failing_since = time.time()
            log.warning("Kueue UI: watch of %s failed: %s", self.target.plural, self.error)
            self.cache._bump()


@dataclass
class _Visibility:
    read: PendingRead = field(default_factory=lambda: PendingRead(None, None))
    monotonic_at: float = -math.inf
    version_at: int = -1
    in_flight: asyncio.Task | None = None
    failing_since: float | None = None
    """Since when reads fail. An open watch can outlive an API server that answers nothing else (or a
    network that silently dropped it); the visibility read, repeated at least every
    ``visibility_max_age`` while anyone looks, notices."""


class ClusterCache:
    """The api-server process's view of the cluster (see the module docstring)."""

    def __init__(
        self,
        conn_id: str,
        namespaces: list[str],
        settings: CacheSettings | None = None,
        connection_factory: Callable[
            [str], contextlib.AbstractAsyncContextManager[Any]
        ] = provider_connection,
    ) -> None:
        self.conn_id = conn_id
        self.namespaces = list(namespaces)
        self.settings = settings or CacheSettings()
        self.client = SharedApiClient(connection_factory, conn_id)
        self.watch_refusals: RefusalMemory = {}
        self.loops = [_Loop(self, target) for target in watched_resources(conn_id, self.namespaces)]
        self.version = 0
        self._queue_versions: Counter[str] = Counter()
        """Per ClusterQueue, bumped by changes of it and of its Workloads: what can change its pending list."""
        self._visibility: dict[str, _Visibility] = {}
        self._identities: OrderedDict[str, AirflowIdentity] = OrderedDict()
        self._timelines: OrderedDict[str, Timeline] = OrderedDict()
        self._by_uid: dict[tuple[str, str | None, str], str] = {}
        """(kind, namespace, RayJob uid) -> name: the RayJob with that uid, and the Workload Kueue made for
        it (its ``job-uid`` label)."""
        self._victims: tuple[int, dict[str, list[dict]]] = (-1, {})
        self._started = False

    # ----- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if not self._started:
            self._started = True
            for loop in self.loops:
                loop.start()

    async def stop(self) -> None:
        for loop in self.loops:
            await loop.stop()
        for entry in self._visibility.values():
            if entry.in_flight is not None:
                entry.in_flight.cancel()
        await self.client.retire()
        self._started = False

    # ----- reading ---------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        def objects(kind: str) -> list[dict]:
            return [obj for loop in self.loops if loop.target.plural == kind for obj in loop.objects.values()]

        return Snapshot(
            cluster_queues=objects(CLUSTER_QUEUES),
            local_queues=objects(LOCAL_QUEUES),
            workloads=objects(WORKLOADS),
            rayjobs=objects(RAYJOBS),
            rayservices=objects(RAYSERVICES),
            rayclusters=objects(RAYCLUSTERS),
            preempted_by=self._preempted_by(),
            identities=dict(self._identities),
            namespaces=list(self.namespaces),
            health=self.health(),
            version=self.version,
        )

    def _preempted_by(self) -> dict[str, list[dict]]:
        """``Snapshot.preempted_by``, from every timeline this process keeps (built once per version)."""
        if self._victims[0] != self.version:
            victims: dict[str, list[dict]] = {}
            for uid, timeline in self._timelines.items():
                for preemption in timeline.preemptions:
                    preemptor = preemptor_job_uid(preemption.get("message"))
                    if preemptor:
                        victims.setdefault(preemptor, []).append({"job_uid": uid, **preemption})
            for found in victims.values():
                found.sort(key=lambda p: p.get("at") or 0)
            self._victims = (self.version, victims)
        return self._victims[1]

    def health(self) -> Health:
        # (failing since, error, last success) of every loop and visibility read that currently fails
        failing = [
            (lp.failing_since, lp.error, lp.synced_at) for lp in self.loops if lp.failing_since is not None
        ]
        failing += [
            (entry.failing_since, entry.read.error, entry.read.fetched_at)
            for entry in self._visibility.values()
            if entry.failing_since is not None
        ]
        if not failing:
            listed = all(loop.listed.is_set() for loop in self.loops)
            return Health(listed, time.time() if listed else None, None, None if listed else "connecting")
        successes = [ok for _, _, ok in failing]
        first = min(failing, key=lambda f: f[0])
        return Health(
            reachable=False,
            synced_at=None if None in successes else min(successes),
            failing_since=first[0],
            error=first[1],
        )

    def timeline(self, uid: str) -> Timeline | None:
        """The live timeline of the RayJob with this uid, as observed by this process."""
        return self._timelines.get(uid)

    async def pending(self, cluster_queue: str) -> PendingRead:
        """Kueue's pending workloads of ``cluster_queue`` in queue order, shared by every caller."""
        entry = self._visibility.setdefault(cluster_queue, _Visibility())
        age = time.monotonic() - entry.monotonic_at
        settings = self.settings
        stale = age >= settings.visibility_max_age or (
            entry.version_at != self._queue_versions[cluster_queue]
            and age >= settings.visibility_min_interval
        )
        if stale and entry.in_flight is None:
            entry.in_flight = asyncio.ensure_future(self._read_pending(cluster_queue, entry))
        if entry.in_flight is not None and (entry.read.fetched_at is None or stale):
            await asyncio.shield(entry.in_flight)
        return entry.read

    def pending_behind(self, cluster_queue: str) -> bool:
        """Whether ``cluster_queue`` changed since its pending list was last read: ``visibility_min_interval``
        held the read back. An answer built on that list must not carry the current ``version``, or a page
        showing it would be told "unchanged" until the next change (the positions it shows stale till then)."""
        entry = self._visibility.get(cluster_queue)
        return entry is not None and entry.version_at != self._queue_versions[cluster_queue]

    async def _read_pending(self, cluster_queue: str, entry: _Visibility) -> None:
        version = self._queue_versions[cluster_queue]
        try:
            async with self.client.lease() as api_client:
                summary = await api_client.call_api(
                    CLUSTER_QUEUE_PENDING_PATH.format(name=cluster_queue),
                    "GET",
                    query_params=[("limit", VISIBILITY_LIMIT)],
                    response_types_map={200: "object"},
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _request_timeout=30,
                )
            entry.read = PendingRead(summary or {}, time.time())
            if entry.failing_since is not None:
                entry.failing_since = None
                self._bump()
        except Exception as exc:  # noqa: BLE001 - keep the last good answer, say why it is old
            entry.read = PendingRead(entry.read.summary, entry.read.fetched_at, describe_error(exc))
            if entry.failing_since is None:
                entry.failing_since = time.time()
                self._bump()
        finally:
            entry.monotonic_at = time.monotonic()
            entry.version_at = version
            entry.in_flight = None

    # ----- what the loops report -------------------------------------------------------------------

    def _apply(self, loop: _Loop, kind: str, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if name is None:
            return
        target = loop.target
        previous = loop.objects.get(name)
        if kind == "DELETED":
            obj = loop.objects.pop(name, None)
            if obj is None:
                return
            self._index(target, obj, None)
        elif resource_version_newer(obj, previous):
            loop.objects[name] = obj
            self._index(target, obj, name)
        else:
            return
        if target.plural == CLUSTER_QUEUES:
            self._queue_versions[name] += 1
        elif target.plural == WORKLOADS:
            for cluster_queue in {self._cluster_queue_of(target.namespace, w) for w in (previous, obj) if w}:
                if cluster_queue is None:
                    for known in list(self._queue_versions):
                        self._queue_versions[known] += 1
                else:
                    self._queue_versions[cluster_queue] += 1
        if target.plural in IDENTIFIED:
            self._remember(obj)
        uid = self._rayjob_uid(target.plural, obj)
        if uid is not None:
            self._observe(target.namespace, uid)
        self._bump()

    def _cluster_queue_of(self, namespace: str | None, workload: dict) -> str | None:
        """The ClusterQueue a Workload is admitted to or queues for (None when its LocalQueue is unknown)."""
        admitted_to = ((workload.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if admitted_to:
            return admitted_to
        local_queue = self._loop(LOCAL_QUEUES, namespace).objects.get(
            (workload.get("spec") or {}).get("queueName")
        )
        return ((local_queue or {}).get("spec") or {}).get("clusterQueue")

    def _index(self, target: Target, obj: dict, name: str | None) -> None:
        uid = self._rayjob_uid(target.plural, obj)
        if uid is None:
            return
        key = (target.plural, target.namespace, uid)
        if name is not None:
            self._by_uid[key] = name
        elif self._by_uid.get(key) == obj["metadata"]["name"]:
            del self._by_uid[key]

    @staticmethod
    def _rayjob_uid(kind: str, obj: dict) -> str | None:
        """The uid of the RayJob a RayJob or Workload stands for."""
        metadata = obj.get("metadata") or {}
        if kind == RAYJOBS:
            return metadata.get("uid")
        if kind == WORKLOADS:
            return (metadata.get("labels") or {}).get(JOB_UID_LABEL)
        return None

    def _owned(self, kind: str, namespace: str | None, uid: str) -> dict | None:
        name = self._by_uid.get((kind, namespace, uid))
        return self._loop(kind, namespace).objects.get(name) if name is not None else None

    def _listed(self, loop: _Loop) -> None:
        """Once both RayJobs and Workloads of a namespace are listed, start every RayJob's timeline (from
        its objects' own timestamps): before that a Workload may look missing that merely is not listed."""
        if loop.target.plural not in (RAYJOBS, WORKLOADS):
            return
        namespace = loop.target.namespace
        if self._namespace_listed(namespace):
            for rayjob in list(self._loop(RAYJOBS, namespace).objects.values()):
                self._observe(namespace, rayjob["metadata"]["uid"])

    def _bump(self) -> None:
        self.version += 1

    def _loop(self, kind: str, namespace: str | None) -> _Loop:
        return next(lp for lp in self.loops if lp.target.plural == kind and lp.target.namespace == namespace)

    def _namespace_listed(self, namespace: str | None) -> bool:
        return (
            self._loop(RAYJOBS, namespace).listed.is_set()
            and self._loop(WORKLOADS, namespace).listed.is_set()
        )

    def _remember(self, obj: dict) -> None:
        metadata = obj.get("metadata") or {}
        identity = AirflowIdentity.from_annotations(metadata.get("annotations"))
        uid = metadata.get("uid")
        if identity is not None and uid:
            self._identities[uid] = identity
            self._identities.move_to_end(uid)
            while len(self._identities) > self.settings.max_timelines:
                self._identities.popitem(last=False)

    def _observe(self, namespace: str | None, uid: str) -> None:
        """Feed the RayJob with this uid, and its Workload, into the RayJob's live timeline."""
        if not self._namespace_listed(namespace):
            return
        rayjob = self._owned(RAYJOBS, namespace, uid)
        if rayjob is None:
            return  # deleted (its timeline keeps what was seen), or a Workload of something else
        timeline = self._timelines.get(uid)
        if timeline is None:
            created = rayjob["metadata"].get("creationTimestamp")
            timeline = self._timelines[uid] = Timeline(submitted_at=to_epoch(created) if created else None)
            while len(self._timelines) > self.settings.max_timelines:
                self._timelines.popitem(last=False)
        workload = self._owned(WORKLOADS, namespace, uid)
        timeline.record(observe(rayjob, workload), time.time())
        timeline.record_priority(workload, changed_by(rayjob), time.time())
