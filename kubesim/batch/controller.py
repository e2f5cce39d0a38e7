"""kube-controller-manager's Job controller for batch/v1 Jobs, with the kubelet that runs their pods.

Level-triggered, like the real one: every change of a Job or of a pod it owns puts the Job on a
de-duplicating queue, and one reconcile reads the Job and its pods and writes what follows:

* ``spec.suspend`` true: no pods (active ones are deleted) and ``Suspended=True`` / ``JobSuspended``;
  resuming sets ``Suspended=False`` / ``JobResumed`` and a fresh ``status.startTime``.
* otherwise ``parallelism`` pods at a time (at most the completions still missing), named
  ``<job>-<5 random>``, labelled from the template, owned by the Job; a failed pod is replaced after the
  Job controller's backoff (10 s, doubled per failure) until ``backoffLimit`` is exceeded, then
  ``FailureTarget`` and ``Failed`` / ``BackoffLimitExceeded``. Enough succeeded pods:
  ``SuccessCriteriaMet`` then ``Complete`` / ``CompletionsReached`` and ``completionTime`` (Kubernetes
  1.31 and later write both).
* ``status.active`` / ``ready`` / ``succeeded`` / ``failed`` count the pods.
* Events on the Job, reported by ``job-controller``: ``SuccessfulCreate`` "Created pod: <pod>",
  ``SuccessfulDelete`` "Deleted pod: <pod>", ``Suspended`` "Job suspended", ``Resumed`` "Job resumed",
  ``Completed`` "Job completed", Warning ``BackoffLimitExceeded`` with the condition's message.

Every Job is run so, KubeRay's submitter Job of a RayJob too. Pods go Pending → Running →
Succeeded/Failed through kubesim's scheduler and kubelet (``kubesim.kubelet``); what the container
does is a process: a program some controller module offers for it (``Cluster.container_programs``: the
ray CLI of the submitter, which follows the simulated Ray dashboard), else what its command line says
(``kubesim.batch.container``). The process dies with its pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable

from kubesim.batch.container import STARTUP, container_run
from kubesim.errors import ApiError
from kubesim.events import record_event
from kubesim.job_strategy import CONTROLLER_UID, JOBS
from kubesim.kubelet import Process, pending_pod_status, running_pod_status, schedule_pod
from kubesim.watch import WatchEvent
from kubesim.workqueue import Moments, Timers, WorkQueue

log = logging.getLogger("kubesim.batch")
COMPONENT = "job-controller"
"""The reporting component of the Job controller's Events, as kube-controller-manager names it."""

PODS = "pods"
BACKOFF_BASE = 10.0
Key = tuple[str, str]


def _condition(kind: str, status: str, reason: str, message: str, now: str) -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }


def _set_condition(conditions: list[dict], new: dict) -> bool:
    """``ensureJobConditionStatus``: True when the condition was added or its status changed."""
    for index, old in enumerate(conditions):
        if old["type"] == new["type"]:
            if old["status"] != new["status"]:
                conditions[index] = new
                return True
            return False
    conditions.append(new)
    return True


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase", "")


def finished_condition(job: dict) -> str | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return condition["type"]
    return None


class JobController:
    def __init__(self, cluster) -> None:
        self.store = cluster.store
        self.clock = cluster.clock
        self.logs = cluster.logs
        self.programs = cluster.container_programs
        self.timers = Timers(self.clock, log)
        self.call_after = self.timers.call_after  # what kubesim.kubelet needs, with write_status
        self.moments = Moments(self.clock)
        self.queue: WorkQueue[Key] = WorkQueue(lambda key: self.reconcile(*key), self.timers, log)
        self._processes: dict[str, asyncio.Task] = {}

    def install(self) -> None:
        """The Job strategy is the API server's (``Cluster`` registers it); nothing to install."""

    async def run(self) -> None:
        try:
            await self.queue.run(self.store, {JOBS: self._on_job, PODS: self._on_pod})
        finally:
            self.timers.close()
            for task in list(self._processes.values()):
                task.cancel()

    def _on_job(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        self.queue.enqueue((meta["namespace"], meta["name"]))

    def _on_pod(self, event: WatchEvent) -> None:
        meta = event.object["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") == "Job":
                if event.type == "DELETED":  # the kubelet kills the container and its log goes with it
                    self._kill(meta["uid"])
                    self.logs.forget(meta["namespace"], meta["name"])
                self.queue.enqueue((meta["namespace"], ref["name"]))

    def write_status(self, key: str, obj: dict, status: dict) -> dict:
        body = dict(obj)
        body["status"] = status
        return self.store.update(key, body, subresource="status")

    # -- the reconcile -----------------------------------------------------------------------------
    def reconcile(self, namespace: str, name: str) -> None:
        job = self.store.get_or_none(JOBS, name, namespace=namespace)
        if job is None:
            return
        meta = job["metadata"]
        if meta.get("deletionTimestamp"):
            return
        pods, _ = self.store.list(PODS, namespace=namespace, label_selector=f"{CONTROLLER_UID}={meta['uid']}")
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        active = [p for p in pods if _phase(p) not in ("Succeeded", "Failed")]
        succeeded = sum(1 for p in pods if _phase(p) == "Succeeded")
        failed = sum(1 for p in pods if _phase(p) == "Failed")
        spec = job["spec"]
        old = job.get("status") or {}
        status = copy.deepcopy(old)
        conditions = status.setdefault("conditions", [])
        now = self.clock.timestamp()
        events: list[tuple[str, str, str]] = []  # what recordJobFinished and the suspension record
        done = finished_condition(job)
        if done or spec.get("suspend"):
            for pod in active:
                self._delete_pod(pod, job)
            active = []
            if not done and _set_condition(
                conditions, _condition("Suspended", "True", "JobSuspended", "Job suspended", now)
            ):
                events.append(("Normal", "Suspended", "Job suspended"))
        else:
            suspended = next((c for c in conditions if c["type"] == "Suspended"), None)
            if suspended and suspended["status"] == "True":
                _set_condition(conditions, _condition("Suspended", "False", "JobResumed", "Job resumed", now))
                events.append(("Normal", "Resumed", "Job resumed"))
                status["startTime"] = now
            status.setdefault("startTime", now)
            completions = spec.get("completions")
            parallelism = int(spec.get("parallelism") or 0)
            if (completions is not None and succeeded >= completions) or (
                completions is None and succeeded and not active
            ):
                message = "Reached expected number of succeeded pods"
                for kind in ("SuccessCriteriaMet", "Complete"):
                    _set_condition(conditions, _condition(kind, "True", "CompletionsReached", message, now))
                status["completionTime"] = now
                events.append(("Normal", "Completed", "Job completed"))
            elif failed > int(spec.get("backoffLimit", 6)):
                message = "Job has reached the specified backoff limit"
                for kind in ("FailureTarget", "Failed"):
                    _set_condition(conditions, _condition(kind, "True", "BackoffLimitExceeded", message, now))
                events.append(("Warning", "BackoffLimitExceeded", message))
                for pod in active:
                    self._delete_pod(pod, job)
                active = []
            else:
                wanted = parallelism if completions is None else min(parallelism, completions - succeeded)
                missing = wanted - len(active)
                wait = self._backoff(pods, failed) if missing > 0 else 0.0
                if wait > 0:
                    self.queue.requeue_after((namespace, name), wait)
                else:
                    active += [self._create_pod(job) for _ in range(max(0, missing))]
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if _phase(p) == "Running")
        status["succeeded"] = succeeded
        status["failed"] = failed
        status["terminating"] = 0
        status.setdefault("uncountedTerminatedPods", {})
        for counter in ("active", "succeeded", "failed"):
            if status[counter] == 0:
                status.pop(counter)
        if not conditions:
            status.pop("conditions")
        if status != old:
            self.write_status(JOBS, job, status)
        for type_, reason, message in events:
            record_event(self.store, job, type_, reason, message, COMPONENT)

    def _backoff(self, pods: list[dict], failed: int) -> float:
        """Simulated seconds until a failed pod may be replaced: 10 s after the last failure, doubled."""
        if not failed:
            return 0.0
        finished = [
            (p["metadata"]["uid"], s["state"]["terminated"]["finishedAt"])
            for p in pods
            for s in (p.get("status") or {}).get("containerStatuses") or []
            if "terminated" in (s.get("state") or {})
        ]
        if not finished:
            return 0.0
        elapsed = min(self.moments.simulated_since(uid, "finishedAt", at) for uid, at in finished)
        return BACKOFF_BASE * 2 ** (failed - 1) - elapsed

    # -- pods ----------------------------------------------------------------------------------------
    def _create_pod(self, job: dict) -> dict:
        template = job["spec"]["template"]
        meta = template.get("metadata") or {}
        namespace = job["metadata"]["namespace"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": f"{job['metadata']['name']}-",
                "namespace": namespace,
                "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job["metadata"]["name"],
                        "uid": job["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        created = self.store.create(PODS, pod, namespace=namespace)
        record_event(
            self.store,
            job,
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {created['metadata']['name']}",
            COMPONENT,
        )
        created = self.write_status(PODS, created, pending_pod_status(created, self.clock.timestamp()))
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        schedule_pod(self, namespace, name, STARTUP, lambda: self._start(namespace, name, uid))
        return created

    def _current(self, namespace: str, name: str, uid: str, phase: str) -> dict | None:
        pod = self.store.get_or_none(PODS, name, namespace=namespace)
        if pod is None:
            return None
        if pod["metadata"]["uid"] != uid or pod["metadata"].get("deletionTimestamp") or _phase(pod) != phase:
            return None
        return pod

    def _start(self, namespace: str, name: str, uid: str) -> None:
        pod = self._current(namespace, name, uid, "Pending")
        if pod is None:
            return
        pod = self.write_status(PODS, pod, running_pod_status(pod, self.clock.timestamp()))
        container = (pod["spec"].get("containers") or [{}])[0]
        process = self._process(pod, container)

        def write_log(line: str) -> None:
            self.logs.append(namespace, name, container.get("name", ""), line)

        async def container_process() -> None:
            exit_code = 1
            try:
                exit_code = await process(write_log)
            except Exception:  # a crashing program is a container that exits non-zero, nothing worse
                log.exception("the container of pod %s/%s crashed", namespace, name)
            finally:
                self.logs.close(namespace, name)
            self._terminate(namespace, name, uid, exit_code)

        task = asyncio.get_running_loop().create_task(container_process())
        self._processes[uid] = task
        task.add_done_callback(lambda _: self._processes.pop(uid, None))

    def _process(self, pod: dict, container: dict) -> Process:
        """The program some controller module offers for this container, else its command line's."""
        for program in self.programs:
            process = program(pod, container)
            if process is not None:
                return process
        run = container_run(container)

        async def command(write_log: Callable[[str], None]) -> int:
            for line in run.output:
                write_log(line)
            await self.clock.sleep(run.seconds)
            return run.exit_code

        return command

    def _kill(self, uid: str) -> None:
        task = self._processes.pop(uid, None)
        if task:
            task.cancel()

    def _terminate(self, namespace: str, name: str, uid: str, exit_code: int) -> None:
        pod = self._current(namespace, name, uid, "Running")
        if pod is None:
            return
        now = self.moments.stamp(uid, "finishedAt")
        status = copy.deepcopy(pod.get("status") or {})
        status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        for condition in status.get("conditions") or []:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition.update({"status": "False", "reason": "PodCompleted", "lastTransitionTime": now})
        for container in status.get("containerStatuses") or []:
            started = (container.get("state") or {}).get("running", {}).get("startedAt", now)
            container.update(ready=False, started=False)
            container["state"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": now,
                }
            }
        self.write_status(PODS, pod, status)

    def _delete_pod(self, pod: dict, job: dict) -> None:
        meta = pod["metadata"]
        self._kill(meta["uid"])
        with contextlib.suppress(ApiError):
            self.store.delete(PODS, meta["name"], namespace=meta["namespace"])
            record_event(
                self.store, job, "Normal", "SuccessfulDelete", f"Deleted pod: {meta['name']}", COMPONENT
            )
        self.logs.close(meta["namespace"], meta["name"])
