"""Kueue's controllers in kubesim: job integration, Workload lifecycle, scheduling loop, queue status.

Like the real Kueue manager, this is a client of the API server (here: the store). It reacts to watch
events (debounced) and a periodic tick, and each pass is level-triggered: it reads the objects it decides
over, then

1. reconciles each managed Ray job whose object or Workload changed with that Workload (create it, finish
   it, start or stop the job, and release an evicted Workload's quota once KubeRay finished suspending
   the job),
2. evicts what must go among the Workloads that changed (deactivated Workloads, ClusterQueue/LocalQueue
   ``HoldAndDrain``); a configuration change makes steps 1 and 2 go over everything,
3. runs admission cycles of the pure scheduler (`kubesim.kueue.scheduler`) over a snapshot built from the
   objects, applying its decisions (admit, preempt, no fit) as Workload conditions and events,
4. writes ClusterQueue and LocalQueue status (only when it changed).

Every write re-reads the object first and mutates the fresh copy, so a pass never clobbers a concurrent
change by KubeRay or a user (the store is synchronous, so read+write is atomic on the event loop).

What a pass reads comes from a `ClusterView`, the equivalent of Kueue's informer caches: kept current by
store subscriptions, so reading it copies nothing, and a pass costs O(changed + queued) rather than a
fresh read of every object per admission cycle: the view indexes the Workloads (queued ones, quota holders,
per-queue usage sums) as they change, so no phase scans every stored Workload.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from kubesim import quantity
from kubesim.clock import parse_time
from kubesim.errors import ApiError
from kubesim.events import record_event
from kubesim.jsoncopy import fast_copy
from kubesim.kueue import admission_checks, jobs, model, pods_ready, scheduler
from kubesim.kueue.config import KueueConfig
from kubesim.kueue.jobs import JOB_KINDS, WORKLOAD_KEY, JobKind
from kubesim.watch import Delivery

CQ_KEY = "clusterqueues.kueue.x-k8s.io"
LQ_KEY = "localqueues.kueue.x-k8s.io"
RF_KEY = "resourceflavors.kueue.x-k8s.io"
WPC_KEY = "workloadpriorityclasses.kueue.x-k8s.io"
COHORT_KEY = "cohorts.kueue.x-k8s.io"
NAMESPACE_KEY = "namespaces"
AC_KEY = admission_checks.ADMISSION_CHECK_KEY
CONFIG_KEYS = (CQ_KEY, LQ_KEY, RF_KEY, WPC_KEY, COHORT_KEY, NAMESPACE_KEY, AC_KEY)
WATCHED_KEYS = (*JOB_KINDS, WORKLOAD_KEY, *CONFIG_KEYS)

ADMISSION_COMPONENT = "kueue-admission"
JOB_COMPONENT = "kueue-job-controller"

# Real seconds: how long to let a burst of watch events settle, and the resync period.
DEBOUNCE_SECONDS = 0.01
FULL_PASS_SECONDS = 10.0
TICK_SECONDS = 1.0
# Admission cycles per pass; each admits or parks at least one workload, so this only bounds a pass.
MAX_CYCLES_PER_PASS = 50

MSG_ADMITTED = "The workload is admitted"
MSG_NO_RESERVATION = "The workload has no reservation"
MSG_ON_HOLD = "Job is on hold"
MSG_PODS_READY = "All pods reached readiness and the workload is running"
MSG_PODS_NOT_READY = "Not all pods are ready or succeeded"
MSG_PODS_RECOVERY = "At least one pod has failed, waiting for recovery"
MSG_DEACTIVATED = "The workload is deactivated"
MSG_CQ_STOPPED = "The ClusterQueue is stopped"
MSG_LQ_STOPPED = "The LocalQueue is stopped"


# ----------------------------------------------------------------------------------------------- conditions


def find_condition(obj: dict, type_: str) -> dict | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def condition_true(obj: dict, type_: str) -> bool:
    cond = find_condition(obj, type_)
    return bool(cond) and cond.get("status") == "True"


def set_condition(obj: dict, type_: str, status: str, reason: str, message: str, now: str) -> None:
    """``meta.SetStatusCondition``: lastTransitionTime moves only when the status flips."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    new = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        "observedGeneration": obj.get("metadata", {}).get("generation", 1),
    }
    for index, cond in enumerate(conditions):
        if cond.get("type") == type_:
            if cond.get("status") == status:
                new["lastTransitionTime"] = cond.get("lastTransitionTime", now)
            conditions[index] = new
            return
    conditions.append(new)


# ----------------------------------------------------------------------------------------------- workload state


def admission_of(wl: dict) -> dict | None:
    return (wl.get("status") or {}).get("admission")


def is_finished(wl: dict) -> bool:
    return condition_true(wl, "Finished")


def is_evicting(wl: dict) -> bool:
    return admission_of(wl) is not None and condition_true(wl, "Evicted")


def is_on_hold(wl: dict) -> bool:
    cond = find_condition(wl, "QuotaReserved")
    return bool(cond) and cond.get("status") == "False" and cond.get("reason") == "OnHold"


def is_queued(wl: dict) -> bool:
    """Waiting in a queue: no quota, active, not finished, not on hold, not being deleted."""
    return (
        admission_of(wl) is None
        and (wl.get("spec") or {}).get("active", True)
        and not is_finished(wl)
        and not is_on_hold(wl)
        and not wl["metadata"].get("deletionTimestamp")
    )


def holds_quota(wl: dict) -> bool:
    return admission_of(wl) is not None and not is_finished(wl)


def owner_uid(wl: dict) -> str | None:
    for ref in wl["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def is_workload_priority_class(ref: dict) -> bool:
    """Whether a Workload's ``spec.priorityClassRef`` names a WorkloadPriorityClass (not a pod PriorityClass)."""
    return ref.get("group") == jobs.KUEUE_GROUP and ref.get("kind") == "WorkloadPriorityClass"


def workload_priority_class_ref(name: str) -> dict:
    return {"group": jobs.KUEUE_GROUP, "kind": "WorkloadPriorityClass", "name": name}


def timestamp_seconds(value: str | None) -> float:
    return parse_time(value).timestamp() if value else 0.0


# ----------------------------------------------------------------------------------------------- world


@dataclass
class World:
    """One read of every object the controller decides over (by name; LocalQueues by (ns, name))."""

    flavors: dict[str, dict] = field(default_factory=dict)
    cluster_queues: dict[str, dict] = field(default_factory=dict)
    cohorts: dict[str, dict] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], dict] = field(default_factory=dict)
    priority_classes: dict[str, dict] = field(default_factory=dict)
    admission_checks: dict[str, dict] = field(default_factory=dict)
    namespace_labels: dict[str, dict] = field(default_factory=dict)
    workloads: list[dict] = field(default_factory=list)

    @classmethod
    def read(cls, store) -> World:
        """The current objects: from the running controller's view when there is one (as Kueue's
        visibility server answers from its in-memory queues), else a fresh read of the store."""
        view = _VIEWS.get(store)
        if view is not None:
            return view.world()
        return cls.build(lambda key: store.list(key)[0])

    @classmethod
    def build(cls, items: Callable[[str], list[dict]]) -> World:
        """A World from ``items(key)``, which lists a kind's objects in the store's list order."""

        def by_name(key: str) -> dict[str, dict]:
            return {o["metadata"]["name"]: o for o in items(key)}

        return cls(
            flavors=by_name(RF_KEY),
            cluster_queues=by_name(CQ_KEY),
            cohorts=by_name(COHORT_KEY),
            local_queues={(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in items(LQ_KEY)},
            priority_classes=by_name(WPC_KEY),
            admission_checks=by_name(AC_KEY),
            namespace_labels={
                n: o["metadata"].get("labels") or {} for n, o in by_name(NAMESPACE_KEY).items()
            },
            workloads=items(WORKLOAD_KEY),
        )

    def local_queue_of(self, wl: dict) -> dict | None:
        return self.local_queues.get(
            (wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", ""))
        )


@dataclass
class Tally:
    """Quota held in one queue: how many workloads reserve it, how many are admitted, and their usage by
    (flavor, resource), reserved and admitted. Kept as running sums, so a queue's status costs O(flavors)."""

    reserving: int = 0
    admitted: int = 0
    reserved: dict[tuple[str, str], int] = field(default_factory=dict)
    used: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, usage: dict[tuple[str, str], int], admitted: bool, sign: int) -> None:
        self.reserving += sign
        for key, value in usage.items():
            self.reserved[key] = self.reserved.get(key, 0) + sign * value
        if admitted:
            self.admitted += sign
            for key, value in usage.items():
                self.used[key] = self.used.get(key, 0) + sign * value


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
    """

    def __init__(self, store, keys: tuple[str, ...], on_event: Callable[[str, str, dict], None]) -> None:
        self._objects: dict[str, dict[tuple[str, str], dict]] = {key: {} for key in keys}
        self._on_event = on_event
        self._world: World | None = None
        self._config: World | None = None
        self.index = WorkloadIndex()
        self._subscriptions = [store.subscribe(key, functools.partial(self._deliver, key)) for key in keys]

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
        for subscription in self._subscriptions:
            subscription.close()


_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""store -> the ClusterView of the Kueue controller running on it (for ``World.read``)."""


def stop_policy(obj: dict) -> str:
    return (obj.get("spec") or {}).get("stopPolicy") or "None"


def missing_flavors(cq: dict, flavors: dict[str, dict]) -> list[str]:
    """The ResourceFlavors the ClusterQueue names that do not exist, in resource-group order."""
    names = [
        f["name"]
        for group in (cq.get("spec") or {}).get("resourceGroups") or []
        for f in group.get("flavors") or []
    ]
    return [name for name in dict.fromkeys(names) if name not in flavors]


def cluster_queue_active(
    cq: dict, flavors: dict[str, dict], checks: dict[str, dict] | None = None
) -> tuple[bool, str, str]:
    """(active, reason, message) of the ClusterQueue ``Active`` condition.

    Kueue lists every cause that keeps the queue from admitting, in a fixed order, and takes the
    first one's reason: "Can't admit new workloads: is stopped, references missing
    ResourceFlavor(s): spot,a100." with reason ``Stopped`` (names joined by a bare comma), then
    "references missing AdmissionCheck(s): ..." (``AdmissionCheckNotFound``) and "references inactive
    AdmissionCheck(s): ..." (``AdmissionCheckInactive``). ``checks`` (AdmissionChecks by name) None leaves
    the admission checks out (the scheduler's model: queue_blocker keeps a queue with a missing or
    inactive check from admitting anything before).
    """
    causes: list[tuple[str, str]] = []
    if stop_policy(cq) != "None":
        causes.append(("Stopped", "is stopped"))
    missing = missing_flavors(cq, flavors)
    if missing:
        causes.append(("FlavorNotFound", f"references missing ResourceFlavor(s): {','.join(missing)}"))
    if checks is not None:
        causes.extend(admission_checks.inactive_causes(cq, checks))
    if not causes:
        return True, "Ready", "Can admit new workloads"
    message = f"Can't admit new workloads: {', '.join(text for _, text in causes)}."
    return False, causes[0][0], message


def queue_blocker(wl: dict, world: World) -> tuple[str | None, str | None]:
    """(ClusterQueue name, Inadmissible message) for a queued workload; message None means schedulable."""
    queue = (wl.get("spec") or {}).get("queueName", "")
    lq = world.local_queue_of(wl)
    if lq is None:
        return None, f"LocalQueue {queue} doesn't exist"
    cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
    if stop_policy(lq) != "None":
        return cq_name, f"LocalQueue {queue} is inactive"
    cq = world.cluster_queues.get(cq_name)
    if cq is None:
        return cq_name, f"ClusterQueue {cq_name} doesn't exist"
    if not cluster_queue_active(cq, world.flavors, world.admission_checks)[0]:
        return cq_name, f"ClusterQueue {cq_name} is inactive"
    return cq_name, None


# ----------------------------------------------------------------------------------------------- model building


def _tolerations(items: list[dict] | None) -> tuple[model.Toleration, ...]:
    return tuple(
        model.Toleration(
            key=t.get("key", ""),
            operator=t.get("operator", "Equal"),
            value=t.get("value", ""),
            effect=t.get("effect", ""),
        )
        for t in items or []
    )


def model_flavor(obj: dict) -> model.ResourceFlavor:
    spec = obj.get("spec") or {}
    taints = tuple(
        model.Taint(key=t.get("key", ""), value=t.get("value", ""), effect=t.get("effect", "NoSchedule"))
        for t in spec.get("nodeTaints") or []
    )
    return model.ResourceFlavor(
        name=obj["metadata"]["name"],
        node_labels=dict(spec.get("nodeLabels") or {}),
        node_taints=taints,
        tolerations=_tolerations(spec.get("tolerations")),
    )


def _optional_quantity(resource: str, value) -> int | None:
    return None if value is None else quantity.to_canonical(resource, value)


def model_resource_groups(groups: list[dict] | None) -> tuple[model.ResourceGroup, ...]:
    result = []
    for group in groups or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            resources = {
                r["name"]: model.ResourceQuota(
                    nominal=quantity.to_canonical(r["name"], r.get("nominalQuota", 0)),
                    borrowing_limit=_optional_quantity(r["name"], r.get("borrowingLimit")),
                    lending_limit=_optional_quantity(r["name"], r.get("lendingLimit")),
                )
                for r in flavor.get("resources") or []
            }
            flavors.append(model.FlavorQuotas(name=flavor["name"], resources=resources))
        result.append(
            model.ResourceGroup(
                covered_resources=tuple(group.get("coveredResources") or ()), flavors=tuple(flavors)
            )
        )
    return tuple(result)


def model_cluster_queue(obj: dict, flavors: dict[str, dict]) -> model.ClusterQueue:
    spec = obj.get("spec") or {}
    preemption = spec.get("preemption") or {}
    borrow = preemption.get("borrowWithinCohort") or {}
    fungibility = spec.get("flavorFungibility") or {}
    return model.ClusterQueue(
        name=obj["metadata"]["name"],
        resource_groups=model_resource_groups(spec.get("resourceGroups")),
        cohort=spec.get("cohortName") or None,
        queueing_strategy=spec.get("queueingStrategy") or model.BEST_EFFORT_FIFO,
        preemption=model.PreemptionPolicy(
            within_cluster_queue=preemption.get("withinClusterQueue") or model.NEVER,
            reclaim_within_cohort=preemption.get("reclaimWithinCohort") or model.NEVER,
            borrow_within_cohort_policy=borrow.get("policy") or model.NEVER,
            borrow_max_priority_threshold=borrow.get("maxPriorityThreshold"),
        ),
        flavor_fungibility=model.FlavorFungibility(
            when_can_borrow=fungibility.get("whenCanBorrow") or model.MAY_STOP_SEARCH,
            when_can_preempt=fungibility.get("whenCanPreempt") or model.TRY_NEXT_FLAVOR,
            preference=fungibility.get("preference") or model.BORROWING_OVER_PREEMPTION,
        ),
        stop_policy=stop_policy(obj),
        namespace_selector=spec.get("namespaceSelector"),
        active=cluster_queue_active(obj, flavors)[0],
    )


def model_cohort(obj: dict) -> model.Cohort:
    spec = obj.get("spec") or {}
    return model.Cohort(
        name=obj["metadata"]["name"],
        parent=spec.get("parentName") or None,
        resource_groups=model_resource_groups(spec.get("resourceGroups")),
    )


def model_pod_sets(wl: dict) -> tuple[model.PodSet, ...]:
    result = []
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        pod_spec = (ps.get("template") or {}).get("spec") or {}
        result.append(
            model.PodSet(
                name=ps["name"],
                count=int(ps.get("count", 1)),
                requests=jobs.pod_requests(pod_spec),
                node_selector=dict(pod_spec.get("nodeSelector") or {}),
                tolerations=_tolerations(pod_spec.get("tolerations")),
            )
        )
    return tuple(result)


def model_admission(wl: dict, reserved_at: float | None = None) -> model.Admission | None:
    admission = admission_of(wl)
    if admission is None:
        return None
    reserved = find_condition(wl, "QuotaReserved") or {}
    return model.Admission(
        cluster_queue=admission.get("clusterQueue", ""),
        pod_set_assignments=tuple(
            model.PodSetAssignment(
                name=a["name"],
                flavors=dict(a.get("flavors") or {}),
                resource_usage={
                    r: quantity.to_canonical(r, v) for r, v in (a.get("resourceUsage") or {}).items()
                },
                count=int(a.get("count", 1)),
            )
            for a in admission.get("podSetAssignments") or []
        ),
        reserved_at=reserved_at or timestamp_seconds(reserved.get("lastTransitionTime")),
    )


def model_workload(
    wl: dict, cluster_queue: str, *, seq: int, inadmissible: bool = False, reserved_at: float | None = None
) -> model.Workload:
    meta = wl["metadata"]
    spec = wl.get("spec") or {}
    return model.Workload(
        key=f"{meta['namespace']}/{meta['name']}",
        uid=meta["uid"],
        cluster_queue=cluster_queue,
        pod_sets=model_pod_sets(wl),
        priority=int(spec.get("priority") or 0),
        queue_timestamp=timestamp_seconds(pods_ready.queue_order_timestamp(wl)),
        creation_seq=seq,
        job_uid=(meta.get("labels") or {}).get(jobs.JOB_UID_LABEL),
        namespace=meta["namespace"],
        local_queue=spec.get("queueName", ""),
        admission=model_admission(wl, reserved_at),
        evicted=is_evicting(wl),
        inadmissible=inadmissible,
    )


def admission_dict(admission: model.Admission) -> dict:
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [
            {
                "name": a.name,
                "flavors": dict(a.flavors),
                "resourceUsage": {r: quantity.to_string(r, v) for r, v in a.resource_usage.items()},
                "count": a.count,
            }
            for a in admission.pod_set_assignments
        ],
    }


def resource_requests(wl: dict) -> list[dict]:
    """``status.resourceRequests`` of a pending workload: per pod set totals."""
    return [
        {"name": ps.name, "resources": {r: quantity.to_string(r, v) for r, v in ps.total().items()}}
        for ps in model_pod_sets(wl)
    ]


# ----------------------------------------------------------------------------------------------- queue status


def _flavor_usage(cq: dict | None, used: dict[tuple[str, str], int], with_borrowed: bool) -> list[dict]:
    result = []
    for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = []
            for r in flavor.get("resources") or []:
                name = r["name"]
                total = used.get((flavor["name"], name), 0)
                entry = {"name": name, "total": quantity.to_string(name, total)}
                if with_borrowed:
                    nominal = quantity.to_canonical(name, r.get("nominalQuota", 0))
                    entry["borrowed"] = quantity.to_string(name, max(0, total - nominal))
                resources.append(entry)
            result.append({"name": flavor["name"], "resources": resources})
    return result


def cluster_queue_status(cq: dict, tally: Tally | None, pending: int) -> dict:
    """The status Kueue reports for ``cq``: counts, reservation and usage per flavor, ``Active``."""
    tally = tally or Tally()
    status = copy.deepcopy(cq.get("status") or {})
    status.update(
        pendingWorkloads=pending,
        reservingWorkloads=tally.reserving,
        admittedWorkloads=tally.admitted,
        flavorsReservation=_flavor_usage(cq, tally.reserved, True),
        flavorsUsage=_flavor_usage(cq, tally.used, True),
    )
    return status


def local_queue_status(lq: dict, cq: dict | None, tally: Tally | None, pending: int) -> dict:
    """A LocalQueue's status: what its workloads reserve, laid out by its ClusterQueue's flavors."""
    tally = tally or Tally()
    status = copy.deepcopy(lq.get("status") or {})
    status.update(
        pendingWorkloads=pending,
        reservingWorkloads=tally.reserving,
        admittedWorkloads=tally.admitted,
        flavorsReservation=_flavor_usage(cq, tally.reserved, False),
        flavorsUsage=_flavor_usage(cq, tally.used, False),
    )
    return status


def local_queue_active(lq: dict, world: World) -> tuple[str, str, str]:
    if stop_policy(lq) != "None":
        return "False", "Stopped", "LocalQueue is stopped"
    cq = world.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue", ""))
    if cq is None or not cluster_queue_active(cq, world.flavors, world.admission_checks)[0]:
        return "False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue"
    return "True", "Ready", "Can submit new workloads to localQueue"


def queued_by_cluster_queue(world: World) -> dict[str, list[dict]]:
    """Queued workloads per ClusterQueue (including ones parked or blocked by an inactive queue)."""
    result: dict[str, list[dict]] = {}
    for wl in world.workloads:
        if not is_queued(wl):
            continue
        cq_name, _ = queue_blocker(wl, world)
        if cq_name is not None and cq_name in world.cluster_queues:
            result.setdefault(cq_name, []).append(wl)
    return result


# ----------------------------------------------------------------------------------------------- controller


class KueueController:
    """Holds what Kueue keeps in memory between passes: the parked (inadmissible) set, creation order."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.clock = cluster.clock
        self.wake = asyncio.Event()
        self.parked: set[str] = set()
        self.seq: dict[str, int] = {}
        self.config_versions: dict[tuple[str, str], object] = {}
        self.warned: set[tuple[str, str]] = set()
        # Precise quota-reservation times: conditions only keep seconds, but preemption prefers the most
        # recently admitted candidate, so two admissions within one second must stay ordered.
        self.reserved_at: dict[str, float] = {}
        # uid -> (what the model was built from, model.Workload): building one parses every quantity.
        self._models: dict[str, tuple[tuple, model.Workload]] = {}
        self.view: ClusterView | None = None
        # What changed since a phase last looked: jobs as (key, namespace, name), Workloads as (namespace,
        # name). A pass reconciles only those, unless the configuration changed (``_full``): then every
        # decision may differ, so it goes over everything, as Kueue requeues all on a queue change.
        self._dirty_jobs: set[tuple[str, str, str]] = set()
        self._dirty_workloads: set[tuple[str, str]] = set()
        # WorkloadPriorityClasses created or changed: their value is to reach the Workloads naming them.
        self._dirty_priority_classes: set[str] = set()
        self._full = True
        self._last_full = 0.0
        # The admitted part of the scheduler's snapshot, and what it was built from.
        self._snapshot_cache: tuple[World, tuple[int, int], model.Snapshot] | None = None
        self._reservations = 0
        self.config: KueueConfig = getattr(cluster, "kueue_config", None) or KueueConfig()
        # Precise admission times (the Admitted condition keeps whole seconds), for waitForPodsReady.
        self.admitted_at: dict[str, datetime] = {}
        self.checks = admission_checks.AdmissionChecks(self)
        self.pods_ready = pods_ready.PodsReady(self, self.config)
        self._wake_handles: dict[int, asyncio.TimerHandle] = {}

    # -------------------------------------------------------------------------------- loop

    async def run(self) -> None:
        self.view = ClusterView(self.store, WATCHED_KEYS, self._changed)
        _VIEWS[self.store] = self.view
        try:
            while True:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that
                # arrives as the wake-up does, and the loop then outlives Cluster.stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TICK_SECONDS):
                        await self.wake.wait()
                await asyncio.sleep(DEBOUNCE_SECONDS)
                self.wake.clear()
                self.reconcile()
        finally:
            _VIEWS.pop(self.store, None)
            self.view.close()
            self.view = None

    def _changed(self, key: str, type_: str, obj: dict) -> None:
        self.observe(key, type_, obj)
        self._mark_dirty(key, obj)
        self.wake.set()

    def _mark_dirty(self, key: str, obj: dict) -> None:
        """A job is reconciled again when it or its Workload changed; a Workload when it changed."""
        meta = obj["metadata"]
        namespace = meta.get("namespace", "")
        if key in JOB_KINDS:
            self._dirty_jobs.add((key, namespace, meta["name"]))
        elif key == WORKLOAD_KEY:
            self._dirty_workloads.add((namespace, meta["name"]))
            for ref in meta.get("ownerReferences") or []:
                kind = jobs.JOB_KINDS_BY_KIND.get(ref.get("kind"))
                if kind is not None and ref.get("controller"):
                    self._dirty_jobs.add((kind.key, namespace, ref["name"]))

    def _world(self) -> World:
        """The configuration a decision reads (queues, flavors, priority classes, namespace labels)."""
        return self.view.config()

    def observe(self, key: str, type_: str, obj: dict) -> None:
        """Note creation order, and retry parked workloads after the cluster changed (BestEffortFIFO)."""
        meta = obj.get("metadata") or {}
        if type_ == "ADDED" and key in (WORKLOAD_KEY, *JOB_KINDS):
            self.seq.setdefault(meta.get("uid", ""), _int(meta.get("resourceVersion")))
        if key == WORKLOAD_KEY and type_ == "DELETED":
            self.parked.clear()
            self._models.pop(meta.get("uid", ""), None)
        if key in CONFIG_KEYS:
            ident = (key, f"{meta.get('namespace', '')}/{meta.get('name', '')}")
            version = (
                (meta.get("labels") or {}) if key == NAMESPACE_KEY else (obj.get("spec"), obj.get("value"))
            )
            if type_ == "DELETED" or self.config_versions.get(ident) != version:
                self.parked.clear()
                self._full = True
                if key == WPC_KEY and type_ != "DELETED":
                    self._dirty_priority_classes.add(meta.get("name", ""))
            if type_ == "DELETED":
                self.config_versions.pop(ident, None)
            else:
                self.config_versions[ident] = version

    def reconcile(self) -> None:
        """One level-triggered pass over what changed since the last (see the module docstring).

        Each phase takes the changes marked until it starts, so it also sees what an earlier phase of the
        same pass wrote; what a phase writes is marked for the next pass, which its writes wake.
        """
        full, self._full = self._full, False
        # Safety net: every FULL_PASS_SECONDS a pass goes over everything anyway, so that a change the
        # dirty marks missed (or a decision that only time changes) waits seconds, never forever.
        now = time.monotonic()
        if now - self._last_full >= FULL_PASS_SECONDS:
            full = True
        if full:
            self._last_full = now
        self._sync_priority_classes(self._world())
        self._reconcile_jobs(self._world(), full)
        self._reconcile_evictions(self._world(), full)
        self.checks.reconcile(self._world())
        self.pods_ready.reconcile(full)
        self._schedule_pass()
        self._write_queue_statuses(self._world())

    # -------------------------------------------------------------------------------- writes

    def _mutate(self, key: str, obj: dict, change: Callable[[dict], None], *, status: bool) -> dict | None:
        """Re-read ``obj``, apply ``change`` to the fresh copy, write it if it changed."""
        meta = obj["metadata"]
        try:
            fresh = self.store.get(key, meta["name"], namespace=meta.get("namespace"))
        except ApiError:
            return None
        updated = fast_copy(fresh)
        change(updated)
        if updated == fresh:
            return fresh
        try:
            return self.store.update(key, updated, subresource="status" if status else None)
        except ApiError as err:
            if err.code in (404, 409):
                self.wake.set()
                return None
            raise

    def _event(self, obj: dict, type_: str, reason: str, message: str, component: str) -> None:
        record_event(self.store, obj, type_, reason, message, component)

    def wake_after(self, simulated_seconds: float) -> None:
        """Run a pass once ``simulated_seconds`` have passed (a timeout or a backoff falls due then, with
        no object changing to wake the controller). One timer per real second is enough."""
        delay = max(0.0, self.clock.real_seconds(simulated_seconds)) + 0.01
        loop = asyncio.get_running_loop()
        slot = int(loop.time() + delay)
        if slot not in self._wake_handles:
            self._wake_handles[slot] = loop.call_later(delay, self._wake_from_timer, slot)

    def _wake_from_timer(self, slot: int) -> None:
        self._wake_handles.pop(slot, None)
        self.wake.set()

    def reserved_moment(self, wl: dict) -> datetime:
        """When the current quota reservation was made, as precisely as known."""
        at = self.reserved_at.get(wl["metadata"]["uid"])
        if at is not None:
            return datetime.fromtimestamp(at, UTC)
        condition = find_condition(wl, "QuotaReserved") or {}
        return (
            parse_time(condition["lastTransitionTime"])
            if condition.get("lastTransitionTime")
            else self.clock.now()
        )

    def admitted_moment(self, wl: dict) -> datetime:
        """When the Workload was last admitted (``Admitted=True``), as precisely as known."""
        condition = find_condition(wl, "Admitted") or {}
        at = self.admitted_at.get(wl["metadata"]["uid"])
        stamp = condition.get("lastTransitionTime")
        if at is not None and (not stamp or abs((at - parse_time(stamp)).total_seconds()) < 2):
            return at
        return parse_time(stamp) if stamp else self.clock.now()

    def set_deactivation_target(self, wl: dict, reason: str, message: str) -> None:
        """``SetDeactivationTarget``: the workload controller then deactivates and evicts it."""
        self._mutate(
            WORKLOAD_KEY,
            wl,
            lambda obj: set_condition(
                obj, "DeactivationTarget", "True", reason, message, self.clock.timestamp()
            ),
            status=True,
        )

    # -------------------------------------------------------------------------------- jobs

    def _reconcile_jobs(self, world: World, full: bool) -> None:
        dirty, self._dirty_jobs = self._dirty_jobs, set()
        index = self.view.index
        for kind in JOB_KINDS.values():
            if full:
                items = self.view.items(kind.key)
            else:
                found = (self.view.get(key, ns, name) for key, ns, name in dirty if key == kind.key)
                items = [job for job in found if job is not None]
            items.sort(
                key=lambda job: self.seq.get(
                    job["metadata"]["uid"], _int(job["metadata"].get("resourceVersion"))
                )
            )
            for job in items:
                managed = jobs.is_managed(kind, job, self.config.frameworks)
                if managed and not job["metadata"].get("deletionTimestamp"):
                    self._reconcile_job(kind, job, index.owned_by(job["metadata"]["uid"]), world)

    def _reconcile_job(self, kind: JobKind, job: dict, wl: dict | None, world: World) -> None:
        done, reason, message = jobs.finished(kind, job)
        if wl is None:
            if done:
                return
            if jobs.is_active(kind, job):
                if not jobs.is_suspended(kind, job):
                    self._stop_job(kind, job, None, "Not admitted by cluster queue")
                return
            self._create_workload(kind, job, world)
            return
        if is_finished(wl):
            return
        if not jobs.equivalent_to_workload(kind, job, wl):
            self._replace_workload(kind, job, wl, world)
            return
        self._sync_workload_priority(job, wl, world)
        if done:
            self._finish(kind, job, wl, reason, message)
            return
        if jobs.is_on_hold(kind, job):
            self._hold(wl)
            return
        if admission_of(wl) is None:
            self._sync_queued_workload(kind, job, wl, world)
            if not jobs.is_suspended(kind, job):
                self._stop_job(kind, job, wl, "Not admitted by cluster queue")
        elif is_evicting(wl):
            evicted = find_condition(wl, "Evicted") or {}
            if not jobs.is_suspended(kind, job):
                self._stop_job(kind, job, wl, evicted.get("message", ""))
            elif not jobs.is_active(kind, job):
                self._release(wl)
        elif condition_true(wl, "Admitted"):  # quota reserved and every admission check Ready
            if jobs.is_suspended(kind, job):
                self._start_job(kind, job, wl, world)
            self._sync_pods_ready(kind, job, wl)

    def _replace_workload(self, kind: JobKind, job: dict, wl: dict, world: World) -> None:
        """``ensureOneWorkload`` when the job no longer matches its Workload (its pod sets changed).

        A suspended job whose Workload holds no quota gets that Workload updated in place. Otherwise a
        running job is stopped first (its pod templates restored from the Workload), and the Workload is
        deleted; a new one is created once the job is no longer active (``handleJobWithNoWorkload``), so
        a RayService whose old cluster still serves (``Ready``) gets none until it stops serving.
        """
        meta = wl["metadata"]
        where = f"{meta['namespace']}/{meta['name']}"
        if jobs.is_suspended(kind, job) and admission_of(wl) is None:
            priority, class_name, error = self._priority(job, world)
            if error:
                return
            rebuilt = jobs.build_workload(kind, job, priority=priority, priority_class=class_name)
            active = (wl.get("spec") or {}).get("active", True)

            def change(obj: dict) -> None:
                obj["spec"] = {**rebuilt["spec"], "active": active}

            if self._mutate(WORKLOAD_KEY, wl, change, status=False) is not None:
                message = f"Updated not matching Workload for suspended job: {where}"
                self._event(job, "Normal", "UpdatedWorkload", message, JOB_COMPONENT)
            return
        if not jobs.is_suspended(kind, job):
            message = "No matching Workload; restoring pod templates according to existent Workload"
            self._stop_job(kind, job, wl, message)
        try:
            self.store.delete(WORKLOAD_KEY, meta["name"], namespace=meta["namespace"])
        except ApiError as err:
            if err.code != 404:
                raise
            return
        self._event(
            job, "Normal", "DeletedWorkload", f"Deleted not matching Workload: {where}", JOB_COMPONENT
        )

    def _priority(self, job: dict, world: World) -> tuple[int, str | None, str | None]:
        """(priority, class name, error): from the WorkloadPriorityClass label, else 0."""
        name = jobs.priority_class_name(job)
        if not name:
            return 0, None, None
        wpc = world.priority_classes.get(name)
        if wpc is None:
            return 0, name, f'workloadpriorityclasses.kueue.x-k8s.io "{name}" not found'
        return int(wpc.get("value", 0)), name, None

    def _create_workload(self, kind: JobKind, job: dict, world: World) -> None:
        priority, class_name, error = self._priority(job, world)
        if error:
            if (job["metadata"]["uid"], error) not in self.warned:
                self.warned.add((job["metadata"]["uid"], error))
                self._event(job, "Warning", "ErrWorkloadCompose", error, JOB_COMPONENT)
            return
        wl = jobs.build_workload(kind, job, priority=priority, priority_class=class_name)
        try:
            created = self.store.create(WORKLOAD_KEY, wl, namespace=job["metadata"]["namespace"])
        except ApiError as err:
            if err.code == 409:
                return
            raise
        meta = created["metadata"]
        self.seq.setdefault(meta["uid"], _int(meta.get("resourceVersion")))
        self._event(
            job,
            "Normal",
            "CreatedWorkload",
            f"Created Workload: {meta['namespace']}/{meta['name']}",
            JOB_COMPONENT,
        )

    def _sync_queued_workload(self, kind: JobKind, job: dict, wl: dict, world: World) -> None:
        """A suspended job may change queue; the queued Workload follows."""
        queue = jobs.queue_name(job)
        if (wl.get("spec") or {}).get("queueName") == queue:
            return  # already in sync: skip the re-read and copy (the common case, every pass, every job)
        self._mutate(WORKLOAD_KEY, wl, lambda obj: obj["spec"].update(queueName=queue), status=False)

    def _sync_workload_priority(self, job: dict, wl: dict, world: World) -> None:
        """A relabelled ``kueue.x-k8s.io/priority-class`` reaches the job's Workload, queued or holding quota.

        As Kueue's job reconciler does, only a change of class name is acted on (a class's new value reaches
        its Workloads through `_sync_priority_classes`). A Workload that reserved quota without a class
        never gets one (the API server refuses to add it then), and one whose priority comes from a pod
        PriorityClass does not follow the label. A class that does not exist yet leaves the Workload as it
        is until it does (its creation is a configuration change, which revisits every job).
        """
        spec = wl.get("spec") or {}
        ref = spec.get("priorityClassRef")
        if ref is None and admission_of(wl) is not None:
            return
        if ref is not None and not is_workload_priority_class(ref):
            return
        class_name = jobs.priority_class_name(job)
        if (ref or {}).get("name", "") == class_name:
            return  # the common case, every pass, every job: no re-read, no copy
        priority, _, error = self._priority(job, world)
        if error:
            return

        def change(obj: dict) -> None:
            obj["spec"]["priority"] = priority
            if class_name:
                obj["spec"]["priorityClassRef"] = workload_priority_class_ref(class_name)
            else:
                obj["spec"].pop("priorityClassRef", None)

        updated = self._mutate(WORKLOAD_KEY, wl, change, status=False)
        if updated is None:
            return
        meta = updated["metadata"]
        self._event(
            job,
            "Normal",
            "UpdatedWorkload",
            f"Updated workload priority class: {meta['namespace']}/{meta['name']}",
            JOB_COMPONENT,
        )
        # A new priority may make a parked workload admissible, or an admitted one preemptible.
        self.parked.clear()

    def _sync_priority_classes(self, world: World) -> None:
        """Kueue's WorkloadPriorityClass controller: a class's value reaches every Workload that names it.

        Runs for the classes created or changed since the last pass. Admitted Workloads follow too, so the
        next preemption sees the new value; a parked one is retried, as after any configuration change.
        """
        dirty, self._dirty_priority_classes = self._dirty_priority_classes, set()
        if not dirty:
            return
        values = {
            name: int(world.priority_classes[name].get("value", 0))
            for name in dirty
            if name in world.priority_classes
        }
        for wl in self.view.items(WORKLOAD_KEY):
            spec = wl.get("spec") or {}
            ref = spec.get("priorityClassRef")
            if ref is None or not is_workload_priority_class(ref) or ref.get("name") not in values:
                continue
            value = values[ref["name"]]
            if spec.get("priority") != value:
                self._mutate(
                    WORKLOAD_KEY, wl, lambda obj, v=value: obj["spec"].update(priority=v), status=False
                )

    def _start_job(self, kind: JobKind, job: dict, wl: dict, world: World) -> None:
        infos = jobs.pod_set_infos(wl, world.flavors, (wl.get("spec") or {}).get("queueName", ""))
        started = self._mutate(
            kind.key, job, lambda obj: obj.update(jobs.start_job(kind, obj, infos)), status=False
        )
        if started is not None:
            cq = admission_of(wl)["clusterQueue"]
            self._event(job, "Normal", "Started", f"Admitted by clusterQueue {cq}", JOB_COMPONENT)

    def _stop_job(self, kind: JobKind, job: dict, wl: dict | None, message: str) -> None:
        original = ((wl or {}).get("spec") or {}).get("podSets") or []

        def change(obj: dict) -> None:
            if wl is None:
                jobs.set_suspend(kind, obj, True)
            else:
                obj.update(jobs.stop_job(kind, obj, original))

        if self._mutate(kind.key, job, change, status=False) is not None:
            self._event(job, "Normal", "Stopped", message, JOB_COMPONENT)

    def _finish(self, kind: JobKind, job: dict, wl: dict, reason: str, message: str) -> None:
        now = self.clock.timestamp()
        self._mutate(
            WORKLOAD_KEY,
            wl,
            lambda obj: set_condition(obj, "Finished", "True", reason, message, now),
            status=True,
        )
        name = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
        self._event(
            job, "Normal", "FinishedWorkload", f"Workload '{name}' is declared finished", JOB_COMPONENT
        )
        self.parked.clear()

    def _hold(self, wl: dict) -> None:
        now = self.clock.timestamp()

        def change(obj: dict) -> None:
            had_admission = obj.get("status", {}).pop("admission", None) is not None
            set_condition(obj, "QuotaReserved", "False", "OnHold", MSG_ON_HOLD, now)
            if had_admission or find_condition(obj, "Admitted"):
                set_condition(obj, "Admitted", "False", "NoReservation", MSG_NO_RESERVATION, now)

        self._mutate(WORKLOAD_KEY, wl, change, status=True)
        self.parked.clear()

    def _release(self, wl: dict) -> None:
        """The evicted job stopped: clear the reservation and put the Workload back in its queue."""
        now = self.clock.timestamp()
        evicted = find_condition(wl, "Evicted") or {}
        reason, message = evicted.get("reason", ""), evicted.get("message", "")

        def change(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status.pop("admission", None)
            set_condition(obj, "QuotaReserved", "False", "Pending", message, now)
            set_condition(obj, "Admitted", "False", "NoReservation", MSG_NO_RESERVATION, now)
            requeued = "True" if reason in ("Preempted", "NodeFailures") else "False"
            set_condition(obj, "Requeued", requeued, reason, message, now)
            if condition_true(obj, "PodsReady"):
                set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)
            status["resourceRequests"] = resource_requests(obj)

        self._mutate(WORKLOAD_KEY, wl, change, status=True)
        self.parked.clear()

    def _sync_pods_ready(self, kind: JobKind, job: dict, wl: dict) -> None:
        now = self.clock.timestamp()
        ready = jobs.pods_ready(kind, job)
        previous = find_condition(wl, "PodsReady")

        def change(obj: dict) -> None:
            if ready:
                set_condition(obj, "PodsReady", "True", "Started", MSG_PODS_READY, now)
            elif previous and previous.get("status") == "True":
                set_condition(obj, "PodsReady", "False", "WaitForRecovery", MSG_PODS_RECOVERY, now)
            elif not previous or previous.get("reason") != "WaitForRecovery":
                set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)

        self._mutate(WORKLOAD_KEY, wl, change, status=True)

    # -------------------------------------------------------------------------------- evictions

    def _evict(
        self,
        wl: dict,
        reason: str,
        message: str,
        *,
        preempted_reason: str | None = None,
        underlying_cause: str = "",
        prepare: Callable[[dict], None] | None = None,
    ) -> None:
        """Set Evicted (and Preempted) and count it; the job reconcile then stops the job and, once it is
        inactive, releases the quota. ``prepare`` edits the Workload first (Kueue's ``WithCustomPrepare``,
        e.g. the requeue state of a PodsReady timeout); every admission check goes back to Pending.

        ``status.schedulingStats.evictions`` counts evictions per (reason, underlyingCause). Kueue gives an
        underlying cause only where the reason alone is too coarse (a PodsReady timeout: ``WaitForStart``
        or ``WaitForRecovery``; a deactivation: its DeactivationTarget reason); a preemption's cause is
        empty, its kind (InClusterQueue, ...) is only in the ``Preempted`` condition.
        """
        now = self.clock.timestamp()
        # A deactivation names its cause in the condition (DeactivatedDueToAdmissionCheck); the
        # eviction stats keep reason and cause apart.
        condition_reason = reason
        if reason == "Deactivated" and underlying_cause:
            condition_reason = f"DeactivatedDueTo{underlying_cause}"

        def change(obj: dict) -> None:
            if prepare is not None:
                prepare(obj)
            admission_checks.reset_on_eviction(obj, now)
            set_condition(obj, "Evicted", "True", condition_reason, message, now)
            if preempted_reason:
                set_condition(obj, "Preempted", "True", preempted_reason, message, now)
            if reason != "Preempted":
                set_condition(obj, "Requeued", "False", condition_reason, message, now)
            stats = obj["status"].setdefault("schedulingStats", {}).setdefault("evictions", [])
            for entry in stats:
                if entry.get("reason") == reason and entry.get("underlyingCause", "") == underlying_cause:
                    entry["count"] = int(entry.get("count", 0)) + 1
                    break
            else:
                stats.append({"reason": reason, "underlyingCause": underlying_cause, "count": 1})

        if self._mutate(WORKLOAD_KEY, wl, change, status=True) is None:
            return
        self._event(wl, "Normal", f"EvictedDueTo{condition_reason}", message, ADMISSION_COMPONENT)
        if preempted_reason:
            self._event(wl, "Normal", "Preempted", message, ADMISSION_COMPONENT)
        self._stop_owner(wl, message)

    def _deactivate(self, wl: dict) -> None:
        """Evict an inactive Workload: ``Deactivated``, or ``DeactivatedDueTo<cause>`` with the message of
        the ``DeactivationTarget`` that asked for it (which goes), and no requeue state."""
        target = find_condition(wl, "DeactivationTarget") or {}
        cause, message = "", MSG_DEACTIVATED
        if target.get("status") == "True":
            cause = target.get("reason", "")
            message = f"{MSG_DEACTIVATED} due to {target.get('message', '')}"

        def prepare(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status["conditions"] = [
                c for c in status.get("conditions") or [] if c["type"] != "DeactivationTarget"
            ]
            status.pop("requeueState", None)

        self._evict(wl, "Deactivated", message, underlying_cause=cause, prepare=prepare)

    def _stop_owner(self, wl: dict, message: str) -> None:
        for ref in wl["metadata"].get("ownerReferences") or []:
            kind = jobs.JOB_KINDS_BY_KIND.get(ref.get("kind"))
            if kind is None or not ref.get("controller"):
                continue
            try:
                job = self.store.get(kind.key, ref["name"], namespace=wl["metadata"]["namespace"])
            except ApiError:
                return
            fresh = self.store.get(
                WORKLOAD_KEY, wl["metadata"]["name"], namespace=wl["metadata"]["namespace"]
            )
            if not jobs.is_suspended(kind, job):
                self._stop_job(kind, job, fresh, message)

    def _reconcile_evictions(self, world: World, full: bool) -> None:
        """Deactivation and ``HoldAndDrain`` evict admitted workloads; restarts mark them requeued."""
        now = self.clock.timestamp()
        dirty, self._dirty_workloads = self._dirty_workloads, set()
        if full:
            workloads = self.view.items(WORKLOAD_KEY)
        else:
            found = (self.view.get(WORKLOAD_KEY, *ident) for ident in sorted(dirty))
            workloads = [wl for wl in found if wl is not None]
        for wl in workloads:
            if is_finished(wl):
                continue
            if condition_true(wl, "DeactivationTarget") and (wl.get("spec") or {}).get("active", True):
                # A rejected admission check or an exhausted requeuing limit: Kueue deactivates it.
                self._mutate(WORKLOAD_KEY, wl, lambda obj: obj["spec"].update(active=False), status=False)
                continue
            lq = world.local_queue_of(wl)
            if holds_quota(wl) and not is_evicting(wl):
                cq = world.cluster_queues.get(admission_of(wl)["clusterQueue"])
                if not (wl.get("spec") or {}).get("active", True):
                    self._deactivate(wl)
                elif cq is not None and stop_policy(cq) == "HoldAndDrain":
                    self._evict(wl, "ClusterQueueStopped", MSG_CQ_STOPPED)
                elif lq is not None and stop_policy(lq) == "HoldAndDrain":
                    self._evict(wl, "LocalQueueStopped", MSG_LQ_STOPPED)
                continue
            requeued = find_condition(wl, "Requeued") or {}
            if admission_of(wl) is None and requeued.get("status") == "False":
                restart = self._restart_reason(requeued.get("reason"), wl, lq, world)
                if restart:
                    reason, message = restart
                    self._mutate(
                        WORKLOAD_KEY,
                        wl,
                        lambda obj, r=reason, m=message: set_condition(obj, "Requeued", "True", r, m, now),
                        status=True,
                    )

    @staticmethod
    def _restart_reason(
        reason: str | None, wl: dict, lq: dict | None, world: World
    ) -> tuple[str, str] | None:
        if reason == "ClusterQueueStopped" and lq is not None:
            cq = world.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue", ""))
            if cq is not None and stop_policy(cq) == "None":
                return "ClusterQueueRestarted", "The ClusterQueue was restarted after being stopped"
        if reason == "LocalQueueStopped" and lq is not None and stop_policy(lq) == "None":
            return "LocalQueueRestarted", "The LocalQueue was restarted after being stopped"
        if reason and reason.startswith("Deactivated") and (wl.get("spec") or {}).get("active", True):
            return "Reactivated", "The workload was reactivated"
        return None

    # -------------------------------------------------------------------------------- scheduling

    def _snapshot(self, world: World) -> model.Snapshot:
        """The scheduler's input, rebuilt only when the configuration or a quota holder changed (the
        scheduler never mutates it); admitted workloads in list order, as a fresh read would give."""
        index = self.view.index
        inputs = (index.holders_version, self._reservations)
        cached = self._snapshot_cache
        if cached is not None and cached[0] is world and cached[1] == inputs:
            return cached[2]
        snapshot = model.Snapshot(
            flavors={name: model_flavor(obj) for name, obj in world.flavors.items()},
            cluster_queues={
                name: model_cluster_queue(obj, world.flavors) for name, obj in world.cluster_queues.items()
            },
            cohorts={name: model_cohort(obj) for name, obj in world.cohorts.items()},
            namespace_labels=dict(world.namespace_labels),
        )
        holders = sorted((ident, cq, wl) for cq, held in index.holders.items() for ident, wl in held.items())
        for _, cq, wl in holders:
            snapshot.admitted.setdefault(cq, []).append(self._model(wl, cq))
        self._snapshot_cache = (world, inputs, snapshot)
        return snapshot

    def _model(self, wl: dict, cluster_queue: str, *, inadmissible: bool = False) -> model.Workload:
        """``model_workload`` of ``wl``, rebuilt only when the object or what else it depends on changed."""
        uid = wl["metadata"]["uid"]
        inputs = (
            wl["metadata"].get("resourceVersion"),
            cluster_queue,
            self._seq(wl),
            self.reserved_at.get(uid),
        )
        cached = self._models.get(uid)
        if cached is None or cached[0] != inputs:
            built = model_workload(wl, cluster_queue, seq=inputs[2], reserved_at=inputs[3])
            cached = self._models[uid] = (inputs, built)
        return replace(cached[1], inadmissible=True) if inadmissible else cached[1]

    def _seq(self, wl: dict) -> int:
        return self.seq.get(wl["metadata"]["uid"], _int(wl["metadata"].get("resourceVersion")))

    def _schedule_pass(self) -> None:
        """Admission cycles until one makes no progress (nothing admitted or parked), at most
        ``MAX_CYCLES_PER_PASS``.

        The queues are read and ordered once per pass, as upstream's queue manager keeps them as heaps:
        within a pass only this controller writes, and what its cycles change in the queues is known
        (admitted workloads leave, parked heads are skipped), so a cycle hands the pure scheduler only
        each queue's head and costs O(queues), not O(pending). ``schedule_cycle`` picks each queue's
        first non-parked workload in queue order, so its decisions are the same as over whole queues.
        """
        world = self._world()
        now = self.clock.timestamp()
        queues: dict[str, list[model.Workload]] = {}
        where: dict[str, tuple[str, str]] = {}
        queued = self.view.index.queued
        clock_now = self.clock.now()
        for ident in sorted(queued):
            wl = queued[ident]
            if pods_ready.backing_off(wl, clock_now):
                continue  # requeued only once its backoff (requeueState.requeueAt) is over
            cq_name, blocked = queue_blocker(wl, world)
            if blocked:
                self._set_pending(wl, "Inadmissible", blocked, now)
                continue
            where[wl["metadata"]["uid"]] = (wl["metadata"]["namespace"], wl["metadata"]["name"])
            queues.setdefault(cq_name, []).append(self._model(wl, cq_name))
        queues = {name: scheduler.ordered(queue) for name, queue in queues.items()}
        admitted: set[str] = set()
        for _ in range(MAX_CYCLES_PER_PASS):
            heads = {}
            for name, queue in queues.items():
                head = next((w for w in queue if w.uid not in admitted and w.uid not in self.parked), None)
                if head is not None:
                    heads[name] = [head]
            if not heads or not self._schedule_cycle(heads, where, admitted):
                return

    def _schedule_cycle(
        self, heads: dict[str, list[model.Workload]], where: dict[str, tuple[str, str]], admitted: set[str]
    ) -> bool:
        """One admission cycle; True when it admitted or parked something (worth another cycle)."""
        now = self.clock.timestamp()
        progressed = False
        for decision in scheduler.schedule_cycle(self._snapshot(self._world()), heads):
            uid = decision.workload.uid
            wl = self._current(where.get(uid))
            if wl is None:
                continue
            if isinstance(decision, model.Admit):
                self._admit(wl, decision.admission, self._world())
                admitted.add(uid)
                progressed = True
            elif isinstance(decision, model.Preempt):
                self._preempt(wl, decision, self._world(), now)
            else:
                self._set_pending(wl, decision.reason, decision.message, now)
                if decision.inadmissible and uid not in self.parked:
                    self.parked.add(uid)
                    progressed = True
        return progressed

    def _current(self, ident: tuple[str, str] | None) -> dict | None:
        """The Workload as it is now (an earlier decision of the pass may have written it)."""
        if ident is None:
            return None
        return self.view.get(WORKLOAD_KEY, *ident)

    def _set_pending(self, wl: dict, reason: str, message: str, now: str) -> None:
        before = find_condition(wl, "QuotaReserved") or {}

        def change(obj: dict) -> None:
            set_condition(obj, "QuotaReserved", "False", reason, message, now)
            obj["status"]["resourceRequests"] = resource_requests(obj)

        self._mutate(WORKLOAD_KEY, wl, change, status=True)
        if (before.get("reason"), before.get("message")) != (reason, message):
            self._event(wl, "Warning", "Pending", message, ADMISSION_COMPONENT)

    def _admit(self, wl: dict, admission: model.Admission, world: World) -> None:
        now = self.clock.timestamp()
        cq = admission.cluster_queue

        def change(obj: dict) -> None:
            status = obj.setdefault("status", {})
            status["admission"] = admission_dict(admission)
            status.pop("resourceRequests", None)
            set_condition(
                obj, "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", now
            )
            # With admission checks, reserving quota is only the first step: Admitted waits for them.
            if admission_checks.ready_to_admit(obj, world.cluster_queues.get(cq)):
                set_condition(obj, "Admitted", "True", "Admitted", MSG_ADMITTED, now)
                set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)
            for type_ in ("Evicted", "Preempted"):
                previous = find_condition(obj, type_)
                if previous and previous.get("status") == "True":
                    set_condition(
                        obj,
                        type_,
                        "False",
                        "QuotaReserved",
                        f"Previously: {previous.get('message', '')}",
                        now,
                    )

        admitted = self._mutate(WORKLOAD_KEY, wl, change, status=True)
        if admitted is None:
            return
        self.reserved_at[admitted["metadata"]["uid"]] = self.clock.now().timestamp()
        self._reservations += 1
        waited = max(
            0, int(self.clock.now().timestamp() - timestamp_seconds(wl["metadata"].get("creationTimestamp")))
        )
        self._event(
            admitted,
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}, wait time since queued was {waited}s",
            ADMISSION_COMPONENT,
        )
        self.parked.discard(wl["metadata"]["uid"])
        if condition_true(admitted, "Admitted"):
            self._on_admitted(admitted, world, waited_for_checks=0)

    def admit_after_checks(self, wl: dict, world: World) -> None:
        """Every admission check of a Workload holding quota is Ready: admit it and start its job."""
        now = self.clock.timestamp()

        def change(obj: dict) -> None:
            set_condition(obj, "Admitted", "True", "Admitted", MSG_ADMITTED, now)
            set_condition(obj, "PodsReady", "False", "WaitForStart", MSG_PODS_NOT_READY, now)

        admitted = self._mutate(WORKLOAD_KEY, wl, change, status=True)
        if admitted is not None:
            waited = self.clock.now() - self.reserved_moment(admitted)
            self._on_admitted(admitted, world, waited_for_checks=max(0, int(waited.total_seconds())))

    def _on_admitted(self, admitted: dict, world: World, *, waited_for_checks: int) -> None:
        """The Admitted event, and the job started (unsuspended with the admission's pod set infos)."""
        self.admitted_at[admitted["metadata"]["uid"]] = self.clock.now()
        cq = admission_of(admitted)["clusterQueue"]
        self._event(
            admitted,
            "Normal",
            "Admitted",
            f"Admitted by ClusterQueue {cq}, wait time since reservation was {waited_for_checks}s",
            ADMISSION_COMPONENT,
        )
        for ref in admitted["metadata"].get("ownerReferences") or []:
            kind = jobs.JOB_KINDS_BY_KIND.get(ref.get("kind"))
            if kind is None or not ref.get("controller"):
                continue
            try:
                job = self.store.get(kind.key, ref["name"], namespace=admitted["metadata"]["namespace"])
            except ApiError:
                continue
            if jobs.is_suspended(kind, job):
                self._start_job(kind, job, admitted, world)

    def _preempt(self, wl: dict, decision: model.Preempt, world: World, now: str) -> None:
        by_uid = self.view.index.by_uid
        for victim in decision.victims:
            target = by_uid.get(victim.workload.uid)
            if target is None or victim.workload.evicted or is_evicting(target):
                continue
            self._evict(target, "Preempted", victim.message, preempted_reason=victim.reason)
            self._event(
                wl,
                "Normal",
                "PreemptedWorkload",
                f"Preempted workload {victim.workload.key}",
                ADMISSION_COMPONENT,
            )
        self._set_pending(wl, "Pending", decision.pending_message, now)

    # -------------------------------------------------------------------------------- queue status

    def _write_queue_statuses(self, world: World) -> None:
        """Every queue's status from the index's running sums: O(queues), whatever the Workload count."""
        now = self.clock.timestamp()
        index = self.view.index
        cq_pending: dict[str, int] = {}
        for key, lq in world.local_queues.items():
            cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
            cq_pending[cq_name] = cq_pending.get(cq_name, 0) + index.queued_count.get(key, 0)
        for name, cq in world.cluster_queues.items():
            active, reason, message = cluster_queue_active(cq, world.flavors, world.admission_checks)
            status = cluster_queue_status(cq, index.cluster_queue_tally.get(name), cq_pending.get(name, 0))

            def change(obj: dict, status=status, active=active, reason=reason, message=message) -> None:
                obj["status"] = copy.deepcopy(status)
                set_condition(obj, "Active", "True" if active else "False", reason, message, now)

            self._mutate(CQ_KEY, cq, change, status=True)
        for key, lq in world.local_queues.items():
            state = local_queue_active(lq, world)
            cq = world.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue", ""))
            status = local_queue_status(
                lq, cq, index.local_queue_tally.get(key), index.queued_count.get(key, 0)
            )

            def change(obj: dict, status=status, state=state) -> None:
                obj["status"] = copy.deepcopy(status)
                set_condition(obj, "Active", *state, now)

            self._mutate(LQ_KEY, lq, change, status=True)


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
