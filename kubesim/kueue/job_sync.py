"""Kueue's job integration: one Workload per managed job, and the job started, stopped or finished by it.

Step 1 of a Kueue controller pass (``kubesim.kueue.controller``), as Kueue's jobframework reconciler is one
controller: it creates, updates and finishes the job's Workload, releases an evicted Workload's quota once
the job stopped, and keeps its ``PodsReady`` condition. It writes through the ``Writer`` it is given and
starts or stops jobs through ``JobActions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubesim.errors import ApiError
from kubesim.kueue import jobs
from kubesim.kueue.conditions import (
    JOB_COMPONENT,
    MSG_ON_HOLD,
    MSG_PODS_NOT_READY,
    MSG_PODS_READY,
    MSG_PODS_RECOVERY,
    admission_of,
    condition_true,
    find_condition,
    is_evicting,
    is_finished,
    is_workload_priority_class,
    set_condition,
    sync_admitted,
    workload_priority_class_ref,
)
from kubesim.kueue.config import DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR
from kubesim.kueue.convert import resource_requests
from kubesim.kueue.job_actions import JobActions
from kubesim.kueue.jobs import BATCH_JOB, JOB_KINDS, WORKLOAD_KEY, JobKind
from kubesim.kueue.world import World, int_or_zero
from kubesim.kueue.writer import Writer
from kubesim.selectors import match_label_selector_obj

if TYPE_CHECKING:
    from kubesim.kueue.cache import ClusterView
    from kubesim.kueue.equivalence import Parked


@dataclass(eq=False)
class JobSync:
    """Step 1 of a pass: reconcile each changed job with its Workload.

    ``seq`` (uid -> creation order) and ``parked`` are the controller's, shared with the admission cycle:
    a Workload created here gets its place, and a change that may make a parked Workload admissible
    requeues them all.
    """

    writer: Writer
    view: ClusterView
    actions: JobActions
    seq: dict[str, int]
    parked: Parked
    frameworks: frozenset[str]
    namespace_selector: dict = field(default_factory=lambda: dict(DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR))
    """``managedJobsNamespaceSelector``: jobs elsewhere are not reconciled at all."""
    warned: set[tuple[str, str]] = field(default_factory=set, init=False)
    """(job uid, error) already reported: a Workload that cannot be composed is told once."""
    _managed_namespaces: tuple[World | None, frozenset[str]] = field(default=(None, frozenset()), init=False)

    def reconcile(self, world: World, dirty: set[tuple[str, str, str]], full: bool) -> None:
        """The jobs in ``dirty`` (key, namespace, name), or every job on a ``full`` pass, in creation order."""
        index = self.view.index
        for kind in JOB_KINDS.values():
            if full:
                items = self.view.items(kind.key)
            else:
                found = (self.view.get(key, ns, name) for key, ns, name in dirty if key == kind.key)
                items = [job for job in found if job is not None]
            items.sort(
                key=lambda job: self.seq.get(
                    job["metadata"]["uid"], int_or_zero(job["metadata"].get("resourceVersion"))
                )
            )
            managed_namespaces = self._selected_namespaces(world)
            for job in items:
                if job["metadata"].get("deletionTimestamp") or job["metadata"]["namespace"] not in (
                    managed_namespaces
                ):
                    continue
                if jobs.is_managed(kind, job, self.frameworks, self._owner_of):
                    self._reconcile_job(kind, job, index.owned_by(job["metadata"]["uid"]), world)
                elif kind is BATCH_JOB and kind.framework in self.frameworks:
                    self._suspend_child_without_admitted_ancestor(job)

    def _selected_namespaces(self, world: World) -> frozenset[str]:
        """The namespaces ``namespace_selector`` selects, by their labels (once per configuration read)."""
        if self._managed_namespaces[0] is not world:
            selected = frozenset(
                name
                for name, labels in world.namespace_labels.items()
                if match_label_selector_obj(self.namespace_selector, labels)
            )
            self._managed_namespaces = (world, selected)
        return self._managed_namespaces[1]

    def _suspend_child_without_admitted_ancestor(self, job: dict) -> None:
        """``shouldSuspendChildJob``: a Job under a queue-labelled job Kueue manages (KubeRay's submitter
        Job under its RayJob) that is neither finished nor suspended is suspended once that ancestor has
        no unfinished Workload (it finished) or its Workload is not admitted."""
        if jobs.is_suspended(BATCH_JOB, job) or jobs.finished(BATCH_JOB, job)[0]:
            return
        found, ancestor = jobs.find_managed_ancestor(job, self._owner_of, self.frameworks)
        if not found or ancestor is None:
            return
        wl = self.view.index.owned_by(ancestor["metadata"]["uid"])
        if wl is not None and not is_finished(wl) and condition_true(wl, "Admitted"):
            return
        suspended = self.writer.mutate(
            BATCH_JOB.key, job, lambda obj: obj["spec"].update(suspend=True), status=False
        )
        if suspended is not None:
            self.writer.event(job, "Normal", "Suspended", "Kueue managed child job suspended", JOB_COMPONENT)

    def _owner_of(self, kind: JobKind, namespace: str, name: str) -> dict | None:
        return self.view.get(kind.key, namespace, name)

    def _reconcile_job(self, kind: JobKind, job: dict, wl: dict | None, world: World) -> None:
        done, reason, message = jobs.finished(kind, job)
        prebuilt = jobs.prebuilt_workload_name(job)
        if prebuilt and wl is None:
            wl = self._adopt_prebuilt(kind, job, prebuilt)
            if wl is None:  # ``handleJobWithNoWorkload``: never a Workload of its own
                if not done and not jobs.is_suspended(kind, job):
                    self.actions.stop(kind, job, None, "missing workload")
                return
        if wl is None:
            if done:
                return
            if jobs.is_active(kind, job):
                if not jobs.is_suspended(kind, job):
                    self.actions.stop(kind, job, None, "Not admitted by cluster queue")
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
        self._sync_pods_ready(kind, job, wl)
        if admission_of(wl) is None:
            self._sync_queued_workload(kind, job, wl, world)
            if not jobs.is_suspended(kind, job):
                self.actions.stop(kind, job, wl, "Not admitted by cluster queue")
        elif is_evicting(wl):
            evicted = find_condition(wl, "Evicted") or {}
            if not jobs.is_suspended(kind, job):
                self.actions.stop(kind, job, wl, evicted.get("message", ""))
            elif not jobs.is_active(kind, job):
                self._release(wl)
        elif condition_true(wl, "Admitted") and jobs.is_suspended(kind, job):
            self.actions.start(kind, job, wl, world)  # quota reserved and every admission check Ready

    def _adopt_prebuilt(self, kind: JobKind, job: dict, name: str) -> dict | None:
        """``ensureOneWorkload`` for a job naming a prebuilt Workload (MultiKueue's copy on a worker): the
        Workload of that name, made controlled by the job (``EnsurePrebuiltWorkloadOwnership``, with the
        job-uid label), or None while it does not exist or another object controls it. One that no longer
        matches the job is finished ``OutOfSync`` (``ensurePrebuiltWorkloadInSync``)."""
        meta = job["metadata"]
        wl = self.view.get(WORKLOAD_KEY, meta["namespace"], name)
        if wl is None:
            return None
        owner = next(
            (ref for ref in wl["metadata"].get("ownerReferences") or [] if ref.get("controller")), None
        )
        if owner is not None and owner.get("uid") != meta["uid"]:
            return None
        if owner is None:
            reference = jobs.build_workload(kind, job, priority=0, priority_class=None)["metadata"]

            def adopt(obj: dict) -> None:
                obj["metadata"].setdefault("ownerReferences", []).extend(reference["ownerReferences"])
                obj["metadata"].setdefault("labels", {}).update(reference["labels"])

            wl = self.writer.mutate(WORKLOAD_KEY, wl, adopt, status=False)
            if wl is None:
                return None
        if not is_finished(wl) and not jobs.equivalent_to_workload(kind, job, wl):
            now = self.writer.clock.timestamp()
            message = "The prebuilt workload is out of sync with its user job"
            self.writer.mutate(
                WORKLOAD_KEY,
                wl,
                lambda obj: set_condition(obj, "Finished", "True", "OutOfSync", message, now),
                status=True,
            )
            return None
        return wl

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

            if self.writer.mutate(WORKLOAD_KEY, wl, change, status=False) is not None:
                message = f"Updated not matching Workload for suspended job: {where}"
                self.writer.event(job, "Normal", "UpdatedWorkload", message, JOB_COMPONENT)
            return
        if not jobs.is_suspended(kind, job):
            message = "No matching Workload; restoring pod templates according to existent Workload"
            self.actions.stop(kind, job, wl, message)
        try:
            self.writer.store.delete(WORKLOAD_KEY, meta["name"], namespace=meta["namespace"])
        except ApiError as err:
            if err.code != 404:
                raise
            return
        self.writer.event(
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
                self.writer.event(job, "Warning", "ErrWorkloadCompose", error, JOB_COMPONENT)
            return
        wl = jobs.build_workload(kind, job, priority=priority, priority_class=class_name)
        try:
            created = self.writer.store.create(WORKLOAD_KEY, wl, namespace=job["metadata"]["namespace"])
        except ApiError as err:
            if err.code == 409:
                return
            raise
        meta = created["metadata"]
        self.seq.setdefault(meta["uid"], int_or_zero(meta.get("resourceVersion")))
        self.writer.event(
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
        self.writer.mutate(WORKLOAD_KEY, wl, lambda obj: obj["spec"].update(queueName=queue), status=False)

    def _sync_workload_priority(self, job: dict, wl: dict, world: World) -> None:
        """A relabelled ``kueue.x-k8s.io/priority-class`` reaches the job's Workload, queued or holding quota.

        As Kueue's job reconciler does, only a change of class name is acted on (a class's new value reaches
        its Workloads through `sync_priority_classes`). A Workload that reserved quota without a class
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

        updated = self.writer.mutate(WORKLOAD_KEY, wl, change, status=False)
        if updated is None:
            return
        meta = updated["metadata"]
        self.writer.event(
            job,
            "Normal",
            "UpdatedWorkload",
            f"Updated workload priority class: {meta['namespace']}/{meta['name']}",
            JOB_COMPONENT,
        )
        # A new priority may make a parked workload admissible, or an admitted one preemptible.
        self.parked.clear()

    def sync_priority_classes(self, world: World, dirty: set[str]) -> None:
        """Kueue's WorkloadPriorityClass controller: a class's value reaches every Workload that names it.

        Runs for the classes created or changed since the last pass (``dirty``). Admitted Workloads follow
        too, so the next preemption sees the new value; a parked one is retried, as after any configuration
        change.
        """
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
                self.writer.mutate(
                    WORKLOAD_KEY, wl, lambda obj, v=value: obj["spec"].update(priority=v), status=False
                )

    def _finish(self, kind: JobKind, job: dict, wl: dict, reason: str, message: str) -> None:
        now = self.writer.clock.timestamp()
        self.writer.mutate(
            WORKLOAD_KEY,
            wl,
            lambda obj: set_condition(obj, "Finished", "True", reason, message, now),
            status=True,
        )
        name = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
        self.writer.event(
            job, "Normal", "FinishedWorkload", f"Workload '{name}' is declared finished", JOB_COMPONENT
        )
        self.parked.clear()

    def _hold(self, wl: dict) -> None:
        now = self.writer.clock.timestamp()

        def change(obj: dict) -> None:
            obj.get("status", {}).pop("admission", None)
            set_condition(obj, "QuotaReserved", "False", "OnHold", MSG_ON_HOLD, now)
            sync_admitted(obj, now)

        self.writer.mutate(WORKLOAD_KEY, wl, change, status=True)
        self.parked.clear()

    def _release(self, wl: dict) -> None:
        """The evicted job stopped: clear the reservation and put the Workload back in its queue."""
        now = self.writer.clock.timestamp()
        evicted = find_condition(wl, "Evicted") or {}
        reason, message = evicted.get("reason", ""), evicted.get("message", "")

        def change(obj: dict) -> None:
            # Kueue's order: Requeued first, then UnsetQuotaReservationWithCondition (QuotaReserved,
            # the admission, SyncAdmittedCondition). PodsReady follows on the next job reconcile.
            status = obj.setdefault("status", {})
            requeued = "True" if reason in ("Preempted", "NodeFailures") else "False"
            set_condition(obj, "Requeued", requeued, reason, message, now)
            status.pop("admission", None)
            set_condition(obj, "QuotaReserved", "False", "Pending", message, now)
            sync_admitted(obj, now)
            status["resourceRequests"] = resource_requests(obj)

        self.writer.mutate(WORKLOAD_KEY, wl, change, status=True)
        self.parked.clear()

    def _sync_pods_ready(self, kind: JobKind, job: dict, wl: dict) -> None:
        """The job reconciler's ``PodsReady`` (waitForPodsReady is always on with Kueue's v1beta2 config):
        written whenever its (status, reason) differs from ``pods_ready_condition``, for every Workload
        that is not finished or on hold, queued ones included."""
        status, reason, message = pods_ready_condition(
            condition_true(wl, "Admitted"), jobs.pods_ready(kind, job), find_condition(wl, "PodsReady")
        )
        current = find_condition(wl, "PodsReady") or {}
        if (current.get("status"), current.get("reason")) == (status, reason):
            return
        now = self.writer.clock.timestamp()
        self.writer.mutate(
            WORKLOAD_KEY,
            wl,
            lambda obj: set_condition(obj, "PodsReady", status, reason, message, now),
            status=True,
        )


def pods_ready_condition(admitted: bool, ready: bool, previous: dict | None) -> tuple[str, str, str]:
    """``generatePodsReadyCondition``: (status, reason, message) of a Workload's ``PodsReady``.

    >>> pods_ready_condition(False, False, None)
    ('False', 'WaitForStart', 'Not all pods are ready or succeeded')
    >>> pods_ready_condition(True, False, {"status": "True", "reason": "Started"})[1]
    'WaitForRecovery'
    >>> pods_ready_condition(True, True, {"status": "False", "reason": "WaitForRecovery"})[1]
    'Recovered'
    """
    if not admitted:  # not admitted yet, or evicted and released
        return "False", "WaitForStart", MSG_PODS_NOT_READY
    previous = previous or {}
    if ready:
        recovering = previous.get("reason") in ("WaitForRecovery", "Recovered")
        return "True", "Recovered" if recovering else "Started", MSG_PODS_READY
    if previous.get("status") == "True" or previous.get("reason") == "WaitForRecovery":
        return "False", "WaitForRecovery", MSG_PODS_RECOVERY
    return "False", "WaitForStart", MSG_PODS_NOT_READY
