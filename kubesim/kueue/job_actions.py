"""What Kueue does to a job: start it with its admission, stop it (restoring its pod templates).

Kueue's jobframework ``StartJob`` / ``StopJob``: the job reconcile (``job_sync``) starts and stops the job
it reconciles, an eviction stops the evicted Workload's job, an admission starts the admitted one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubesim.errors import ApiError
from kubesim.kueue import jobs, podset_info
from kubesim.kueue.conditions import JOB_COMPONENT, admission_of
from kubesim.kueue.jobs import BATCH_JOB, WORKLOAD_KEY, JobKind
from kubesim.kueue.writer import Writer

if TYPE_CHECKING:
    from kubesim.kueue.world import World


@dataclass(eq=False)
class JobActions:
    """Starts and stops jobs through the ``Writer``, with Kueue's events."""

    writer: Writer

    def start(self, kind: JobKind, job: dict, wl: dict, world: World) -> None:
        infos = podset_info.pod_set_infos(wl, world.flavors, (wl.get("spec") or {}).get("queueName", ""))
        started = self.writer.mutate(
            kind.key, job, lambda obj: obj.update(podset_info.start_job(kind, obj, infos)), status=False
        )
        if started is not None:
            cq = admission_of(wl)["clusterQueue"]
            self.writer.event(job, "Normal", "Started", f"Admitted by clusterQueue {cq}", JOB_COMPONENT)

    def stop(self, kind: JobKind, job: dict, wl: dict | None, message: str) -> None:
        original = ((wl or {}).get("spec") or {}).get("podSets") or []
        if kind is BATCH_JOB and wl is not None:
            self._stop_batch_job(job, original, message)
            return

        def change(obj: dict) -> None:
            if wl is None:
                jobs.set_suspend(kind, obj, True)
            else:
                obj.update(podset_info.stop_job(kind, obj, original))

        if self.writer.mutate(kind.key, job, change, status=False) is not None:
            self.writer.event(job, "Normal", "Stopped", message, JOB_COMPONENT)

    def _stop_batch_job(self, job: dict, original: list[dict], message: str) -> None:
        """A batch Job is stopped in three writes, as Kueue's Job integration does: the API server lets the
        pod template's scheduling fields change only while the Job is suspended and has no
        ``status.startTime``, so suspend it, clear ``startTime`` through the status subresource, then
        restore the template as the Workload recorded it."""
        mutate = self.writer.mutate
        suspended = mutate(
            BATCH_JOB.key, job, lambda obj: jobs.set_suspend(BATCH_JOB, obj, True), status=False
        )
        if suspended is None:
            return
        if not jobs.is_suspended(BATCH_JOB, job):
            self.writer.event(job, "Normal", "Stopped", message, JOB_COMPONENT)
        cleared = mutate(
            BATCH_JOB.key,
            suspended,
            lambda obj: (obj.get("status") or {}).pop("startTime", None),
            status=True,
        )
        if cleared is None:
            return
        mutate(
            BATCH_JOB.key,
            cleared,
            lambda obj: obj.update(podset_info.stop_job(BATCH_JOB, obj, original)),
            status=False,
        )

    def _owned_jobs(self, wl: dict):
        """(kind, job) of the Workload's controller owner of a kind Kueue integrates, read afresh."""
        for ref in wl["metadata"].get("ownerReferences") or []:
            kind = jobs.JOB_KINDS_BY_KIND.get(ref.get("kind"))
            if kind is None or not ref.get("controller"):
                continue
            try:
                job = self.writer.store.get(kind.key, ref["name"], namespace=wl["metadata"]["namespace"])
            except ApiError:
                continue
            yield kind, job

    def start_owner(self, admitted: dict, world: World) -> None:
        """The admitted Workload's job starts (unsuspended with the admission's pod set infos)."""
        for kind, job in self._owned_jobs(admitted):
            if jobs.is_suspended(kind, job):
                self.start(kind, job, admitted, world)

    def stop_owner(self, wl: dict, message: str) -> None:
        """The evicted Workload's job stops, its templates restored from the Workload as it is now."""
        store = self.writer.store
        for kind, job in self._owned_jobs(wl):
            fresh = store.get(WORKLOAD_KEY, wl["metadata"]["name"], namespace=wl["metadata"]["namespace"])
            if not jobs.is_suspended(kind, job):
                self.stop(kind, job, fresh, message)
