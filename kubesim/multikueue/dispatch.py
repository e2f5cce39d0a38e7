"""MultiKueue's Workload reconciler for RayJobs: dispatch to the workers, first admitted wins, mirror back.

Kueue v0.19.2's ``wlReconciler`` (``pkg/controller/admissionchecks/multikueue/workload.go``) with the
RayJob adapter (``pkg/controller/jobs/rayjob/rayjob_multikueue_adapter.go`` on
``pkg/controller/jobs/ray/ray_multikueue_adapter.go``), AllAtOnce dispatching (the default):

* a manager Workload whose MultiKueue check is Pending and that holds quota is copied (``cloneForCreate``:
  name, namespace, labels but the job-uid one, annotations, spec; label ``kueue.x-k8s.io/multikueue-origin``)
  to every connected worker of the check's MultiKueueConfig, which are listed in
  ``status.nominatedClusterNames``;
* the first copy ``Admitted`` on a worker (earliest ``lastTransitionTime``) wins; the others are deleted;
  the RayJob is copied there (``SyncJob``: labels, annotations, spec, with the origin label, the
  ``kueue.x-k8s.io/prebuilt-workload-name`` annotation and no ``spec.managedBy``), the check becomes Ready
  ("The workload was admitted on \"<worker>\"", Event ``MultiKueue``), ``status.clusterName`` is set and
  ``nominatedClusterNames`` cleared; from then on the remote RayJob's status is copied to the manager's;
* a copy Finished on the worker finishes the manager's Workload with its reason and message; one Evicted
  there sends the check to Retry ("Workload evicted on worker cluster: ..."), and Kueue requeues it;
* a manager Workload that is finished, releases its quota or is deleted has its copies (RayJob and
  Workload) removed from every worker: deleting the manager's RayJob deletes the remote ones.

A Workload not owned by a RayJob gets its check Rejected ("No multikueue adapter found ..."): kubesim has
no other adapter, where Kueue also has batch/Job, JobSet, ... .
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kubesim.clock import Clock, parse_time
from kubesim.errors import ApiError
from kubesim.events import record_event
from kubesim.jsoncopy import fast_copy
from kubesim.kueue.admission_checks import (
    ADMISSION_CHECK_KEY,
    MULTIKUEUE_CONTROLLER,
    PENDING,
    READY,
    REJECTED,
    RETRY,
    set_state,
)
from kubesim.kueue.conditions import (
    admission_of,
    condition_true,
    find_condition,
    is_finished,
    is_workload_priority_class,
    set_condition,
)
from kubesim.kueue.jobs import JOB_UID_LABEL, PREBUILT_WORKLOAD, WORKLOAD_KEY
from kubesim.multikueue.connections import MULTIKUEUE_CONFIG_KEY, parameters_error

log = logging.getLogger(__name__)

RAYJOB_KEY = "rayjobs.ray.io"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"
COMPONENT = "kueue-workload-controller"
"""``constants.WorkloadControllerName``: the recorder MultiKueue's Workload reconciler is given."""


@dataclass
class Group:
    """``wlGroup``: the manager's Workload, its MultiKueue check and its copies on the reachable workers."""

    local: dict
    check: dict
    owner: str
    remotes: dict[str, dict | None] = field(default_factory=dict)
    stores: dict = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)


@dataclass(eq=False)
class Dispatcher:
    """The reconciler; ``workers(check_name)`` gives (name -> worker store for the connected clusters of
    the check's config, the names of those not connected)."""

    store: object
    clock: Clock
    origin: str
    workers: Callable[[str], tuple[dict, list[str]]]
    worker_lost_timeout: float
    lost_for: Callable[[str], float]
    """Simulated seconds since the named worker was last connected (0 when it is)."""
    deleted: dict[tuple[str, str], dict] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------------ entry

    def reconcile(self, namespace: str, name: str) -> float | None:
        """One reconcile of the manager's Workload; returns simulated seconds until the next, if any."""
        wl = self.store.get_or_none(WORKLOAD_KEY, name, namespace=namespace)
        deleted = wl is None or bool(wl["metadata"].get("deletionTimestamp"))
        if wl is None:
            wl = self.deleted.get((namespace, name))
            if wl is None:
                return None
        check = self._multikueue_check(wl)
        if check is None or check.get("state") == REJECTED:
            self.deleted.pop((namespace, name), None)
            return None
        owner = next(
            (r for r in wl["metadata"].get("ownerReferences") or [] if r.get("controller")),
            (wl["metadata"].get("ownerReferences") or [None])[0],
        )
        if owner is None or (owner.get("apiVersion"), owner.get("kind")) != ("ray.io/v1", "RayJob"):
            message = "No multikueue adapter found"
            if owner is not None:
                group, _, version = owner.get("apiVersion", "").rpartition("/")
                message += f' for owner kind "{group}/{version}, Kind={owner.get("kind")}"'
            self._update_check(wl, check, REJECTED, message)
            return None
        if not deleted:
            job = self.store.get_or_none(RAYJOB_KEY, owner["name"], namespace=namespace)
            if job is None:
                return None
            managed_by = (job.get("spec") or {}).get("managedBy") or ""
            if managed_by != MULTIKUEUE_CONTROLLER:
                reason = f'Expecting spec.managedBy to be "{MULTIKUEUE_CONTROLLER}" not "{managed_by}"'
                self._update_check(wl, check, REJECTED, f"The owner is not managed by Kueue: {reason}")
                return None
        group = self._read_group(wl, check, owner["name"])
        if group is None:
            return None
        if deleted:
            for worker in list(group.remotes):
                self._remove_remote(group, worker)
            self.deleted.pop((namespace, name), None)
            return None
        return self._reconcile_group(group)

    def forget_deleted(self, wl: dict) -> None:
        """The watch saw ``wl`` go: remember it, so its copies can still be removed (``deletedWlCache``)."""
        meta = wl["metadata"]
        self.deleted[(meta["namespace"], meta["name"])] = wl

    # ------------------------------------------------------------------------------------------ reading

    def _multikueue_check(self, wl: dict) -> dict | None:
        """``GetMultiKueueAdmissionCheck``: the first of the Workload's checks that MultiKueue owns."""
        for state in (wl.get("status") or {}).get("admissionChecks") or []:
            check = self.store.get_or_none(ADMISSION_CHECK_KEY, state.get("name", ""))
            if ((check or {}).get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER:
                return state
        return None

    def _read_group(self, wl: dict, check: dict, owner: str) -> Group | None:
        ac = self.store.get_or_none(ADMISSION_CHECK_KEY, check["name"])
        ref = ((ac or {}).get("spec") or {}).get("parameters")
        if ac is None or parameters_error(ref) is not None:
            return None
        if self.store.get_or_none(MULTIKUEUE_CONFIG_KEY, ref["name"]) is None:
            return None
        stores, unavailable = self.workers(check["name"])
        meta = wl["metadata"]
        group = Group(wl, check, owner, stores=stores, unavailable=unavailable)
        for worker, store in stores.items():
            group.remotes[worker] = store.get_or_none(WORKLOAD_KEY, meta["name"], namespace=meta["namespace"])
        return group

    # ------------------------------------------------------------------------------------------ the group

    def _reconcile_group(self, group: Group) -> float | None:
        local, check = group.local, group.check
        if is_finished(local) or admission_of(local) is None:
            for worker in list(group.remotes):
                self._remove_remote(group, worker)
            return self.worker_lost_timeout if group.unavailable else None
        finished, worker = _best_match(group, "Finished")
        if finished is not None:
            if finished.get("reason") == "OutOfSync":
                if check.get("state") == READY:
                    message = (
                        f'Remote workload on worker cluster "{worker}" is out of sync with its user job, '
                        "resetting for re-dispatch"
                    )
                    updated = self._update_check(local, check, RETRY, message)
                    self._event(local, "Warning", updated)
                return None
            self._sync_job(group, worker)
            self._finish(local, finished.get("reason", ""), finished.get("message", ""))
            return None
        evicted, worker = _best_match(group, "Evicted")
        if evicted is not None:
            if condition_true(local, "Evicted"):
                self._sync_job(group, worker)
                return None
            if check.get("state") == READY:
                cluster = (local.get("status") or {}).get("clusterName", "")
                message = (
                    f'Workload evicted on worker cluster: "{cluster}", resetting for re-admission. '
                    f'Previously: "{check.get("state")}"'
                )
                self._write_check(local, check, RETRY, message)
                self._event(local, "Normal", message)
                return None
        for worker, remote in list(group.remotes.items()):
            if remote is None or not _spec_out_of_sync(local, remote):
                continue
            if priority_changed(local, remote):  # a new priority is passed on, the copy stays
                _mutate(group.stores[worker], remote, lambda obj: _copy_priority(obj, local), status=False)
                continue
            self._remove_remote(group, worker)
        admitted, winner = _best_match(group, "Admitted")
        if admitted is None and check.get("state") == READY:
            return self._lost_winner(group)
        if admitted is not None:
            return self._follow_winner(group, winner)
        if check.get("state") != PENDING or (local.get("status") or {}).get("clusterName"):
            return None  # ShouldSkipClusterNomination
        return self._nominate_and_synchronize(group)

    def _lost_winner(self, group: Group) -> float | None:
        """The check is Ready but no worker has the copy admitted: the winner is gone or unreachable."""
        admitting = (group.local.get("status") or {}).get("clusterName") or ""
        if admitting and admitting in group.unavailable:
            remaining = self.worker_lost_timeout - self.lost_for(admitting)
            if remaining > 0:
                return remaining  # temporarily unreachable: wait for it before re-dispatching
            self._update_check(group.local, group.check, RETRY, "Admitting remote lost")
            return None
        if not admitting:
            message = (
                "Admission check is Ready but no admitting cluster is recorded; this is unexpected, "
                "please report it"
            )
            self._update_check(group.local, group.check, RETRY, message)
            return None
        self._update_check(group.local, group.check, RETRY, "Admitting remote no longer exists")
        return None

    def _follow_winner(self, group: Group, winner: str) -> float | None:
        local, check = group.local, group.check
        for worker, remote in list(group.remotes.items()):
            if remote is not None and worker != winner:
                self._remove_remote(group, worker)
        evicted = find_condition(local, "Evicted")
        if admission_of(local) is not None and evicted and evicted.get("status") == "True":
            message = f"Evicted on manager: {evicted.get('message', '')}"
            now = self.clock.timestamp()

            def deactivate(obj: dict) -> None:
                if not condition_true(obj, "DeactivationTarget"):
                    set_condition(obj, "DeactivationTarget", "True", "EvictedOnManagerCluster", message, now)

            _mutate(group.stores[winner], group.remotes[winner], deactivate, status=True)
            return None
        self._sync_job(group, winner)
        if check.get("state") not in (RETRY, REJECTED):
            message = f'The workload was admitted on "{winner}"'
            now = self.clock.timestamp()
            was = (check.get("state"), check.get("message"))

            def ready(obj: dict) -> None:
                set_state(obj, check["name"], READY, message, now)
                status = obj.setdefault("status", {})
                status.setdefault("clusterName", winner)
                status.pop("nominatedClusterNames", None)

            if _mutate(self.store, local, ready, status=True) is not None and was != (READY, message):
                self._event(local, "Normal", message)
        return self.worker_lost_timeout

    def _nominate_and_synchronize(self, group: Group) -> float | None:
        local = group.local
        others = [
            state
            for state in (local.get("status") or {}).get("admissionChecks") or []
            if state.get("name") != group.check["name"] and state.get("state") != READY
        ]
        if others:  # allNonMKAdmissionChecksReady
            return None
        nominated = sorted(group.remotes)
        if sorted((local.get("status") or {}).get("nominatedClusterNames") or []) != nominated:

            def nominate(obj: dict) -> None:
                obj.setdefault("status", {})["nominatedClusterNames"] = nominated

            if _mutate(self.store, local, nominate, status=True) is None:
                return None
        for worker, remote in group.remotes.items():
            if remote is None:
                try:
                    group.stores[worker].create(WORKLOAD_KEY, self._clone(local), namespace=_ns(local))
                except ApiError as err:
                    if err.code != 409:
                        log.warning("creating the remote workload on %s: %s", worker, err)
        return None

    # ------------------------------------------------------------------------------------------ writes

    def _clone(self, local: dict) -> dict:
        """``cloneForCreate``."""
        meta = local["metadata"]
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != JOB_UID_LABEL}
        labels[ORIGIN_LABEL] = self.origin
        metadata = {"name": meta["name"], "namespace": meta["namespace"], "labels": labels}
        if meta.get("annotations"):
            metadata["annotations"] = dict(meta["annotations"])
        return {
            "apiVersion": local["apiVersion"],
            "kind": "Workload",
            "metadata": metadata,
            "spec": local["spec"],
        }

    def _sync_job(self, group: Group, worker: str) -> None:
        """The adapter's ``SyncJob``: copy the remote RayJob's status home, or create the remote RayJob."""
        namespace = _ns(group.local)
        job = self.store.get_or_none(RAYJOB_KEY, group.owner, namespace=namespace)
        if job is None:
            return
        store = group.stores[worker]
        remote = store.get_or_none(RAYJOB_KEY, group.owner, namespace=namespace)
        if remote is not None:
            if (remote["metadata"].get("labels") or {}).get(ORIGIN_LABEL) != self.origin:
                return  # ValidateRemoteObjectOwnership: not ours, never touched
            status = remote.get("status")
            _mutate(self.store, job, lambda obj: _set_status(obj, status), status=True)
            return
        meta = job["metadata"]
        labels = {**(meta.get("labels") or {}), ORIGIN_LABEL: self.origin}
        annotations = {**(meta.get("annotations") or {}), PREBUILT_WORKLOAD: group.local["metadata"]["name"]}
        spec = fast_copy(job.get("spec") or {})
        spec.pop("managedBy", None)
        copy = {
            "apiVersion": job["apiVersion"],
            "kind": job["kind"],
            "metadata": {
                "name": meta["name"],
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
            },
            "spec": spec,
        }
        store.create(RAYJOB_KEY, copy, namespace=namespace)

    def _remove_remote(self, group: Group, worker: str) -> None:
        """``RemoveRemoteObjects``: the RayJob if it is ours, then the Workload (its finalizer dropped)."""
        store, namespace = group.stores[worker], _ns(group.local)
        job = store.get_or_none(RAYJOB_KEY, group.owner, namespace=namespace)
        if job is not None and (job["metadata"].get("labels") or {}).get(ORIGIN_LABEL) == self.origin:
            delete_if_present(store, RAYJOB_KEY, group.owner, namespace)
        remote = group.remotes.get(worker)
        if remote is not None:
            finalizers = remote["metadata"].get("finalizers") or []
            if RESOURCE_IN_USE in finalizers:
                _mutate(
                    store,
                    remote,
                    lambda obj: obj["metadata"].update(
                        finalizers=[f for f in finalizers if f != RESOURCE_IN_USE]
                    ),
                    status=False,
                )
            delete_if_present(store, WORKLOAD_KEY, remote["metadata"]["name"], namespace)
        group.remotes[worker] = None

    def _update_check(self, wl: dict, check: dict, state: str, message: str) -> str:
        """``updateACS``: the message carries the previous state."""
        message = f'{message}, Previously: "{check.get("state", "")}"'
        self._write_check(wl, check, state, message)
        return message

    def _write_check(self, wl: dict, check: dict, state: str, message: str) -> None:
        now = self.clock.timestamp()
        _mutate(
            self.store,
            wl,
            lambda obj: set_state(obj, check["name"], state, message[:32768], now),
            status=True,
        )

    def _finish(self, wl: dict, reason: str, message: str) -> None:
        now = self.clock.timestamp()
        _mutate(
            self.store,
            wl,
            lambda obj: set_condition(obj, "Finished", "True", reason, message, now),
            status=True,
        )

    def _event(self, wl: dict, type_: str, message: str) -> None:
        record_event(self.store, wl, type_, "MultiKueue", message, COMPONENT)


# ---------------------------------------------------------------------------------------------- helpers


def _best_match(group: Group, condition: str) -> tuple[dict | None, str]:
    """``bestMatchByCondition``: the copy whose ``condition`` turned True first."""
    best: dict | None = None
    best_worker = ""
    for worker in sorted(group.remotes):
        remote = group.remotes[worker]
        found = find_condition(remote, condition) if remote is not None else None
        if found is None or found.get("status") != "True":
            continue
        if best is None or parse_time(found["lastTransitionTime"]) < parse_time(best["lastTransitionTime"]):
            best, best_worker = found, worker
    return best, best_worker


def _spec_out_of_sync(local: dict, remote: dict) -> bool:
    """``isRemoteSpecOutOfSync`` (preemption gates aside)."""

    def bare(spec: dict) -> dict:
        return {k: v for k, v in spec.items() if k != "preemptionGates"}

    return bare(local.get("spec") or {}) != bare(remote.get("spec") or {})


def priority_changed(local: dict, remote: dict) -> bool:
    """``workload.PriorityChanged(local, remote)``: only a WorkloadPriorityClass's, never a pod one's.

    >>> ref = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    >>> low = {"spec": {"priority": 1, "priorityClassRef": dict(ref, name="low")}}
    >>> priority_changed(low, {"spec": {"priority": 9, "priorityClassRef": ref}})
    True
    >>> priority_changed({"spec": {"priority": 1}}, {"spec": {"priority": 9}})
    False
    """
    local_ref = (local.get("spec") or {}).get("priorityClassRef") or {}
    remote_ref = (remote.get("spec") or {}).get("priorityClassRef") or {}
    if local_ref and not is_workload_priority_class(local_ref):
        return False
    if not remote_ref or not is_workload_priority_class(remote_ref):
        return False
    if remote_ref.get("name") and local_ref.get("name") != remote_ref.get("name"):
        return True
    return (local.get("spec") or {}).get("priority", 0) != (remote.get("spec") or {}).get("priority", 0)


def _copy_priority(obj: dict, local: dict) -> None:
    spec = local.get("spec") or {}
    for field_name in ("priorityClassRef", "priority"):
        if field_name in spec:
            obj["spec"][field_name] = fast_copy(spec[field_name])
        else:
            obj["spec"].pop(field_name, None)


def _set_status(obj: dict, status: dict | None) -> None:
    if status is None:
        obj.pop("status", None)
    else:
        obj["status"] = fast_copy(status)


def _ns(wl: dict) -> str:
    return wl["metadata"]["namespace"]


def _mutate(store, obj: dict, change: Callable[[dict], None], *, status: bool) -> dict | None:
    """Re-read, change, write if changed; None when the object is gone (a conflict raises, and the work
    queue retries the reconcile)."""
    meta = obj["metadata"]
    fresh = store.get_or_none(_key(obj), meta["name"], namespace=meta.get("namespace"))
    if fresh is None:
        return None
    updated = fast_copy(fresh)
    change(updated)
    if updated == fresh:
        return fresh
    return store.update(_key(obj), updated, subresource="status" if status else None)


def _key(obj: dict) -> str:
    return RAYJOB_KEY if obj.get("kind") == "RayJob" else WORKLOAD_KEY


def delete_if_present(store, key: str, name: str, namespace: str) -> None:
    try:
        store.delete(key, name, namespace=namespace)
    except ApiError as err:
        if err.code != 404:
            raise
