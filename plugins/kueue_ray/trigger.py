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
evictions for pods that never got ready, or the RayJob deleted under us. Everything else is logged, not reported. A passing API failure is never a reason: reads
retry until the API server answers, and anything unexpected is logged and the wait resumes, because a
trigger that ends without an event fails its task for a reason that has nothing to do with the RayJob.
Two answers do end it, since waiting cannot outlast them: a 401/403 to a read the wait needs that lasts
``[kueue_ray] refusal_timeout`` (``kueue_ray.kube.refusals.RefusalWindow``), and an API group the cluster does
not serve; the event says what was refused, to whom and how to check it.

A success ends the task right here when the task allows it (``end_in_triggerer``, decided by the operator
or sensor when it deferred): the trigger writes the closing lines and the driver log tail to the task log
and yields Airflow's ``TaskSuccessEvent`` with the XComs the worker would have pushed
(``kueue_ray.results``), so no worker slot is taken and no scheduler round trip is waited for. Everything
else (failures, which must raise so that retries apply; give-ups, which delete the RayJob; tasks whose end
runs user code) fires a plain TriggerEvent and resumes on a worker.

Queue metrics (``kueue_ray.metrics``) are counted here, where the transitions are seen.

Side effects are limited to ``on_kill`` (a user marked the task failed/success or cleared it), which
deletes the RayJob only once the task instance has left the deferred state (``WaitTrigger.on_kill``: a
triggerer that lost the trigger while it stalled is told the same as a user's kill), and only if this very
task try still owns it (the operator) or is still its registered waiter (a sensor of the same DAG run): a cleared task's new try may already have adopted or re-registered
on the RayJob, and Airflow may briefly run a trigger twice. ``cleanup`` deletes nothing, because it also
runs on every triggerer restart.

Importing this module does not import ``kubernetes``: the hub imports it only when its loops run, and the
hook is imported inside the methods that call the API.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import TaskSuccessEvent, TriggerEvent

from kueue_ray.hub import ADMITTED, NOTICE, QUEUED
from kueue_ray.kube.api import utcnow
from kueue_ray.kube.refusals import ApiNotServed, RefusedTooLong
from kueue_ray.kube.server_clock import server_clock
from kueue_ray.metrics import WaitMetrics
from kueue_ray.multikueue import FOLLOWED_LINES, worker_connection_id
from kueue_ray.naming import (
    DEPLOYMENT_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    AirflowIdentity,
)
from kueue_ray.narration import Story
from kueue_ray.phases import WAITING_PHASES
from kueue_ray.priority_change import changed_by
from kueue_ray.quota_holders import with_quota_holders
from kueue_ray.results import LOG_TAIL_HEADER, TriggerEnding, push_xcoms, summary_lines
from kueue_ray.status import Observation
from kueue_ray.timeline import Timeline
from kueue_ray.trigger_base import WaitTrigger
from kueue_ray.trigger_story import tell_pods, tell_priority, tell_why_queued
from kueue_ray.verdicts import Verdict, VerdictStatus
from kueue_ray.wait_step import Read, Step, WaitState, newest, wait_step
from kueue_ray.waiting import WaitTarget, access_verdict
from kueue_ray.worker_log import DriverLog, LogBuffer, follow_quietly, with_worker_tail

if TYPE_CHECKING:
    from kueue_ray.hook import AsyncRayJobHook

UNWATCHED_POLL_SECONDS = 15.0
"""Re-read interval for a RayJob the hub's label-selected watch does not cover (sensor on a foreign job)."""
LOG_TAIL_TIMEOUT_SECONDS = 15.0
"""How long reading the driver log may hold up a success that ends in the triggerer."""


@dataclass
class _Progress:
    """What a trigger has learnt while waiting; it survives a wait resumed after an error."""

    state: WaitState
    metrics: WaitMetrics

    @property
    def story(self) -> Story:
        return self.state.story

    @property
    def timeline(self) -> Timeline:
        return self.state.timeline


def _watched(rayjob: dict, deployment: str) -> bool:
    """Whether the hub's RayJob watch (label-selected to this project's RayJobs of ``deployment``, or to all
    of them for "") sees this one."""
    labels = (rayjob.get("metadata") or {}).get("labels") or {}
    if deployment and labels.get(DEPLOYMENT_LABEL) != deployment:
        return False
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


async def _apply(update: Any, acted_on: Read, subscription: Any) -> Read:
    """The read after one hub update: the RayJob or its Workload replaced by the update's.

    A RayJob outside the hub's watch is re-read whenever Kueue changes its Workload (to a newer one than
    the wait acted on: ``wait_step.newest``), since that is when its status matters.
    """
    from kueue_ray.hub.resources import RAYJOB

    if update.kind == RAYJOB:
        return Read(update.object, acted_on.related)
    read = Read(acted_on.obj, update.object)
    if acted_on.obj is None or _watched(acted_on.obj, subscription.deployment):
        return read
    if newest(read, acted_on).related is not update.object:  # older than what was acted on
        return acted_on
    return Read((await subscription.current(reread_rayjob=True))[0], update.object)


class RayJobTrigger(WaitTrigger):
    """Wait for one RayJob (by name and uid) through queueing, admission, preemption and completion.

    :param target: the fields of its ``WaitTarget``: name, namespace, uid (another object later created
        under the same name is not "ours"), queue (the LocalQueue, for queue positions; read from the
        RayJob's label when None), priority (the WorkloadPriorityClass, for the log), submitted_at (ISO
        time of submission, the queue clock's start).
    :param kubernetes_conn_id: the Airflow ``kubernetes`` connection.
    :param policy: when to stop waiting (``kueue_ray.wait_policy.WaitPolicy``, or its ``to_dict`` as the
        triggerer passes it back); None: the defaults.
    :param owner: the task try that owns the RayJob: {dag_id, run_id, task_id, map_index, try_number}.
        on_kill deletes the RayJob while this try still owns it (the operator).
    :param waiter: the sensor try waiting for the RayJob, same keys as ``owner``; on_kill deletes the RayJob
        only if it belongs to the same DAG run and still names this try as its waiter (the sensor with
        ``delete_on_kill``). Neither given: on_kill deletes nothing.
    :param timeline: a Timeline dict to continue (None starts a new one).
    :param end_in_triggerer: on success, end the task here (``kueue_ray.results.TriggerEnding.to_dict``:
        XComs and log tail, decided by the task when it deferred); None resumes it on a worker.
    :param deferred_at: ISO time the task deferred (``WaitTrigger``); a trigger starting much later is a
        restart, which must not count the RayJob's past in the queue metrics again (``kueue_ray.metrics``).
    """

    kind = "RayJob"
    target_type = WaitTarget
    target: WaitTarget

    def __init__(
        self,
        *,
        owner: dict[str, Any] | None = None,
        waiter: dict[str, Any] | None = None,
        timeline: dict[str, Any] | None = None,
        end_in_triggerer: dict[str, Any] | None = None,
        **arguments: Any,
    ) -> None:
        super().__init__(**arguments)
        self.owner = dict(owner) if owner else None
        self.waiter = dict(waiter) if waiter else None
        self.timeline = timeline
        self.end_in_triggerer = dict(end_in_triggerer) if end_in_triggerer else None
        self._driver_log = DriverLog(self._tail_lines(), self._follow_on)
        """The driver log followed on a MultiKueue worker (``kueue_ray.worker_log``)."""

    def arguments(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "waiter": self.waiter,
            "timeline": self.timeline,
            "end_in_triggerer": self.end_in_triggerer,
        }

    hook: AsyncRayJobHook

    def make_hook(self) -> AsyncRayJobHook:
        from kueue_ray.hook import AsyncRayJobHook

        return AsyncRayJobHook(kubernetes_conn_id=self.kubernetes_conn_id)

    def start(self) -> _Progress:
        target = self.target
        wait_metrics = WaitMetrics(
            self.uid,
            queue=target.queue,
            priority=target.priority,
            namespace=self.namespace,
            deferred_at=self.deferred_at,
            started=utcnow(),
        )
        self.log.info(
            "Waiting for RayJob %s/%s (uid %s, queue %s, priority %s) through the shared watch",
            self.namespace,
            self.name,
            self.uid,
            target.queue,
            target.priority,
        )
        from kueue_ray.hub import HUB

        # Spread over one shared visibility read's freshness: the checks of tasks queued together still
        # share one read per interval, and no pass of the event loop writes thousands of lines.
        story = Story(spread=random.uniform(0.0, HUB.settings.pending_workloads_ttl_seconds))
        timeline = target.timeline(self.timeline)
        return _Progress(WaitState.start(target.kind(), self.policy, timeline, story), wait_metrics)

    async def wait_once(self, progress: _Progress) -> TriggerEvent:
        """Follow the RayJob through the hub until the Watchdog says waiting is over; the event to fire.

        Everything it learns is kept in ``progress``, so a wait resumed after an error continues the same
        timeline and clocks.
        """
        from kueue_ray.hub import HUB

        async with HUB.subscribe(
            self.kubernetes_conn_id,
            self.namespace,
            self.name,
            self.uid,
            self.policy.resync_interval,
            deployment=(self.owner or self.waiter or {}).get("deployment") or "",
            reader=self.hook,
        ) as subscription:
            try:
                return await self._follow(progress, subscription)
            except (RefusedTooLong, ApiNotServed) as ended:
                return self._cannot_read(progress, ended)
            finally:
                self._driver_log.stop()

    def _cannot_read(self, progress: _Progress, ended: BaseException) -> TriggerEvent:
        """The wait can no longer read the cluster (refused for the whole window, or an API not served):
        fail the task with the reason; the RayJob is left as it is (nothing here may touch it)."""
        verdict = access_verdict(ended)
        self.log.error(verdict.message)
        progress.metrics.ended(verdict.status, verdict.reason, None)
        return self.fire(self.target.payload(verdict, None, progress.timeline))

    async def _follow(self, progress: _Progress, subscription: Any) -> TriggerEvent | TaskSuccessEvent:
        """``wait_once`` inside the subscription; raises ``RefusedTooLong`` or ``ApiNotServed`` when the
        reads it needs stop working for good."""
        kind, state = self.target.kind(), progress.state
        read = Read(*await subscription.current())
        next_reread = None
        if read.obj is not None and not _watched(read.obj, subscription.deployment):
            reread = min(self.policy.resync_interval, UNWATCHED_POLL_SECONDS)
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
        if read.obj is not None:
            subscription.queue = self.target.queue_of(read.obj)
        clock = server_clock(self.kubernetes_conn_id)
        while True:
            ended = subscription.access()
            if ended is not None:
                raise ended
            # On the API server's clock, like the Workload's timestamps the queue and run clocks start from.
            now = clock.now()
            step = wait_step(kind, state, read, now, clock.offset_s)
            if step.gone:
                assert step.verdict is not None
                self.log.error(step.verdict.message)
                progress.metrics.ended(step.verdict.status, step.verdict.reason, None)
                return self.fire(step.payload)
            read = step.read
            rayjob, workload, observation = read.obj, read.related, step.observation
            progress.metrics.recorded(state.timeline, observation.cluster_queue)
            subscription.stage = QUEUED if observation.phase in WAITING_PHASES else ADMITTED
            await self._tell(step, state.story, subscription)
            await tell_pods(self, state.story, observation, subscription)
            tell_priority(self, state.story, rayjob, workload)
            state.timeline.record_priority(workload, changed_by(rayjob), now)
            if not observation.terminal:
                self._driver_log.observe(observation.worker_cluster)
            if step.confirm:
                # A clock ran out on what the hub's cache holds, which may be a watch event (or, while
                # watches are refused, a polling interval) behind: a RayJob evicted or finished a moment
                # ago must not be given up on. Judge again on what the API server says now.
                read = Read(*await subscription.current(reread_rayjob=True, reread_workload=True), fresh=True)
                continue
            if step.verdict is not None and step.verdict.status == VerdictStatus.QUEUE_TIMEOUT:
                step = step.ending(await self._with_quota_holders(step.verdict, observation, subscription))
            if step.verdict is not None:
                verdict = step.verdict
                progress.metrics.ended(verdict.status, verdict.reason, observation.cluster_queue)
                # Only a triggerer can end a task: outside one (``dag.test()`` runs the trigger inline and
                # hands the task only a TriggerEvent's payload) the task resumes and finishes itself.
                if (
                    verdict.status == VerdictStatus.SUCCESS
                    and self.end_in_triggerer
                    and self.task_instance is not None
                ):
                    return await self._end_here(verdict, observation, state.timeline, subscription)
                return self.fire(with_worker_tail(step.payload, self._driver_log.text()))
            read = Read(read.obj, read.related)  # acted on: not fresh any more
            waits = []
            if next_reread is not None:
                waits.append(next_reread - time.monotonic())
            if step.deadline is not None:
                waits.append(step.deadline + 0.05)
            position_check = state.story.position_check_in(observation, time.monotonic())
            if position_check is not None:
                waits.append(position_check)
            pods_check = state.story.pods_check_in(observation, time.monotonic())
            if pods_check is not None:
                waits.append(pods_check)
            # Nothing to time out on: the hub's watch, and its relist as the safety net, bring every change.
            update = await subscription.next_update(max(0.0, min(waits)) if waits else None)
            if update is None:
                if next_reread is not None and time.monotonic() >= next_reread:
                    read = Read(*await subscription.current(reread_rayjob=True))
                    next_reread = time.monotonic() + reread
                continue
            if update.kind == NOTICE:  # how waiting works now, e.g. polling while watches are refused
                self.log.warning(update.message)
                continue
            read = await _apply(update, read, subscription)

    async def _with_quota_holders(
        self, verdict: Verdict, observation: Observation, subscription: Any
    ) -> Verdict:
        """The queue timeout's message with what held the ClusterQueue's quota at the end."""
        local_queue = subscription.queue or self.target.queue
        if not local_queue:
            return verdict
        try:
            async with subscription.api_client() as client:
                queue, workloads = await self.hook.quota_state(local_queue, self.namespace, api_client=client)
        except Exception:  # noqa: BLE001 - no shared client now: the timeout stands without the detail
            return verdict
        return with_quota_holders(verdict, queue, workloads, observation.workload_name)

    async def _end_here(
        self, verdict: Verdict, observation: Observation, timeline: Timeline, subscription: Any
    ) -> TaskSuccessEvent:
        """End a successful task in the triggerer: the log lines and XComs ``execute_complete`` would have
        written on a worker (``kueue_ray.results``), then Airflow's ``TaskSuccessEvent``."""
        from kueue_ray.links import dashboard_url, worker_dashboard_template

        ending = TriggerEnding.from_dict(self.end_in_triggerer)
        if observation.worker_cluster:  # the dashboard is the worker's, as the worker's link renders it
            template = await worker_dashboard_template(observation.worker_cluster)
            ending = replace(ending, links=dict.fromkeys(ending.links, template))
        payload = self.target.payload(verdict, observation, timeline)
        for line in summary_lines(payload, subscription.rayjob_by_uid):
            self.log.info(line)
        # Every closing line is written before the XComs are stored. Airflow 3.3.2's triggerer supervisor
        # reads a trigger's log lines and its requests on two sockets, and closes the trigger's log file
        # as soon as it learns the trigger finished: lines written after the last request could reach it
        # after that and land in the triggerer's own output instead of the task log. Lines written before
        # a request are read no later than that request is answered.
        if ending.log_tail_lines > 0:
            tail = await self._log_tail(subscription, ending.log_tail_lines, observation.worker_cluster)
            if tail:
                self.log.info(LOG_TAIL_HEADER, ending.log_tail_lines, tail)
        self.log.info(
            "RayJob %s/%s succeeded: the task ends here in the triggerer, no worker needed",
            self.namespace,
            self.name,
        )
        await push_xcoms(self.task_instance, ending.xcoms(payload, dashboard_url))
        self._fired = True
        return TaskSuccessEvent()

    def _tail_lines(self) -> int:
        """The driver log lines this task shows: its ``log_tail_lines`` when it ends here, else as many as a
        resumed task may want (``FOLLOWED_LINES``, trimmed there)."""
        if self.end_in_triggerer is None:
            return FOLLOWED_LINES
        return TriggerEnding.from_dict(self.end_in_triggerer).log_tail_lines

    def _follow_on(self, worker: str, buffer: LogBuffer) -> Callable[[], Any]:
        """Follow the driver log on MultiKueue worker ``worker`` (``DriverLog``'s follower): the worker's
        copy is deleted as soon as the job finishes, so it is read while it runs."""
        hook = type(self.hook)(kubernetes_conn_id=worker_connection_id(worker))
        return asyncio.create_task(follow_quietly(hook, self.name, self.namespace, buffer)).cancel

    async def _log_tail(self, subscription: Any, lines: int, worker: str | None = None) -> str | None:
        """The driver (submitter) log's last lines, through the namespace's shared client, or through the
        MultiKueue ``worker``'s connection when the Ray job ran there; None, with a warning, when it cannot
        be read in time or there is no such connection (the RayJob succeeded: the task does too)."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        from kueue_ray.multikueue import copy_gone, last_lines, missing_connection

        try:
            async with asyncio.timeout(LOG_TAIL_TIMEOUT_SECONDS):
                if worker:
                    worker_hook = type(self.hook)(kubernetes_conn_id=worker_connection_id(worker))
                    tail = await worker_hook.submitter_log_tail(self.name, self.namespace, lines)
                    tail = tail or last_lines(self._driver_log.text(), lines)
                    if tail is None:
                        self.log.info(copy_gone(worker))
                    return tail
                async with subscription.api_client() as client:
                    return await self.hook.submitter_log_tail(
                        self.name, self.namespace, lines, api_client=client
                    )
        except AirflowNotFoundException:
            assert worker is not None  # the namespace's client is the trigger's own connection
            self.log.warning(missing_connection(worker, "the Ray driver log"))
            return None
        except Exception as exc:  # noqa: BLE001 - a missing log tail never fails a successful task
            from kueue_ray.kube.errors import describe_error

            self.log.warning(
                "The Ray driver log of RayJob %s/%s could not be read (%s); the task succeeds without it",
                self.namespace,
                self.name,
                describe_error(exc),
            )
            return None

    async def _tell(self, step: Step, story: Story, subscription: Any) -> None:
        """Write to the task log what is new (``kueue_ray.narration``): a transition, with the queue position
        and the preemptor named; or, while it waits, a position that moved since the last line."""
        observation, rayjob = step.observation, step.read.obj
        now = time.monotonic()
        version = subscription.workloads_version()
        if step.news:
            position = await self._position(step.position_in, observation, subscription)
            uid = step.preemptor_uid
            self.log.info(step.transition_line(position, subscription.rayjob_by_uid(uid) if uid else None))
            story.told_position(position, now, version)
            await tell_why_queued(self, story, rayjob, observation, subscription, force=True)
            return
        check = story.position_check_in(observation, now)
        # A position only moves when a Workload of the queue changes: with none since the last read, the
        # check costs no request, so waiting in a quiet queue stays free.
        if check is not None and check <= 0 and not story.position_current(version, now):
            queue = self.target.queue_of(rayjob) if observation.workload_name else None
            position = await self._position(queue, observation, subscription)
            line = story.position_line(self.namespace, self.name, observation.phase, position, now, version)
            if line:
                self.log.info(line)
            await tell_why_queued(self, story, rayjob, observation, subscription)

    async def kill(self) -> None:
        """The task let go of the RayJob (``WaitTrigger.on_kill``): delete it if this try owns it (operator)
        or is still its waiter in the same DAG run (sensor); otherwise say why it stays."""
        if self.owner:
            result = await self.hook.delete_if_owned(
                self.name, self.namespace, self.uid, AirflowIdentity(**self.owner)
            )
        elif self.waiter:
            result = await self.hook.delete_if_waiting(
                self.name, self.namespace, self.uid, AirflowIdentity(**self.waiter)
            )
        else:
            self.log.info("Not deleting RayJob %s/%s: this task only watches it", self.namespace, self.name)
            return
        self.log.info("Task killed: RayJob %s/%s (uid %s): %s", self.namespace, self.name, self.uid, result)
