"""When to stop waiting: what the triggers, the operators and the sensor share.

The ``Watchdog`` judges every observation by the task's ``kueue_ray.wait_policy.WaitPolicy``; ``WaitTarget``
is the RayJob a task waits for, and the helpers here put verdicts, transitions and event payloads in
words. Pure: the wait that reads the cluster is the trigger's (``kueue_ray.trigger``) or, in a worker
slot, ``kueue_ray.worker_wait.WorkerWait``.

Importing this module does not import ``kubernetes`` or Airflow's trigger machinery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol

from kueue_ray.kube.api import parse_time, utcnow
from kueue_ray.naming import QUEUE_LABEL
from kueue_ray.narration import name_preemptor, preemptor_job_uid, readable_quantities
from kueue_ray.phases import ADMITTED_PHASES, EVICTION_PHASES, POSITION_PHASES, WAITING_PHASES, Phase
from kueue_ray.status import Observation, observe, pods_not_ready_hint
from kueue_ray.timeline import Timeline, to_epoch
from kueue_ray.verdicts import Verdict, VerdictStatus
from kueue_ray.wait_policy import WaitPolicy
from kueue_ray.wait_step import WaitKind
from kueue_ray.workload import PODS_READY_TIMEOUT, admitted_since, owner_deleted, quota_lost_since


@dataclass(slots=True)  # a triggerer holds one per waiting task
class Watchdog:
    """When to stop waiting for a RayJob: pure rules shared by the trigger, the operator's worker wait and
    the sensor. ``ServiceWatchdog`` judges a RayService by the same rules and its own phases.

    Each clock measures what its name in ``WaitPolicy`` says, preferring the Workload's condition timestamps
    so that a triggerer restart does not reset it.
    """

    policy: WaitPolicy
    submitted_at: datetime
    inadmissible_since: datetime | None = None
    waiting_since: datetime | None = None
    admitted_since: datetime | None = None
    pods_ready_timeout: float | None = None
    """Kueue's waitForPodsReady timeout as last seen on the Workload (for the give-up message)."""
    offset_s: float = 0.0
    """The API server's clock minus this process's (``kueue_ray.kube.server_clock``): ``now`` is on the server's
    clock, like the timestamps the clocks start from; the execution deadline is on Airflow's."""

    waiting_phases: ClassVar[frozenset] = WAITING_PHASES
    """The queue clock runs in these."""
    admitted_phases: ClassVar[frozenset] = ADMITTED_PHASES
    """The clock of ``admitted_limit`` runs in these."""
    inadmissible_phase: ClassVar[Any] = Phase.INADMISSIBLE
    admitted_limit: ClassVar[str] = "run_timeout"
    """The ``WaitPolicy`` field limiting the time since admission."""

    def check(self, observation: Any, workload: dict | None, now: datetime) -> Verdict | None:
        """A Verdict when waiting is over, None to keep waiting."""
        lost_quota_at, admitted_at = self.admission_times(observation, workload, now)
        self._track(observation, now, lost_quota_at, admitted_at)
        policy, phase = self.policy, observation.phase
        if observation.terminal:
            return Verdict(
                VerdictStatus.SUCCESS if self.succeeded(observation) else VerdictStatus.FAILED,
                observation.reason,
                observation.message,
            )
        deadline = parse_time(policy.deadline)
        if deadline is not None and now >= deadline + timedelta(seconds=self.offset_s):
            return Verdict(
                VerdictStatus.EXECUTION_TIMEOUT,
                "ExecutionTimeout",
                f"execution_timeout passed at {policy.deadline} while it was {observation.phase.value}: "
                f"{observation.describe()}",
            )
        if policy.max_preemptions is not None and observation.preemptions > policy.max_preemptions:
            return Verdict(
                VerdictStatus.TOO_MANY_PREEMPTIONS,
                "MaxPreemptionsExceeded",
                f"preempted {observation.preemptions} times, more than "
                f"max_preemptions={policy.max_preemptions}; Kueue says: {observation.describe()}",
            )
        limit = policy.max_pods_ready_evictions
        if limit is not None and observation.pods_ready_evictions > limit:
            return Verdict(
                VerdictStatus.PODS_NOT_READY,
                PODS_READY_TIMEOUT,
                f"{pods_not_ready_hint(self.pods_ready_timeout)}. Kueue evicted it "
                f"{observation.pods_ready_evictions} times because its pods did not all become ready "
                f"(PodsReadyTimeout), more than max_pods_ready_evictions={limit}; Kueue says: "
                f"{observation.describe()}",
            )
        # _track above started the clock of the phase each rule below reads
        if phase is self.inadmissible_phase and policy.fail_on_inadmissible:
            assert self.inadmissible_since is not None
            waited = (now - self.inadmissible_since).total_seconds()
            if waited >= policy.inadmissible_grace:
                return Verdict(
                    VerdictStatus.INADMISSIBLE,
                    observation.reason,
                    f"Kueue cannot admit it: {observation.message} (unchanged for {waited:.0f}s, "
                    f"inadmissible_grace={policy.inadmissible_grace:g}s)",
                )
        if phase in self.waiting_phases and policy.queue_timeout is not None:
            assert self.waiting_since is not None
            waited = (now - self.waiting_since).total_seconds()
            if waited >= policy.queue_timeout:
                return Verdict(
                    VerdictStatus.QUEUE_TIMEOUT,
                    "QueueTimeout",
                    f"not admitted within queue_timeout={policy.queue_timeout:g}s (waiting since "
                    f"{self.waiting_since.isoformat()}); Kueue says: {observation.describe()}",
                )
        limit = getattr(policy, self.admitted_limit)
        if self._run_clock_runs(observation) and limit is not None:
            assert self.admitted_since is not None
            elapsed = (now - self.admitted_since).total_seconds()
            if elapsed >= limit:
                return self.overdue(observation, elapsed)
        return None

    def admission_times(
        self, observation: Any, workload: dict | None, now: datetime
    ) -> tuple[datetime | None, datetime | None]:
        """When the Workload lost (or never got) its quota, and when it was admitted, from its conditions."""
        return parse_time(quota_lost_since(workload)), parse_time(admitted_since(workload))

    def succeeded(self, observation: Any) -> bool:
        """Whether a terminal observation is what the task waited for."""
        return observation.phase is Phase.SUCCEEDED

    def overdue(self, observation: Any, elapsed: float) -> Verdict:
        """The verdict when the time since admission exceeds ``admitted_limit``."""
        assert self.admitted_since is not None  # check() asks only while the admitted clock runs
        return Verdict(
            VerdictStatus.RUN_TIMEOUT,
            "RunTimeout",
            f"still {observation.phase.value} {elapsed:.0f}s after its last admission at "
            f"{self.admitted_since.isoformat()} (run_timeout={self.policy.run_timeout:g}s)",
        )

    def seconds_until_next_deadline(self, now: datetime) -> float | None:
        """How long one may wait for the next change before a deadline needs checking."""
        policy = self.policy
        admitted_limit = getattr(policy, self.admitted_limit)
        deadlines = []
        if (deadline := parse_time(policy.deadline)) is not None:
            deadlines.append(deadline.timestamp() + self.offset_s)
        if self.inadmissible_since is not None and policy.fail_on_inadmissible:
            deadlines.append(self.inadmissible_since.timestamp() + policy.inadmissible_grace)
        if self.waiting_since is not None and policy.queue_timeout is not None:
            deadlines.append(self.waiting_since.timestamp() + policy.queue_timeout)
        if self.admitted_since is not None and admitted_limit is not None:
            deadlines.append(self.admitted_since.timestamp() + admitted_limit)
        return max(0.0, min(deadlines) - now.timestamp()) if deadlines else None

    def _run_clock_runs(self, observation: Any) -> bool:
        """Admitted; or evicted on a MultiKueue manager, where the quota stays held while the worker's copy is
        out of reach (``kueue_ray.status``, rule 5): nothing there may ever release it, so the run clock
        goes on rather than the wait waiting for ever."""
        if observation.phase in self.admitted_phases:
            return True
        return bool(getattr(observation, "multikueue", False)) and observation.phase in EVICTION_PHASES

    def _track(
        self, observation: Any, now: datetime, lost_quota_at: datetime | None, admitted_at: datetime | None
    ) -> None:
        phase = observation.phase
        if observation.pods_ready_timeout:
            self.pods_ready_timeout = observation.pods_ready_timeout
        if phase in self.waiting_phases:
            self.admitted_since = None
            if self.waiting_since is None:
                self.waiting_since = max(self.submitted_at, lost_quota_at or self.submitted_at)
        elif self._run_clock_runs(observation):
            self.waiting_since = None
            if self.admitted_since is None:
                self.admitted_since = admitted_at or now
        else:  # evicted (quota being released) or terminal: neither clock runs
            self.waiting_since = None
            self.admitted_since = None
        if phase is not self.inadmissible_phase:
            self.inadmissible_since = None
        elif self.inadmissible_since is None:
            self.inadmissible_since = now


def event_payload(
    verdict: Verdict,
    observation: Observation | None,
    timeline: Timeline,
    *,
    name: str,
    namespace: str,
    uid: str,
    **extra: Any,
) -> dict[str, Any]:
    """The TriggerEvent payload (also what the worker-side wait and the sensor produce): JSON only.

    ``extra`` carries context the resumed task wants back (e.g. queue and priority).
    """
    payload: dict[str, Any] = {
        "status": str(verdict.status),  # the plain value, as JSON and the task log show it
        "reason": verdict.reason,
        "message": verdict.message,
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "phase": observation.phase.value if observation else None,
        "timeline": timeline.to_dict(),
        **extra,
    }
    if observation is not None:
        payload.update(
            cluster_queue=observation.cluster_queue,
            workload_name=observation.workload_name,
            job_id=observation.job_id,
            ray_cluster=observation.ray_cluster,
            dashboard_url=observation.dashboard_url,
            preemptions=observation.preemptions,
            pods_ready_evictions=observation.pods_ready_evictions,
            failed_attempts=observation.failed_attempts,
            worker_cluster=observation.worker_cluster,
        )
    return payload


def deleted_verdict(kind: str, namespace: str, name: str, uid: str, what: str) -> Verdict:
    """The verdict for an object deleted under a waiting task (``what``: when, e.g. "before it finished")."""
    return Verdict(
        VerdictStatus.DELETED, f"{kind}Deleted", f"{kind} {namespace}/{name} (uid {uid}) was deleted {what}"
    )


def access_verdict(ended: BaseException) -> Verdict:
    """The verdict for a wait that can no longer read the cluster (``kueue_ray.kube.refusals.RefusedTooLong``
    or ``ApiNotServed``); its message is the whole explanation."""
    from kueue_ray.kube.refusals import ApiNotServed

    if isinstance(ended, ApiNotServed):
        return Verdict(VerdictStatus.API_NOT_SERVED, "ApiNotServed", ended.message)
    return Verdict(VerdictStatus.REFUSED, "Refused", str(ended))


def describe_flavors(flavors: Mapping[str, Mapping[str, str]]) -> str:
    """The flavors Kueue assigned, per pod set, in words.

    >>> describe_flavors({"head": {"cpu": "default", "nvidia.com/gpu": "gpu"}, "submitter": {"cpu": "default"}})
    'head on default and gpu, submitter on default'
    """
    return ", ".join(
        f"{pod_set} on {' and '.join(sorted(set(assigned.values())))}"
        for pod_set, assigned in flavors.items()
    )


def describe_transition(
    namespace: str, name: str, observation: Observation, position: str | None, preemptor: dict | None = None
) -> str:
    """One task-log line for a transition, quoting Kueue / KubeRay: memory in readable units, and the
    preemptor RayJob (when known) named next to the UIDs Kueue gives (``kueue_ray.narration``)."""
    told = readable_quantities(name_preemptor(observation.describe(), preemptor))
    line = f"RayJob {namespace}/{name}: {told}"
    if observation.phase is Phase.ADMITTED and observation.flavors:
        line += (
            f" [ClusterQueue {observation.cluster_queue}; flavors: {describe_flavors(observation.flavors)}]"
        )
    where = f" in worker cluster {observation.worker_cluster}" if observation.worker_cluster else ""
    if observation.phase is Phase.RUNNING and observation.job_id:
        line += f" [Ray job {observation.job_id} on RayCluster {observation.ray_cluster}{where}]"
    elif observation.phase in (Phase.RUNNING, Phase.RETRYING) and where:
        line += f" [{where.strip()}]"
    return line + so_far(observation.preemptions, position)


def so_far(preemptions: int, position: str | None) -> str:
    """The tail every transition line ends with (RayJobs and RayServices alike): how often the object was
    preempted, and its place in the queue.

    >>> so_far(2, "position 3 in LocalQueue team-a"), so_far(0, None)
    (' [preempted 2x so far] — position 3 in LocalQueue team-a', '')
    """
    tail = f" [preempted {preemptions}x so far]" if preemptions else ""
    return f"{tail} — {position}" if position else tail


@dataclass(frozen=True)
class WaitTarget:
    """The RayJob a task waits for, and what its event payload carries back to the task."""

    name: str
    namespace: str
    uid: str
    queue: str | None = None
    priority: str | None = None
    submitted_at: str | None = None
    """ISO time of submission (the queue clock's start); None: now."""

    def payload(self, verdict: Verdict, observation: Observation | None, timeline: Timeline) -> dict:
        return event_payload(verdict, observation, timeline, **waited_for(self))

    def watchdog(self, policy: WaitPolicy) -> Watchdog:
        return Watchdog(policy, parse_time(self.submitted_at) or utcnow())

    def timeline(self, data: dict[str, Any] | None) -> Timeline:
        """The timeline a deferred wait continues (``data``: the one the task deferred with, if any)."""
        timeline = Timeline.from_dict(data)
        if timeline.submitted_at is None and self.submitted_at:
            timeline.submitted_at = to_epoch(self.submitted_at)
        return timeline

    def queue_of(self, rayjob: dict) -> str | None:
        """The LocalQueue the RayJob waits in: the task's, else the RayJob's label."""
        return self.queue or ((rayjob.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)

    def kind(self) -> WaitKind:
        """How a wait step (``kueue_ray.wait_step``) observes, times, words and reports this RayJob.

        Module functions and this target's bound methods, no closures: a triggerer holds one per waiting
        task (10,000 of them)."""
        return WaitKind(
            observe=observe,
            gone=_rayjob_gone,
            deleted=deleted_verdict("RayJob", self.namespace, self.name, self.uid, "before it finished"),
            workload=_same,
            record=_record,
            describe=self.describe,
            payload=self.payload,
            queue_of=self.queue_of,
            position_phases=POSITION_PHASES,
            preemptor_uid=_preemptor_uid,
            clock_verdicts=CLOCK_VERDICTS,
            watchdog=self.watchdog,
            timeline=self.timeline,
        )

    def describe(self, observation: Observation, position: str | None, preemptor: dict | None) -> str:
        """The transition line of this RayJob (``describe_transition``)."""
        return describe_transition(self.namespace, self.name, observation, position, preemptor)


def _rayjob_gone(rayjob: dict | None, workload: dict | None) -> bool:
    return rayjob is None or owner_deleted(workload)


def _same(workload: dict | None) -> dict | None:
    return workload


def _record(timeline: Timeline, observation: Observation, now: datetime) -> list[str]:
    timeline.record(observation, now)
    return []


def _preemptor_uid(observation: Observation) -> str | None:
    return preemptor_job_uid(observation.message)


CLOCK_VERDICTS = frozenset(
    {
        VerdictStatus.INADMISSIBLE,
        VerdictStatus.QUEUE_TIMEOUT,
        VerdictStatus.RUN_TIMEOUT,
        VerdictStatus.EXECUTION_TIMEOUT,
    }
)
"""Verdicts a clock gives (not a state): a wait confirms them on a fresh read before it ends."""


class Waited(Protocol):
    """What ``waited_for`` reads of a target (``WaitTarget``, ``service_waiting.ServiceTarget``): read-only,
    so frozen dataclasses satisfy it."""

    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def priority(self) -> str | None: ...


def waited_for(target: Waited) -> dict[str, Any]:
    """What a wait's event payload names its object and queue by (RayJobs and RayServices alike)."""
    return {
        "name": target.name,
        "namespace": target.namespace,
        "uid": target.uid,
        "queue": target.queue,
        "priority": target.priority,
    }
