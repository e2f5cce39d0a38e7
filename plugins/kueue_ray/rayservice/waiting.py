"""Waiting for a RayService: the RayJob wait's rules (``kueue_ray.waiting``) judged on a RayService's phases.

Shared by ``RayServiceTrigger`` (in the triggerer) and the deploy operator's wait in a worker slot
(``ServiceWorkerWait``), so both tell the same story and stop for the same reasons. Importing it does not
import ``kubernetes``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from kueue_ray.kube.api import parse_time, utcnow
from kueue_ray.kube.server_clock import server_clock
from kueue_ray.phases import (
    SERVICE_POSITION_PHASES,
    STARTING_SERVICE_PHASES,
    WAITING_SERVICE_PHASES,
    ServicePhase,
)
from kueue_ray.rayservice.status import (
    ServiceObservation,
    observe_service,
)
from kueue_ray.timeline import to_epoch, to_iso
from kueue_ray.verdicts import Verdict, VerdictStatus
from kueue_ray.wait_policy import WaitPolicy
from kueue_ray.wait_step import Read, WaitKind, WaitState, wait_step
from kueue_ray.waiting import Watchdog, deleted_verdict, describe_flavors, so_far, waited_for
from kueue_ray.workload import EVICTED_BY_PREEMPTION

if TYPE_CHECKING:
    from kueue_ray.rayservice.hook import RayServiceHook


@dataclass(slots=True)
class ServiceWatchdog(Watchdog):
    """``Watchdog``'s rules for a RayService: the queue clock runs until its target cluster is admitted, and
    ``ready_timeout`` from that admission until it serves. Its observation carries the times the rules need
    (``check`` takes no Workload)."""

    waiting_phases: ClassVar[frozenset] = WAITING_SERVICE_PHASES
    admitted_phases: ClassVar[frozenset] = STARTING_SERVICE_PHASES
    inadmissible_phase: ClassVar[Any] = ServicePhase.INADMISSIBLE
    admitted_limit: ClassVar[str] = "ready_timeout"

    def admission_times(
        self, observation: ServiceObservation, workload: dict | None, now: datetime
    ) -> tuple[datetime | None, datetime | None]:
        # A preempted cluster waits again from now; the admission is the target cluster's.
        return (now if observation.preemptions else None), parse_time(observation.admitted_at)

    def succeeded(self, observation: ServiceObservation) -> bool:
        return observation.serving

    def overdue(self, observation: ServiceObservation, elapsed: float) -> Verdict:
        return Verdict(
            VerdictStatus.READY_TIMEOUT,
            "ReadyTimeout",
            f"admitted {elapsed:.0f}s ago and not serving yet (ready_timeout={self.policy.ready_timeout:g}s); "
            f"{observation.describe()}",
        )


@dataclass
class ServiceTimeline:
    """What happened while waiting for a RayService, JSON-round-trippable like the RayJob ``Timeline``."""

    submitted_at: float | None = None
    admissions: list[dict] = field(default_factory=list)
    """[{"at", "cluster", "cluster_queue"}], one per admission of a target cluster."""
    preemptions: list[dict] = field(default_factory=list)
    """[{"at", "cluster", "message"}], one per preemption Kueue counted."""
    serving_at: float | None = None
    finished_at: float | None = None
    final_phase: str | None = None
    queued_seconds: float = 0.0
    starting_seconds: float = 0.0
    """Admitted, cluster starting and Serve deploying, until serving."""
    phase: str | None = None
    last_observed_at: float | None = None
    preemption_count: int = 0
    admitted_key: str | None = None

    def record(self, observation: ServiceObservation, at: datetime) -> None:
        now = to_epoch(at)
        if self.submitted_at is None:
            self.submitted_at = now
        if self.phase is None:
            self._catch_up(observation, now)
        if self.phase is not None and self.last_observed_at is not None:
            spent = max(0.0, now - self.last_observed_at)
            previous = ServicePhase(self.phase)
            if previous in WAITING_SERVICE_PHASES:
                self.queued_seconds += spent
            elif previous in STARTING_SERVICE_PHASES:
                self.starting_seconds += spent
        phase = observation.phase
        if phase in STARTING_SERVICE_PHASES:
            key = f"{observation.workload_name}@{observation.admitted_at}"
            if key != self.admitted_key:
                self.admitted_key = key
                self.admissions.append(
                    {
                        "at": observation.admitted_at or to_iso(now),
                        "cluster": observation.target_cluster,
                        "cluster_queue": observation.cluster_queue,
                    }
                )
        elif phase in WAITING_SERVICE_PHASES:
            self.admitted_key = None
        while observation.preemptions > self.preemption_count:
            self.preemption_count += 1
            self.preemptions.append(
                {
                    "at": to_iso(now),
                    "cluster": observation.target_cluster,
                    "message": (observation.last_preemption or {}).get("message") or observation.message,
                }
            )
        if phase is ServicePhase.SERVING and self.serving_at is None:
            self.serving_at = now
        if observation.terminal:
            self.finished_at = self.finished_at or now
            self.final_phase = phase.value
        self.phase = phase.value
        self.last_observed_at = now

    def _catch_up(self, observation: ServiceObservation, now: float) -> None:
        """The first look came after the deploy (the task deferred, the triggerer picked the wait up):
        the time before it is split at the Workload's admission, as Kueue recorded it, into queued and
        starting, rather than lost. Starting then runs until this look, an upper bound when the service
        already serves."""
        if self.submitted_at is None or now <= self.submitted_at:
            return
        if observation.phase in WAITING_SERVICE_PHASES:
            self.queued_seconds += now - self.submitted_at
            return
        admitted = to_epoch(observation.admitted_at) if observation.admitted_at else None
        if admitted is None:
            return
        admitted = min(max(admitted, self.submitted_at), now)
        self.queued_seconds += admitted - self.submitted_at
        if observation.phase in STARTING_SERVICE_PHASES or observation.phase is ServicePhase.SERVING:
            self.starting_seconds += now - admitted

    def to_dict(self) -> dict[str, Any]:
        return {
            "submitted_at": to_iso(self.submitted_at),
            "serving_at": to_iso(self.serving_at),
            "finished_at": to_iso(self.finished_at),
            "final_phase": self.final_phase,
            "queued_seconds": round(self.queued_seconds, 3),
            "starting_seconds": round(self.starting_seconds, 3),
            "admissions": list(self.admissions),
            "preemptions": list(self.preemptions),
            "preemption_count": self.preemption_count,
            "phase": self.phase,
            "last_observed_at": to_iso(self.last_observed_at),
            "admitted_key": self.admitted_key,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ServiceTimeline:
        data = data or {}

        def epoch(key: str) -> float | None:
            return to_epoch(data[key]) if data.get(key) else None

        return cls(
            submitted_at=epoch("submitted_at"),
            admissions=list(data.get("admissions") or []),
            preemptions=list(data.get("preemptions") or []),
            serving_at=epoch("serving_at"),
            finished_at=epoch("finished_at"),
            final_phase=data.get("final_phase"),
            queued_seconds=float(data.get("queued_seconds") or 0.0),
            starting_seconds=float(data.get("starting_seconds") or 0.0),
            phase=data.get("phase"),
            last_observed_at=epoch("last_observed_at"),
            preemption_count=int(data.get("preemption_count") or 0),
            admitted_key=data.get("admitted_key"),
        )


def describe_unseen_preemptions(
    namespace: str, name: str, observation: ServiceObservation, newly_counted: int
) -> list[str]:
    """Task-log lines for preemptions Kueue counted but the wait never saw as PREEMPTED: the eviction and
    the requeue came between two looks (a burst of changes, or before the first look), so the current
    phase is already QUEUED or ADMITTED again. The task log then still says, as it does for a RayJob,
    that Kueue took the cluster's quota away, and why, before the line of the current state."""
    if newly_counted <= 0 or observation.phase is ServicePhase.PREEMPTED:
        return []
    said = observation.last_preemption or {}
    cluster = f"{observation.target_role} RayCluster {observation.target_cluster}".strip()
    message = said.get("message") or "Kueue evicted its Workload to make room"
    serving = (
        f"; RayCluster {observation.active_cluster} keeps serving"
        if observation.active_cluster and observation.active_cluster != observation.target_cluster
        else ""
    )
    reason = said.get("reason") or EVICTED_BY_PREEMPTION
    line = f"RayService {namespace}/{name}: PREEMPTED ({reason}): {cluster}: {message}"
    return [f"{line}{serving}"] * newly_counted


def describe_service_transition(
    namespace: str, name: str, observation: ServiceObservation, position: str | None
) -> str:
    """One task-log line for a RayService transition, quoting Kueue / KubeRay / Serve."""
    line = f"RayService {namespace}/{name}: {observation.describe()}"
    if observation.phase is ServicePhase.ADMITTED and observation.flavors:
        line += f" [flavors: {describe_flavors(observation.flavors)}]"
    return line + so_far(observation.preemptions, position)


def service_event_payload(
    verdict: Verdict,
    observation: ServiceObservation | None,
    timeline: ServiceTimeline,
    **extra: Any,
) -> dict[str, Any]:
    """The TriggerEvent payload (also what the worker-side wait produces): JSON only, and only what the
    deploy task needs to finish (the verdict, its RayService, the active cluster and the timeline for the
    XCom), because Airflow writes the whole event into the task log ("Trigger fired event ... result=");
    the Kueue tab reads the rest from the cluster."""
    recorded = timeline.to_dict()
    return {
        "status": str(verdict.status),  # the plain value, as JSON and the task log show it
        "reason": verdict.reason,
        "message": verdict.message,
        "phase": observation.phase.value if observation else None,
        "active_cluster": observation.active_cluster if observation else None,
        **{key: value for key, value in extra.items() if value not in (None, False)},
        "timeline": {
            key: value
            for key, value in recorded.items()
            if key not in TIMELINE_STATE_ONLY and value not in (None, [], {})
        },
    }


CLOCK_VERDICTS = frozenset(
    {
        VerdictStatus.INADMISSIBLE,
        VerdictStatus.QUEUE_TIMEOUT,
        VerdictStatus.READY_TIMEOUT,
        VerdictStatus.EXECUTION_TIMEOUT,
    }
)
"""Verdicts a clock gives (not a state): a wait confirms them on a fresh read before it ends."""
TIMELINE_STATE_ONLY = frozenset({"admitted_key", "last_observed_at"})
"""Timeline fields that only carry the trigger's own state from one look to the next."""


@dataclass(frozen=True)
class ServiceTarget:
    """The RayService a deploy task waits for, what "serving" means for it, and what its event payload
    carries back to the task.

    :param generation: the spec generation the operator wrote (KubeRay must have acted on it).
    :param switch_from: the active cluster an upgrade replaces; serving counts only once another one serves.
    :param created: this task try created the RayService (so giving up may delete it).
    """

    name: str
    namespace: str
    uid: str
    generation: int | None = None
    switch_from: str | None = None
    created: bool = False
    queue: str | None = None
    priority: str | None = None
    submitted_at: str | None = None
    """ISO time of the deploy (the queue clock's start); None: now."""

    def observe(self, service: dict, workloads: list[dict]) -> ServiceObservation:
        return observe_service(service, workloads, generation=self.generation, switch_from=self.switch_from)

    def record(self, timeline: ServiceTimeline, observation: ServiceObservation, now: datetime) -> list[str]:
        """Record an observation in ``timeline``; the log lines of the preemptions it had not seen."""
        counted = timeline.preemption_count
        timeline.record(observation, now)
        unseen = timeline.preemption_count - counted
        return describe_unseen_preemptions(self.namespace, self.name, observation, unseen)

    def timeline(self, data: dict[str, Any] | None) -> ServiceTimeline:
        """The timeline a deferred wait continues (``data``: the one the task deferred with, if any)."""
        timeline = ServiceTimeline.from_dict(data)
        if timeline.submitted_at is None and self.submitted_at:
            timeline.submitted_at = to_epoch(self.submitted_at)
        return timeline

    def kind(self) -> WaitKind:
        """How a wait step (``kueue_ray.wait_step``) observes, times, words and reports this RayService."""
        return WaitKind(
            observe=self.observe,
            gone=lambda service, workloads: service is None,
            deleted=self.deleted(),
            workload=lambda workloads: None,  # the observation carries the times the watchdog reads
            record=self.record,
            describe=lambda observation, position, preemptor: describe_service_transition(
                self.namespace, self.name, observation, position
            ),
            payload=self.payload,
            queue_of=lambda service: self.queue,
            position_phases=SERVICE_POSITION_PHASES,
            preemptor_uid=lambda observation: None,  # Kueue names the preemptor of a RayCluster by UID
            clock_verdicts=CLOCK_VERDICTS,
            watchdog=self.watchdog,
            timeline=self.timeline,
        )

    def payload(
        self, verdict: Verdict, observation: ServiceObservation | None, timeline: ServiceTimeline
    ) -> dict:
        return service_event_payload(
            verdict,
            observation,
            timeline,
            **waited_for(self),
            created=self.created,
            switch_from=self.switch_from,
        )

    def watchdog(self, policy: WaitPolicy) -> ServiceWatchdog:
        return ServiceWatchdog(policy, parse_time(self.submitted_at) or utcnow())

    def deleted(self) -> Verdict:
        return deleted_verdict("RayService", self.namespace, self.name, self.uid, "while waiting")


class ServiceWorkerWait:
    """The trigger's wait for a RayService, one synchronous read every ``poll_interval`` seconds in a worker
    slot (``deferrable=False``)."""

    def __init__(self, target: ServiceTarget, policy: WaitPolicy, log: Any) -> None:
        self.target = target
        self.policy = policy
        self.log = log

    def wait(self, hook: RayServiceHook) -> dict[str, Any]:
        target, kind = self.target, self.target.kind()
        state = WaitState.start(kind, self.policy, ServiceTimeline())
        self.log.info("Limits: %s", self.policy.limits(ServiceWatchdog.admitted_limit))
        while True:
            read = Read(*hook.read_service(target.name, target.namespace, target.uid), fresh=True)
            clock = server_clock(getattr(hook, "conn_id", None) or "kubernetes_default")
            step = wait_step(kind, state, read, clock.now(), clock.offset_s)  # on the server's clock
            for line in step.lines:
                self.log.info(line)
            if step.news:
                position = None
                if step.position_in:
                    workload = step.observation.workload_name
                    found = hook.queue_position(target.namespace, step.position_in, workload)
                    position = found.describe() if found else None
                self.log.info(step.transition_line(position))
            if step.payload is not None:
                return step.payload
            time.sleep(self.policy.poll_interval)
