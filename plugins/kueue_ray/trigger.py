"""RayJobTrigger: wait in the triggerer, event-driven, until a RayJob is done or waiting must stop.

The trigger subscribes to the process-wide watch hub (one watch per namespace for all triggers), feeds
every change through ``status.observe`` into a ``Timeline``, and writes each transition to the task log
with Kueue's or KubeRay's own words and the queue position, so the log tells the whole story:
queued -> admitted -> running -> preempted -> queued -> ... -> succeeded.

Waiting costs the API server nothing per trigger: the hub's cache answers the first read, its periodic
relist is the safety net against missed events, and queue positions come from a visibility read shared by
every trigger in the LocalQueue. Only a RayJob outside the hub's watch (a sensor on a foreign RayJob) is
re-read by its own trigger.

It fires exactly one event, and only when waiting is over (``Watchdog``): a terminal phase,
inadmissible for longer than the grace period, a queue or run timeout, too many preemptions, too many
evictions for pods that never got ready, or the RayJob deleted under us. Everything else is logged, not reported. An API failure is never a reason: reads retry
until the API server answers, and anything unexpected is logged and the wait resumes, because a trigger
that ends without an event fails its task for a reason that has nothing to do with the RayJob.

A success ends the task right here when the task allows it (``end_in_triggerer``, decided by the operator
or sensor when it deferred): the trigger writes the closing lines and the driver log tail to the task log
and yields Airflow's ``TaskSuccessEvent`` with the XComs the worker would have pushed
(``kueue_ray.results``), so no worker slot is taken and no scheduler round trip is waited for. Everything
else (failures, which must raise so that retries apply; give-ups, which delete the RayJob; tasks whose end
runs user code) fires a plain TriggerEvent and resumes on a worker.

Queue metrics (``kueue_ray.metrics``) are counted here, where the transitions are seen.

Side effects are limited to ``on_kill`` (a user marked the task failed/success or cleared it), which
deletes the RayJob only if this very task try still owns it (the operator) or is still its registered
waiter (a sensor of the same DAG run): a cleared task's new try may already have adopted or re-registered
on the RayJob, and Airflow may briefly run a trigger twice. ``cleanup`` deletes nothing, because it also
runs on every triggerer restart.

Importing this module does not import ``kubernetes``: the hub imports it only when its loops run, and the
hook is imported inside the methods that call the API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import BaseTrigger, TaskSuccessEvent, TriggerEvent

from kueue_ray.hub import ADMITTED, DEFAULT_RESYNC_SECONDS, NOTICE, QUEUED
from kueue_ray.listwatch import Backoff
from kueue_ray.metrics import WaitMetrics
from kueue_ray.naming import MANAGED_BY_LABEL, MANAGED_BY_VALUE, QUEUE_LABEL, AirflowIdentity
from kueue_ray.narration import Story, name_preemptor, preemptor_job_uid, readable_quantities
from kueue_ray.results import LOG_TAIL_HEADER, TriggerEnding, summary_lines
from kueue_ray.status import Observation, Phase, observe, pods_not_ready_hint
from kueue_ray.timeline import Timeline, to_epoch
from kueue_ray.verdicts import (
    DELETED,
    FAILED,
    INADMISSIBLE,
    PODS_NOT_READY,
    QUEUE_TIMEOUT,
    RUN_TIMEOUT,
    SUCCESS,
    TOO_MANY_PREEMPTIONS,
)

WAITING_PHASES = frozenset({Phase.SUBMITTED, Phase.QUEUED, Phase.INADMISSIBLE, Phase.AWAITING_CHECKS})
"""Not admitted yet: the queue clock runs (waiting for admission checks is waiting for admission too)."""
ADMITTED_PHASES = frozenset({Phase.ADMITTED, Phase.RUNNING, Phase.RETRYING})
POSITION_PHASES = frozenset({Phase.QUEUED, Phase.INADMISSIBLE})
CLOCK_VERDICTS = frozenset({INADMISSIBLE, QUEUE_TIMEOUT, RUN_TIMEOUT})
"""Verdicts a clock gives (not a state): confirmed on a fresh read before the trigger fires them."""
UNWATCHED_POLL_SECONDS = 15.0
"""Re-read interval for a RayJob the hub's label-selected watch does not cover (sensor on a foreign job)."""
RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX = 1.0, 60.0
"""Pause before resuming a wait that an unexpected error interrupted (doubling, jittered)."""
LOG_TAIL_TIMEOUT_SECONDS = 15.0
"""How long reading the driver log may hold up a success that ends in the triggerer."""


@dataclass
class _Progress:
    """What a trigger has learnt while waiting; it survives a wait resumed after an error."""

    timeline: Timeline
    watchdog: Watchdog
    metrics: WaitMetrics
    story: Story = field(default_factory=Story)


@dataclass(frozen=True)
class Verdict:
    """Why waiting is over. ``status`` is one of ``kueue_ray.verdicts``."""

    status: str
    reason: str
    message: str


def utcnow() -> datetime:
    return datetime.now(UTC)


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _condition(workload: dict | None, type_: str) -> dict:
    for condition in ((workload or {}).get("status") or {}).get("conditions") or ():
        if condition.get("type") == type_:
            return condition
    return {}


@dataclass
class Watchdog:
    """When to stop waiting: pure rules shared by the trigger, the operator's worker wait and the sensor.

    Queueing is normal under Kueue, so nothing counts from submission by default. Each clock measures what
    its name says, preferring the Workload's condition timestamps so a triggerer restart does not reset it:

    * ``queue_timeout``: waiting for admission this time — since submission, or since the last admission
      was lost (preemption); time spent waiting for admission checks counts, it is waiting for admission;
    * ``run_timeout``: since the last admission (``Admitted=True``, after every admission check passed),
      not since the quota reservation;
    * ``inadmissible_grace``: how long Kueue has kept saying "cannot be admitted";
    * ``max_preemptions``: how often Kueue may take the quota away before we give up;
    * ``max_pods_ready_evictions``: how often Kueue may evict it because its pods did not get ready within
      its waitForPodsReady timeout (Kueue itself requeues such a Workload forever), counted apart from
      preemptions: more than this and we give up.
    """

    submitted_at: datetime
    queue_timeout: float | None = None
    run_timeout: float | None = None
    fail_on_inadmissible: bool = True
    inadmissible_grace: float = 60.0
    max_preemptions: int | None = None
    max_pods_ready_evictions: int | None = None
    inadmissible_since: datetime | None = None
    waiting_since: datetime | None = None
    admitted_since: datetime | None = None
    pods_ready_timeout: float | None = None
    """Kueue's waitForPodsReady timeout as last seen on the Workload (for the give-up message)."""

    def check(self, observation: Observation, workload: dict | None, now: datetime) -> Verdict | None:
        """A Verdict when waiting is over, None to keep waiting."""
        self._track(observation, workload, now)
        phase = observation.phase
        if observation.terminal:
            return Verdict(
                SUCCESS if phase is Phase.SUCCEEDED else FAILED, observation.reason, observation.message
            )
        if self.max_preemptions is not None and observation.preemptions > self.max_preemptions:
            return Verdict(
                TOO_MANY_PREEMPTIONS,
                "MaxPreemptionsExceeded",
                f"preempted {observation.preemptions} times, more than max_preemptions={self.max_preemptions}; "
                f"Kueue says: {observation.describe()}",
            )
        limit = self.max_pods_ready_evictions
        if limit is not None and observation.pods_ready_evictions > limit:
            return Verdict(
                PODS_NOT_READY,
                "PodsReadyTimeout",
                f"{pods_not_ready_hint(self.pods_ready_timeout)}. Kueue evicted it "
                f"{observation.pods_ready_evictions} times because its pods did not all become ready "
                f"(PodsReadyTimeout), more than max_pods_ready_evictions={limit}; Kueue says: "
                f"{observation.describe()}",
            )
        if phase is Phase.INADMISSIBLE and self.fail_on_inadmissible:
            waited = (now - self.inadmissible_since).total_seconds()
            if waited >= self.inadmissible_grace:
                return Verdict(
                    INADMISSIBLE,
                    observation.reason,
                    f"Kueue cannot admit it: {observation.message} (unchanged for {waited:.0f}s, "
                    f"inadmissible_grace={self.inadmissible_grace:g}s)",
                )
        if phase in WAITING_PHASES and self.queue_timeout is not None:
            waited = (now - self.waiting_since).total_seconds()
            if waited >= self.queue_timeout:
                return Verdict(
                    QUEUE_TIMEOUT,
                    "QueueTimeout",
                    f"not admitted within queue_timeout={self.queue_timeout:g}s (waiting since "
                    f"{self.waiting_since.isoformat()}); Kueue says: {observation.describe()}",
                )
        if phase in ADMITTED_PHASES and self.run_timeout is not None:
            ran = (now - self.admitted_since).total_seconds()
            if ran >= self.run_timeout:
                return Verdict(
                    RUN_TIMEOUT,
                    "RunTimeout",
                    f"still {phase.value} {ran:.0f}s after its last admission at "
                    f"{self.admitted_since.isoformat()} (run_timeout={self.run_timeout:g}s)",
                )
        return None

    def seconds_until_next_deadline(self, now: datetime) -> float | None:
        """How long one may wait for the next change before a deadline needs checking."""
        deadlines = []
        if self.inadmissible_since is not None and self.fail_on_inadmissible:
            deadlines.append(self.inadmissible_since.timestamp() + self.inadmissible_grace)
        if self.waiting_since is not None and self.queue_timeout is not None:
            deadlines.append(self.waiting_since.timestamp() + self.queue_timeout)
        if self.admitted_since is not None and self.run_timeout is not None:
            deadlines.append(self.admitted_since.timestamp() + self.run_timeout)
        return max(0.0, min(deadlines) - now.timestamp()) if deadlines else None

    def _track(self, observation: Observation, workload: dict | None, now: datetime) -> None:
        phase = observation.phase
        if observation.pods_ready_timeout:
            self.pods_ready_timeout = observation.pods_ready_timeout
        quota = _condition(workload, "QuotaReserved")
        changed_at = _parse_time(quota.get("lastTransitionTime"))
        reserved = quota.get("status") == "True"
        admitted = _condition(workload, "Admitted")
        admitted_at = (
            _parse_time(admitted.get("lastTransitionTime")) if admitted.get("status") == "True" else None
        )
        if phase in WAITING_PHASES:
            self.admitted_since = None
            if self.waiting_since is None:
                candidates = [self.submitted_at]
                if changed_at is not None and not reserved:
                    candidates.append(changed_at)  # when it lost (or never got) its quota
                self.waiting_since = max(candidates)
        elif phase in ADMITTED_PHASES:
            self.waiting_since = None
            if self.admitted_since is None:
                self.admitted_since = admitted_at or now
        else:  # evicted (quota being released) or terminal: neither clock runs
            self.waiting_since = None
            self.admitted_since = None
        if phase is not Phase.INADMISSIBLE:
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
        "status": verdict.status,
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
        )
    return payload


def describe_transition(
    namespace: str, name: str, observation: Observation, position: str | None, preemptor: dict | None = None
) -> str:
    """One task-log line for a transition, quoting Kueue / KubeRay: memory in readable units, and the
    preemptor RayJob (when known) named next to the UIDs Kueue gives (``kueue_ray.narration``)."""
    told = readable_quantities(name_preemptor(observation.describe(), preemptor))
    line = f"RayJob {namespace}/{name}: {told}"
    if observation.phase is Phase.ADMITTED and observation.flavors:
        flavors = ", ".join(
            f"{pod_set}={sorted(set(assigned.values()))}" for pod_set, assigned in observation.flavors.items()
        )
        line += f" [ClusterQueue {observation.cluster_queue}; flavors {flavors}]"
    if observation.phase is Phase.RUNNING and observation.job_id:
        line += f" [Ray job {observation.job_id} on RayCluster {observation.ray_cluster}]"
    if observation.preemptions:
        line += f" [preempted {observation.preemptions}x so far]"
    if position:
        line += f" — {position}"
    return line


def _watched(rayjob: dict) -> bool:
    """Whether the hub's RayJob watch (label-selected to this project's RayJobs) sees this one."""
    labels = (rayjob.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


async def _apply(
    update: Any, rayjob: dict, workload: dict | None, subscription: Any
) -> tuple[dict | None, dict | None]:
    """The (RayJob, Workload) pair after one hub update.

    Updates queued while the first read ran may be older than what it returned: those are skipped, so
    the state never moves backwards. A RayJob outside the hub's watch is re-read whenever Kueue changes
    its Workload, since that is when its status matters.
    """
    from kueue_ray.hub import RAYJOB
    from kueue_ray.listwatch import resource_version_newer

    current = rayjob if update.kind == RAYJOB else workload
    if update.object is not None and not resource_version_newer(update.object, current):
        return rayjob, workload
    if update.kind == RAYJOB:
        return update.object, workload
    if not _watched(rayjob):
        rayjob = (await subscription.current(reread_rayjob=True))[0]
    return rayjob, update.object


class RayJobTrigger(BaseTrigger):
    """Wait for one RayJob (by name and uid) through queueing, admission, preemption and completion.

    :param name: RayJob name.
    :param namespace: its namespace.
    :param uid: its uid; another object later created under the same name is not "ours".
    :param kubernetes_conn_id: the Airflow ``kubernetes`` connection.
    :param queue: the LocalQueue (for queue positions); read from the RayJob's label when None.
    :param priority: the WorkloadPriorityClass (for the log).
    :param queue_timeout: seconds a wait for admission may last; None (default) waits as long as it takes.
    :param run_timeout: seconds since the last admission; None for no limit.
    :param fail_on_inadmissible: stop when Kueue reports the job cannot be admitted...
    :param inadmissible_grace: ...for this many seconds without change.
    :param max_preemptions: stop after more preemptions than this; None for no limit.
    :param max_pods_ready_evictions: stop after more PodsReadyTimeout evictions (pods not ready within
        Kueue's waitForPodsReady timeout) than this; None for no limit.
    :param owner: the task try that owns the RayJob: {dag_id, run_id, task_id, map_index, try_number}.
        on_kill deletes the RayJob while this try still owns it (the operator).
    :param waiter: the sensor try waiting for the RayJob, same keys as ``owner``; on_kill deletes the RayJob
        only if it belongs to the same DAG run and still names this try as its waiter (the sensor with
        ``delete_on_kill``). Neither given: on_kill deletes nothing.
    :param submitted_at: ISO time of submission (queue clock start).
    :param resync_interval: the longest a missed watch event may go unnoticed, in seconds: the hub relists
        the namespace's RayJobs and Workloads at the shortest interval of its triggers.
    :param timeline: a Timeline dict to continue (None starts a new one).
    :param end_in_triggerer: on success, end the task here (``kueue_ray.results.TriggerEnding.to_dict``:
        XComs and log tail, decided by the task when it deferred); None resumes it on a worker.
    :param deferred_at: ISO time the task deferred; a trigger starting much later is a restart, which
        must not count the RayJob's past in the queue metrics again (``kueue_ray.metrics``).
    """

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        uid: str,
        kubernetes_conn_id: str = "kubernetes_default",
        queue: str | None = None,
        priority: str | None = None,
        queue_timeout: float | None = None,
        run_timeout: float | None = None,
        fail_on_inadmissible: bool = True,
        inadmissible_grace: float = 60.0,
        max_preemptions: int | None = None,
        max_pods_ready_evictions: int | None = None,
        owner: dict[str, Any] | None = None,
        waiter: dict[str, Any] | None = None,
        submitted_at: str | None = None,
        resync_interval: float = DEFAULT_RESYNC_SECONDS,
        timeline: dict[str, Any] | None = None,
        end_in_triggerer: dict[str, Any] | None = None,
        deferred_at: str | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.kubernetes_conn_id = kubernetes_conn_id
        self.queue = queue
        self.priority = priority
        self.queue_timeout = queue_timeout
        self.run_timeout = run_timeout
        self.fail_on_inadmissible = fail_on_inadmissible
        self.inadmissible_grace = inadmissible_grace
        self.max_preemptions = max_preemptions
        self.max_pods_ready_evictions = max_pods_ready_evictions
        self.owner = dict(owner) if owner else None
        self.waiter = dict(waiter) if waiter else None
        self.submitted_at = submitted_at
        self.resync_interval = resync_interval
        self.timeline = timeline
        self.end_in_triggerer = dict(end_in_triggerer) if end_in_triggerer else None
        self.deferred_at = deferred_at
        self._fired = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "queue": self.queue,
                "priority": self.priority,
                "queue_timeout": self.queue_timeout,
                "run_timeout": self.run_timeout,
                "fail_on_inadmissible": self.fail_on_inadmissible,
                "inadmissible_grace": self.inadmissible_grace,
                "max_preemptions": self.max_preemptions,
                "max_pods_ready_evictions": self.max_pods_ready_evictions,
                "owner": self.owner,
                "waiter": self.waiter,
                "submitted_at": self.submitted_at,
                "resync_interval": self.resync_interval,
                "timeline": self.timeline,
                "end_in_triggerer": self.end_in_triggerer,
                "deferred_at": self.deferred_at,
            },
        )

    def make_watchdog(self) -> Watchdog:
        submitted = _parse_time(self.submitted_at) or utcnow()
        return Watchdog(
            submitted_at=submitted,
            queue_timeout=self.queue_timeout,
            run_timeout=self.run_timeout,
            fail_on_inadmissible=self.fail_on_inadmissible,
            inadmissible_grace=self.inadmissible_grace,
            max_preemptions=self.max_preemptions,
            max_pods_ready_evictions=self.max_pods_ready_evictions,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        timeline = Timeline.from_dict(self.timeline)
        if timeline.submitted_at is None and self.submitted_at:
            timeline.submitted_at = to_epoch(self.submitted_at)
        wait_metrics = WaitMetrics(
            self.uid,
            queue=self.queue,
            priority=self.priority,
            namespace=self.namespace,
            deferred_at=self.deferred_at,
            started=utcnow(),
        )
        progress = _Progress(timeline, self.make_watchdog(), wait_metrics)
        self.log.info(
            "Waiting for RayJob %s/%s (uid %s, queue %s, priority %s) through the shared watch",
            self.namespace,
            self.name,
            self.uid,
            self.queue,
            self.priority,
        )
        backoff = Backoff(RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX)
        while True:
            try:
                event = await self._wait(progress)
            except Exception:  # noqa: BLE001 - only the RayJob may end the wait, never an error of ours
                delay = backoff.next_delay()
                self.log.exception(
                    "Waiting for RayJob %s/%s was interrupted; resuming in %.1fs",
                    self.namespace,
                    self.name,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            yield event
            return

    async def _wait(self, progress: _Progress) -> TriggerEvent:
        """Follow the RayJob through the hub until the Watchdog says waiting is over; the event to fire.

        Everything it learns is kept in ``progress``, so a wait resumed after an error continues the same
        timeline and clocks.
        """
        from kueue_ray.hub import HUB

        timeline, watchdog = progress.timeline, progress.watchdog
        async with HUB.subscribe(
            self.kubernetes_conn_id, self.namespace, self.name, self.uid, self.resync_interval
        ) as subscription:
            rayjob, workload = await subscription.current()
            confirmed = False  # rayjob and workload were just read from the API server for a clock's verdict
            next_reread = None
            if rayjob is not None and not _watched(rayjob):
                reread = min(self.resync_interval, UNWATCHED_POLL_SECONDS)
                next_reread = time.monotonic() + reread
                self.log.info(
                    "RayJob %s/%s lacks label %s=%s (not submitted by this project): re-reading it every %gs "
                    "and on every Workload change",
                    self.namespace,
                    self.name,
                    MANAGED_BY_LABEL,
                    MANAGED_BY_VALUE,
                    reread,
                )
            if rayjob is not None:
                labels = (rayjob.get("metadata") or {}).get("labels") or {}
                subscription.queue = self.queue or labels.get(QUEUE_LABEL)
            while True:
                now = utcnow()
                if rayjob is None:
                    verdict = Verdict(
                        DELETED,
                        "RayJobDeleted",
                        f"RayJob {self.namespace}/{self.name} (uid {self.uid}) was deleted before it finished",
                    )
                    self.log.error(verdict.message)
                    progress.metrics.ended(verdict.status, verdict.reason, None)
                    return self._fire(verdict, None, timeline)
                observation = observe(rayjob, workload)
                timeline.record(observation, now)
                progress.metrics.recorded(timeline, observation.cluster_queue)
                subscription.stage = QUEUED if observation.phase in WAITING_PHASES else ADMITTED
                await self._tell(progress.story, rayjob, observation, subscription)
                verdict = watchdog.check(observation, workload, now)
                if verdict is not None and verdict.status in CLOCK_VERDICTS and not confirmed:
                    # A clock ran out on what the hub's cache holds, which may be a watch event (or, while
                    # watches are refused, a polling interval) behind: a RayJob evicted or finished a moment
                    # ago must not be given up on. Judge again on what the API server says now.
                    rayjob, workload = await subscription.current(reread_rayjob=True, reread_workload=True)
                    confirmed = True
                    continue
                if verdict is not None:
                    progress.metrics.ended(verdict.status, verdict.reason, observation.cluster_queue)
                    # Only a triggerer can end a task: outside one (``dag.test()`` runs the trigger inline and
                    # hands the task only a TriggerEvent's payload) the task resumes and finishes itself.
                    if verdict.status == SUCCESS and self.end_in_triggerer and self.task_instance is not None:
                        return await self._end_here(verdict, observation, timeline, subscription)
                    return self._fire(verdict, observation, timeline)
                confirmed = False
                waits = []
                if next_reread is not None:
                    waits.append(next_reread - time.monotonic())
                deadline = watchdog.seconds_until_next_deadline(now)
                if deadline is not None:
                    waits.append(deadline + 0.05)
                position_check = progress.story.position_check_in(observation, time.monotonic())
                if position_check is not None:
                    waits.append(position_check)
                # Nothing to time out on: the hub's watch, and its relist as the safety net, bring every change.
                update = await subscription.next_update(max(0.0, min(waits)) if waits else None)
                if update is None:
                    if next_reread is not None and time.monotonic() >= next_reread:
                        rayjob, workload = await subscription.current(reread_rayjob=True)
                        next_reread = time.monotonic() + reread
                    continue
                if update.kind == NOTICE:  # how waiting works now, e.g. polling while watches are refused
                    self.log.warning(update.message)
                    continue
                rayjob, workload = await _apply(update, rayjob, workload, subscription)

    def _payload(self, verdict: Verdict, observation: Observation | None, timeline: Timeline) -> dict:
        return event_payload(
            verdict,
            observation,
            timeline,
            name=self.name,
            namespace=self.namespace,
            uid=self.uid,
            queue=self.queue,
            priority=self.priority,
        )

    def _fire(self, verdict: Verdict, observation: Observation | None, timeline: Timeline) -> TriggerEvent:
        """The event that resumes the task on a worker (``execute_complete``)."""
        self._fired = True
        return TriggerEvent(self._payload(verdict, observation, timeline))

    async def _end_here(
        self, verdict: Verdict, observation: Observation, timeline: Timeline, subscription: Any
    ) -> TaskSuccessEvent:
        """End a successful task in the triggerer: the log lines and XComs ``execute_complete`` would have
        written on a worker (``kueue_ray.results``), then Airflow's ``TaskSuccessEvent``."""
        from kueue_ray.links import dashboard_url

        ending = TriggerEnding.from_dict(self.end_in_triggerer)
        payload = self._payload(verdict, observation, timeline)
        for line in summary_lines(payload, subscription.rayjob_by_uid):
            self.log.info(line)
        if ending.log_tail_lines > 0:
            tail = await self._log_tail(subscription, ending.log_tail_lines)
            if tail:
                self.log.info(LOG_TAIL_HEADER, ending.log_tail_lines, tail)
        xcoms = ending.xcoms(payload, dashboard_url)
        self.log.info(
            "RayJob %s/%s succeeded: the task ends here in the triggerer, no worker needed",
            self.namespace,
            self.name,
        )
        await self._push(xcoms)
        self._fired = True
        return TaskSuccessEvent()

    async def _push(self, xcoms: dict[str, Any]) -> None:
        """Store the XComs exactly as a worker's ``xcom_push`` does: through Airflow's XCom class (and so
        any custom XCom backend) and the triggerer's channel to the API server.

        Not as ``TaskSuccessEvent(xcoms=...)``: Airflow 3.3.2 stores those JSON-encoded once more than a
        worker's (``TaskInstance.xcom_push`` serializes, the column serializes again), so a downstream
        task would pull a string where it pulled a dict before.
        """
        from airflow.sdk.execution_time.xcom import XCom

        ti = self.task_instance
        map_index = getattr(ti, "map_index", -1)
        for key, value in xcoms.items():
            await XCom.aset(
                key,
                value,
                dag_id=ti.dag_id,
                task_id=ti.task_id,
                run_id=ti.run_id,
                map_index=-1 if map_index is None else map_index,
            )

    async def _log_tail(self, subscription: Any, lines: int) -> str | None:
        """The driver (submitter) log's last lines, through the namespace's shared client; None, with a
        warning, when it cannot be read in time (the RayJob succeeded: the task does too)."""
        from kueue_ray.hook import AsyncRayJobHook

        hook = AsyncRayJobHook(kubernetes_conn_id=self.kubernetes_conn_id)
        try:
            async with asyncio.timeout(LOG_TAIL_TIMEOUT_SECONDS), subscription.api_client() as client:
                return await hook.submitter_log_tail(self.name, self.namespace, lines, api_client=client)
        except Exception as exc:  # noqa: BLE001 - a missing log tail never fails a successful task
            from kueue_ray.api_errors import describe_error

            self.log.warning(
                "The Ray driver log of RayJob %s/%s could not be read (%s); the task succeeds without it",
                self.namespace,
                self.name,
                describe_error(exc),
            )
            return None

    async def _tell(self, story: Story, rayjob: dict, observation: Observation, subscription: Any) -> None:
        """Write to the task log what is new (``kueue_ray.narration``): a transition, with the queue position
        and the preemptor named; or, while it waits, a position that moved since the last line."""
        now = time.monotonic()
        version = subscription.workloads_version()
        if story.news(observation):
            position = await self._position(rayjob, observation, subscription)
            uid = preemptor_job_uid(observation.message)
            preemptor = subscription.rayjob_by_uid(uid) if uid else None
            self.log.info(describe_transition(self.namespace, self.name, observation, position, preemptor))
            story.told_position(position, now, version)
            return
        check = story.position_check_in(observation, now)
        # A position only moves when a Workload of the queue changes: with none since the last read, the
        # check costs no request, so waiting in a quiet queue stays free.
        if check is not None and check <= 0 and not story.position_current(version, now):
            position = await self._position(rayjob, observation, subscription)
            line = story.position_line(self.namespace, self.name, observation.phase, position, now, version)
            if line:
                self.log.info(line)

    async def _position(self, rayjob: dict, observation: Observation, subscription: Any) -> str | None:
        """The queue position for a QUEUED / INADMISSIBLE log line, from the LocalQueue's shared
        visibility read (asked for only when such a line is written)."""
        if observation.phase not in POSITION_PHASES or not observation.workload_name:
            return None
        queue = self.queue or ((rayjob.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)
        if not queue:
            return None
        positions = await subscription.pending_positions(queue)
        position = positions.get(observation.workload_name) if positions else None
        return position.describe() if position else None

    async def on_kill(self) -> None:
        """A user killed the task (mark failed / success, clear): delete the RayJob if this try owns it
        (operator) or is still its waiter in the same DAG run (sensor); otherwise say why it stays."""
        if self._fired:
            return
        from kueue_ray.hook import AsyncRayJobHook

        hook = AsyncRayJobHook(kubernetes_conn_id=self.kubernetes_conn_id)
        if self.owner:
            result = await hook.delete_if_owned(
                self.name, self.namespace, self.uid, AirflowIdentity(**self.owner)
            )
        elif self.waiter:
            result = await hook.delete_if_waiting(
                self.name, self.namespace, self.uid, AirflowIdentity(**self.waiter)
            )
        else:
            self.log.info("Not deleting RayJob %s/%s: this task only watches it", self.namespace, self.name)
            return
        self.log.info("Task killed: RayJob %s/%s (uid %s): %s", self.namespace, self.name, self.uid, result)
