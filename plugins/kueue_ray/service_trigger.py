"""RayServiceTrigger: wait in the triggerer, event-driven, until a deployed RayService serves (or cannot).

The RayJob trigger's shape for a RayService: the trigger subscribes to the process-wide watch hub (one
RayService watch and one Workload watch per namespace, shared by every waiting task), feeds each change
through ``service_status.observe_service`` and writes every transition to the task log in Kueue's, KubeRay's
and Serve's own words, with the queue position: queued -> admitted -> cluster ready -> Serve deploying ->
serving, and for an upgrade the pending cluster taking over from the active one.

Waiting costs nothing while nothing changes: no request is made between two watch events (the hub's slow
relist is the only safety net), and a queue position is one visibility read shared with every other
trigger of the LocalQueue.

It fires exactly one TriggerEvent, when waiting is over (``ServiceWatchdog``): serving, a Serve failure
(``DEPLOY_FAILED`` / ``UNHEALTHY``), a spec KubeRay refused, a cluster Kueue can never admit (after
``inadmissible_grace``) or never will while the old one serves (``BLOCKED``), a timeout, too many
preemptions or pods-not-ready evictions, or the RayService deleted. API failures are never a reason: the
wait resumes after them.

``on_kill`` deletes the RayService only when this very task try created it (a new service) and still owns
it; an upgraded service keeps serving its previous version.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from kueue_ray.hub import DEFAULT_RESYNC_SECONDS, NOTICE
from kueue_ray.listwatch import Backoff
from kueue_ray.naming import AirflowIdentity
from kueue_ray.service_status import (
    SERVICE_POSITION_PHASES,
    STARTING_SERVICE_PHASES,
    WAITING_SERVICE_PHASES,
    ServiceObservation,
    ServicePhase,
    observe_service,
)
from kueue_ray.status import pods_not_ready_hint
from kueue_ray.timeline import to_epoch, to_iso
from kueue_ray.trigger import RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX, Verdict
from kueue_ray.verdicts import (
    DELETED,
    FAILED,
    INADMISSIBLE,
    PODS_NOT_READY,
    QUEUE_TIMEOUT,
    READY_TIMEOUT,
    SUCCESS,
    TOO_MANY_PREEMPTIONS,
)

CLOCK_VERDICTS = frozenset({INADMISSIBLE, QUEUE_TIMEOUT, READY_TIMEOUT})
"""Verdicts a clock gives (not a state): confirmed on a fresh read before the trigger fires them."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


@dataclass
class ServiceWatchdog:
    """When to stop waiting for a RayService: pure rules shared by the trigger and the worker-side wait.

    * ``queue_timeout``: waiting for admission this time (since the deploy, or since a preemption);
    * ``ready_timeout``: since the target cluster's admission, until it serves;
    * ``inadmissible_grace``: how long Kueue may keep saying "cannot be admitted";
    * ``max_preemptions`` / ``max_pods_ready_evictions``: how often Kueue may take the quota away.
    """

    submitted_at: datetime
    queue_timeout: float | None = None
    ready_timeout: float | None = None
    fail_on_inadmissible: bool = True
    inadmissible_grace: float = 60.0
    max_preemptions: int | None = None
    max_pods_ready_evictions: int | None = 1
    waiting_since: datetime | None = None
    starting_since: datetime | None = None
    inadmissible_since: datetime | None = None

    def check(self, observation: ServiceObservation, now: datetime) -> Verdict | None:
        """A Verdict when waiting is over, None to keep waiting."""
        self._track(observation, now)
        phase = observation.phase
        if observation.terminal:
            return Verdict(
                SUCCESS if observation.serving else FAILED, observation.reason, observation.message
            )
        if self.max_preemptions is not None and observation.preemptions > self.max_preemptions:
            return Verdict(
                TOO_MANY_PREEMPTIONS,
                "MaxPreemptionsExceeded",
                f"preempted {observation.preemptions} times, more than max_preemptions={self.max_preemptions}; "
                f"{observation.describe()}",
            )
        limit = self.max_pods_ready_evictions
        if limit is not None and observation.pods_ready_evictions > limit:
            return Verdict(
                PODS_NOT_READY,
                "PodsReadyTimeout",
                f"{pods_not_ready_hint(observation.pods_ready_timeout)}. Kueue evicted it "
                f"{observation.pods_ready_evictions} times, more than max_pods_ready_evictions={limit}; "
                f"{observation.describe()}",
            )
        if phase is ServicePhase.INADMISSIBLE and self.fail_on_inadmissible:
            waited = (now - self.inadmissible_since).total_seconds()
            if waited >= self.inadmissible_grace:
                return Verdict(
                    INADMISSIBLE,
                    observation.reason,
                    f"Kueue cannot admit it: {observation.message} (unchanged for {waited:.0f}s, "
                    f"inadmissible_grace={self.inadmissible_grace:g}s)",
                )
        if phase in WAITING_SERVICE_PHASES and self.queue_timeout is not None:
            waited = (now - self.waiting_since).total_seconds()
            if waited >= self.queue_timeout:
                return Verdict(
                    QUEUE_TIMEOUT,
                    "QueueTimeout",
                    f"not admitted within queue_timeout={self.queue_timeout:g}s; {observation.describe()}",
                )
        if phase in STARTING_SERVICE_PHASES and self.ready_timeout is not None:
            started = (now - self.starting_since).total_seconds()
            if started >= self.ready_timeout:
                return Verdict(
                    READY_TIMEOUT,
                    "ReadyTimeout",
                    f"admitted {started:.0f}s ago and not serving yet (ready_timeout={self.ready_timeout:g}s); "
                    f"{observation.describe()}",
                )
        return None

    def seconds_until_next_deadline(self, now: datetime) -> float | None:
        deadlines = []
        if self.inadmissible_since is not None and self.fail_on_inadmissible:
            deadlines.append(self.inadmissible_since.timestamp() + self.inadmissible_grace)
        if self.waiting_since is not None and self.queue_timeout is not None:
            deadlines.append(self.waiting_since.timestamp() + self.queue_timeout)
        if self.starting_since is not None and self.ready_timeout is not None:
            deadlines.append(self.starting_since.timestamp() + self.ready_timeout)
        return max(0.0, min(deadlines) - now.timestamp()) if deadlines else None

    def _track(self, observation: ServiceObservation, now: datetime) -> None:
        phase = observation.phase
        if phase in WAITING_SERVICE_PHASES:
            self.starting_since = None
            if self.waiting_since is None:
                self.waiting_since = max(
                    self.submitted_at, now if observation.preemptions else self.submitted_at
                )
        elif phase in STARTING_SERVICE_PHASES:
            self.waiting_since = None
            if self.starting_since is None:
                self.starting_since = _parse_time(observation.admitted_at) or now
        else:
            self.waiting_since = None
            self.starting_since = None
        if phase is not ServicePhase.INADMISSIBLE:
            self.inadmissible_since = None
        elif self.inadmissible_since is None:
            self.inadmissible_since = now


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


def describe_service_transition(
    namespace: str, name: str, observation: ServiceObservation, position: str | None
) -> str:
    """One task-log line for a RayService transition, quoting Kueue / KubeRay / Serve."""
    line = f"RayService {namespace}/{name}: {observation.describe()}"
    if observation.phase is ServicePhase.ADMITTED and observation.flavors:
        flavors = ", ".join(
            f"{pod_set}={sorted(set(assigned.values()))}" for pod_set, assigned in observation.flavors.items()
        )
        line += f" [flavors {flavors}]"
    if observation.preemptions:
        line += f" [preempted {observation.preemptions}x so far]"
    if position:
        line += f" — {position}"
    return line


def service_event_payload(
    verdict: Verdict,
    observation: ServiceObservation | None,
    timeline: ServiceTimeline,
    **extra: Any,
) -> dict[str, Any]:
    """The TriggerEvent payload (also what the worker-side wait produces): JSON only."""
    return {
        "status": verdict.status,
        "reason": verdict.reason,
        "message": verdict.message,
        "phase": observation.phase.value if observation else None,
        "observation": observation.to_dict() if observation else None,
        "timeline": timeline.to_dict(),
        **extra,
    }


@dataclass
class _Progress:
    timeline: ServiceTimeline
    watchdog: ServiceWatchdog
    last_said: tuple[str, str, str] | None = None


class RayServiceTrigger(BaseTrigger):
    """Wait for one RayService (by name and uid) to serve the spec the deploy operator wrote.

    :param name / namespace / uid: the RayService; another object later created under the name is not ours.
    :param generation: the spec generation the operator wrote (KubeRay must have acted on it).
    :param switch_from: the active cluster an upgrade replaces; serving counts only once another one serves.
    :param created: this task try created the RayService (so ``on_kill`` may delete it).
    :param owner: the task try {dag_id, run_id, task_id, map_index, try_number}; ``on_kill`` deletes a
        created RayService only while this try still owns it.
    :param queue / priority: for the queue position and the log.
    :param queue_timeout / ready_timeout / fail_on_inadmissible / inadmissible_grace / max_preemptions /
        max_pods_ready_evictions: see ``ServiceWatchdog``.
    :param submitted_at: ISO time of the deploy (queue clock start).
    :param resync_interval: the longest a missed watch event may go unnoticed, in seconds.
    :param timeline: a ServiceTimeline dict to continue.
    """

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        uid: str,
        generation: int | None = None,
        switch_from: str | None = None,
        created: bool = False,
        owner: dict[str, Any] | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        queue: str | None = None,
        priority: str | None = None,
        queue_timeout: float | None = None,
        ready_timeout: float | None = None,
        fail_on_inadmissible: bool = True,
        inadmissible_grace: float = 60.0,
        max_preemptions: int | None = None,
        max_pods_ready_evictions: int | None = 1,
        submitted_at: str | None = None,
        resync_interval: float = DEFAULT_RESYNC_SECONDS,
        timeline: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.generation = generation
        self.switch_from = switch_from
        self.created = created
        self.owner = dict(owner) if owner else None
        self.kubernetes_conn_id = kubernetes_conn_id
        self.queue = queue
        self.priority = priority
        self.queue_timeout = queue_timeout
        self.ready_timeout = ready_timeout
        self.fail_on_inadmissible = fail_on_inadmissible
        self.inadmissible_grace = inadmissible_grace
        self.max_preemptions = max_preemptions
        self.max_pods_ready_evictions = max_pods_ready_evictions
        self.submitted_at = submitted_at
        self.resync_interval = resync_interval
        self.timeline = timeline
        self._fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "generation": self.generation,
                "switch_from": self.switch_from,
                "created": self.created,
                "owner": self.owner,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "queue": self.queue,
                "priority": self.priority,
                "queue_timeout": self.queue_timeout,
                "ready_timeout": self.ready_timeout,
                "fail_on_inadmissible": self.fail_on_inadmissible,
                "inadmissible_grace": self.inadmissible_grace,
                "max_preemptions": self.max_preemptions,
                "max_pods_ready_evictions": self.max_pods_ready_evictions,
                "submitted_at": self.submitted_at,
                "resync_interval": self.resync_interval,
                "timeline": self.timeline,
            },
        )

    def make_watchdog(self) -> ServiceWatchdog:
        return ServiceWatchdog(
            submitted_at=_parse_time(self.submitted_at) or utcnow(),
            queue_timeout=self.queue_timeout,
            ready_timeout=self.ready_timeout,
            fail_on_inadmissible=self.fail_on_inadmissible,
            inadmissible_grace=self.inadmissible_grace,
            max_preemptions=self.max_preemptions,
            max_pods_ready_evictions=self.max_pods_ready_evictions,
        )

    def observe(self, service: dict, workloads: list[dict]) -> ServiceObservation:
        return observe_service(service, workloads, generation=self.generation, switch_from=self.switch_from)

    def payload(
        self, verdict: Verdict, observation: ServiceObservation | None, timeline: ServiceTimeline
    ) -> dict:
        return service_event_payload(
            verdict,
            observation,
            timeline,
            name=self.name,
            namespace=self.namespace,
            uid=self.uid,
            queue=self.queue,
            priority=self.priority,
            created=self.created,
            switch_from=self.switch_from,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        timeline = ServiceTimeline.from_dict(self.timeline)
        if timeline.submitted_at is None and self.submitted_at:
            timeline.submitted_at = to_epoch(self.submitted_at)
        progress = _Progress(timeline, self.make_watchdog())
        what = f"replacing RayCluster {self.switch_from}" if self.switch_from else "new spec"
        self.log.info(
            "Waiting for RayService %s/%s (uid %s, generation %s, %s, queue %s, priority %s) through the "
            "shared watch",
            self.namespace,
            self.name,
            self.uid,
            self.generation,
            what,
            self.queue,
            self.priority,
        )
        backoff = Backoff(RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX)
        while True:
            try:
                event = await self._wait(progress)
            except Exception:  # noqa: BLE001 - only the RayService may end the wait, never an error of ours
                delay = backoff.next_delay()
                self.log.exception(
                    "Waiting for RayService %s/%s was interrupted; resuming in %.1fs",
                    self.namespace,
                    self.name,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            yield event
            return

    async def _wait(self, progress: _Progress) -> TriggerEvent:
        from kueue_ray.hub import HUB

        timeline, watchdog = progress.timeline, progress.watchdog
        async with HUB.subscribe_service(
            self.kubernetes_conn_id, self.namespace, self.name, self.uid, self.resync_interval
        ) as subscription:
            service, workloads = await subscription.current()
            confirmed = (
                False  # service and workloads were just read from the API server for a clock's verdict
            )
            while True:
                now = utcnow()
                if service is None:
                    verdict = Verdict(
                        DELETED,
                        "RayServiceDeleted",
                        f"RayService {self.namespace}/{self.name} (uid {self.uid}) was deleted while waiting",
                    )
                    self.log.error(verdict.message)
                    return self._fire(verdict, None, timeline)
                observation = self.observe(service, workloads)
                timeline.record(observation, now)
                said = (observation.phase.value, observation.reason, observation.message)
                if said != progress.last_said:
                    progress.last_said = said
                    position = await self._position(observation, subscription)
                    self.log.info(
                        describe_service_transition(self.namespace, self.name, observation, position)
                    )
                verdict = watchdog.check(observation, now)
                if verdict is not None and verdict.status in CLOCK_VERDICTS and not confirmed:
                    # As the RayJob trigger does: a clock ran out on what the cache holds, which may be
                    # behind; judge again on what the API server says now.
                    service, workloads = await subscription.current(reread_rayjob=True, reread_workload=True)
                    confirmed = True
                    continue
                if verdict is not None:
                    return self._fire(verdict, observation, timeline)
                confirmed = False
                deadline = watchdog.seconds_until_next_deadline(now)
                update = await subscription.next_update(None if deadline is None else deadline + 0.05)
                # Every queued change is only "look again" (the cache holds the newest state); a notice
                # about waiting itself (e.g. polling while watches are refused) goes to the task log.
                while update is not None:
                    if update.kind == NOTICE:
                        self.log.warning(update.message)
                    update = None if subscription.updates.empty() else subscription.updates.get_nowait()
                service, workloads = subscription.snapshot()

    def _fire(
        self, verdict: Verdict, observation: ServiceObservation | None, timeline: ServiceTimeline
    ) -> TriggerEvent:
        self._fired = True
        return TriggerEvent(self.payload(verdict, observation, timeline))

    async def _position(self, observation: ServiceObservation, subscription: Any) -> str | None:
        if (
            observation.phase not in SERVICE_POSITION_PHASES
            or not observation.workload_name
            or not self.queue
        ):
            return None
        positions = await subscription.pending_positions(self.queue)
        position = positions.get(observation.workload_name) if positions else None
        return position.describe() if position else None

    async def on_kill(self) -> None:
        """A user killed the task: delete the RayService if this try created it and still owns it."""
        if self._fired:
            return
        if not (self.created and self.owner):
            self.log.info(
                "Not deleting RayService %s/%s: this try did not create it (an upgrade keeps the previous "
                "version serving)",
                self.namespace,
                self.name,
            )
            return
        from kueue_ray.service_hook import AsyncRayServiceHook

        result = await AsyncRayServiceHook(
            kubernetes_conn_id=self.kubernetes_conn_id
        ).delete_rayservice_if_owned(self.name, self.namespace, self.uid, AirflowIdentity(**self.owner))
        self.log.info(
            "Task killed: RayService %s/%s (uid %s): %s", self.namespace, self.name, self.uid, result
        )
