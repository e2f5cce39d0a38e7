"""Waiting in a worker slot (``deferrable=False`` and the sensor's poke mode): the trigger's wait done
with synchronous reads, judged by the same ``kueue_ray.waiting.Watchdog`` and told in the same words, so a
task tells the same story wherever it waited.

Importing this module does not import ``kubernetes`` or Airflow's trigger machinery: the hook is passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kueue_ray.kube.server_clock import server_clock
from kueue_ray.phases import POSITION_PHASES
from kueue_ray.quota_holders import with_quota_holders
from kueue_ray.status import Observation
from kueue_ray.timeline import Timeline
from kueue_ray.verdicts import VerdictStatus
from kueue_ray.wait_policy import WaitPolicy
from kueue_ray.wait_step import Read, Step, WaitState, wait_step
from kueue_ray.waiting import WaitTarget, Watchdog, access_verdict
from kueue_ray.worker_log import DriverLog, FollowThread, LogBuffer, with_worker_tail

if TYPE_CHECKING:
    from kueue_ray.hook import RayJobHook

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


def transient(exc: BaseException) -> bool:
    """An API failure that says nothing about the RayJob (overload, a control plane in trouble, a dropped
    connection); a refusal (401, 403) or a bad request is not one."""
    status = getattr(exc, "status", None)
    if status is not None:
        return status in TRANSIENT_STATUSES
    from urllib3.exceptions import HTTPError

    return isinstance(exc, HTTPError | OSError)


def find_rayjob(hook: RayJobHook, namespace: str, uid: str) -> dict | None:
    """This project's RayJob with ``uid`` in ``namespace`` (e.g. a preemptor), for naming it in the log;
    None when there is none or the list fails (a name in a log line is not worth failing a task)."""
    try:
        rayjobs = hook.list_managed_rayjobs(namespace)
    except Exception:  # noqa: BLE001 - the log line falls back to Kueue's UIDs
        return None
    return next((r for r in rayjobs if (r.get("metadata") or {}).get("uid") == uid), None)


class WorkerWait:
    """The trigger's rules, one synchronous read at a time: ``deferrable=False`` and the sensor's poke mode.

    Same observe() / Watchdog / Timeline / Story as the trigger, so a task tells the same story whether it
    waited in the triggerer or in a worker slot.
    """

    def __init__(self, target: WaitTarget, policy: WaitPolicy, log: Any, tail_lines: int = 0) -> None:
        self.target = target
        self.tail_lines = tail_lines
        """Driver log lines the task shows: when positive, ``wait`` follows the log on a MultiKueue worker."""
        self.observation: Observation | None = None
        self.driver_log: DriverLog | None = None
        self.policy = policy
        self.log = log
        self.kind = target.kind()
        self.state = WaitState.start(self.kind, policy, Timeline())
        from kueue_ray.kube.refusals import RefusalWindow, refusal_timeout

        self.refusals = RefusalWindow(refusal_timeout())
        self.log.info("Limits: %s", policy.limits(Watchdog.admitted_limit))

    def step(self, hook: RayJobHook) -> dict[str, Any] | None:
        """Read the RayJob and its Workload once; the event payload when waiting is over, else None."""
        target = self.target
        try:
            rayjob, workload = hook.read_state(target.name, target.namespace, target.uid)
        except Exception as exc:
            if not transient(exc):
                return self.cannot_read(hook, exc)
            from kueue_ray.kube.errors import describe_error

            # The hook already retried it for a while: the API server is having a bad minute. Waiting goes
            # on (as in the triggerer); the next read decides.
            self.log.warning(
                "Reading RayJob %s/%s failed (%s); reading it again at the next poll",
                target.namespace,
                target.name,
                describe_error(exc),
            )
            return None
        clock = server_clock(getattr(hook, "conn_id", None) or "kubernetes_default")
        now, offset_s = clock.now(), clock.offset_s  # the clock the server's timestamps use
        step = wait_step(self.kind, self.state, Read(rayjob, workload, fresh=True), now, offset_s)
        if step.gone:
            return step.payload
        self.observation = step.observation
        self.refusals.cleared()
        self.tell(hook, step)
        local_queue = self.target.queue_of(rayjob)
        if step.verdict is not None and step.verdict.status == VerdictStatus.QUEUE_TIMEOUT and local_queue:
            queue, workloads = hook.quota_state(local_queue, target.namespace)
            step = step.ending(
                with_quota_holders(step.verdict, queue, workloads, step.observation.workload_name)
            )
        return step.payload

    def cannot_read(self, hook: RayJobHook, exc: BaseException) -> dict[str, Any] | None:
        """A read that failed for a reason other than a bad minute: a 401/403 is waited out for the refusal
        window (then the wait ends, saying what was refused and to whom), an API the cluster does not serve
        ends it at once; anything else is raised."""
        from kueue_ray.errors import ClusterAccessError
        from kueue_ray.kube.refusals import ApiNotServed, RefusedTooLong

        explained = hook.explained(exc, self.target.namespace) if hasattr(exc, "status") else exc
        if not isinstance(explained, ClusterAccessError):
            raise exc
        if getattr(exc, "status", None) not in (401, 403):  # not served: nothing to wait out
            verdict = access_verdict(ApiNotServed("", "", str(explained)))
            return self.target.payload(verdict, None, self.state.timeline)
        from kueue_ray.kube.errors import read_of
        from kueue_ray.kube.refusals import Denial

        verb, resource = (read_of(exc) or ("get", "rayjobs.ray.io"))[:2]
        denial = Denial.of(verb, resource, self.target.namespace, exc)
        started = self.refusals.refused(denial, time.monotonic())
        if self.refusals.expired():
            from kueue_ray.kube.errors import refusal_message

            window = self.refusals.timeout
            message = refusal_message(
                verb,
                resource,
                self.target.namespace,
                status=denial.status,
                said=denial.message,
                identity=hook.identity(),
                conn_id=hook.conn_id,
                seconds=window,
            )
            ended = RefusedTooLong(denial, window, message)
            return self.target.payload(access_verdict(ended), None, self.state.timeline)
        if started:
            self.log.warning(
                "%s This task keeps reading every %gs and fails if the refusal lasts %gs ([kueue_ray] "
                "refusal_timeout)",
                explained,
                self.policy.poll_interval,
                self.refusals.timeout,
            )
        return None

    def wait(self, hook: RayJobHook) -> dict[str, Any]:
        """Hold the worker slot and read every ``poll_interval`` seconds until waiting is over."""
        try:
            while (event := self.step(hook)) is None:
                self.follow_driver_log(hook)
                time.sleep(self.policy.poll_interval)
            return self.with_driver_log(event)
        finally:
            self.stop_driver_log()

    def follow_driver_log(self, hook: RayJobHook) -> None:
        """Between two reads: follow the driver log on the MultiKueue worker the RayJob runs on
        (``kueue_ray.worker_log.DriverLog``), while the task shows a log tail."""
        from kueue_ray.multikueue import worker_connection_id

        def follow_on(worker: str, buffer: LogBuffer) -> Callable[[], None]:
            worker_hook = type(hook)(kubernetes_conn_id=worker_connection_id(worker))
            return FollowThread(worker_hook, self.target.name, self.target.namespace, buffer).stop

        if self.driver_log is None:
            self.driver_log = DriverLog(self.tail_lines, follow_on)
        self.driver_log.observe(self.observation.worker_cluster if self.observation else None)

    def with_driver_log(self, event: dict[str, Any]) -> dict[str, Any]:
        """The ending ``event`` with the driver log followed on a worker (``driver_log_tail``), the
        following stopped."""
        tail = self.driver_log.text() if self.driver_log is not None else None
        self.stop_driver_log()
        return with_worker_tail(event, tail) or event

    def stop_driver_log(self) -> None:
        if self.driver_log is not None:
            self.driver_log.stop()

    def tell(self, hook: RayJobHook, step: Step) -> None:
        """Log what is new, as the trigger does: a transition (queue position, preemptor named) or, while
        waiting, a position that moved since the last line."""
        target, story, now = self.target, self.state.story, time.monotonic()
        rayjob, observation = step.read.obj, step.observation
        if step.news:
            position = self.position(hook, step.position_in, observation)
            uid = step.preemptor_uid
            preemptor = find_rayjob(hook, target.namespace, uid) if uid else None
            self.log.info(step.transition_line(position, preemptor))
            story.told_position(position, now)
            self.why_queued(hook, rayjob, observation, force=True)
        elif (check := story.position_check_in(observation, now)) is not None and check <= 0:
            queue = target.queue_of(rayjob) if observation.workload_name else None
            position = self.position(hook, queue, observation)
            line = story.position_line(target.namespace, target.name, observation.phase, position, now)
            if line:
                self.log.info(line)
            self.why_queued(hook, rayjob, observation)
        self.pods(hook, observation)

    def pods(self, hook: RayJobHook, observation: Observation) -> None:
        """As the trigger (``kueue_ray.trigger_story.tell_pods``): while the Ray cluster starts, its pods'
        phase and the scheduler's or kubelet's reason, written when they change."""
        from kueue_ray.pod_states import describe_pods, pod_states

        check = self.state.story.pods_check_in(observation, time.monotonic())
        if check is None or check > 0:
            return
        try:
            pods = hook.cluster_pods(observation.ray_cluster, self.target.namespace)
        except Exception:  # noqa: BLE001 - the pods are told at the next check
            pods = None
        if pods is None:
            self.state.story.pods_checked_at = time.monotonic()
            return
        told = describe_pods(pod_states(pods))
        if line := self.state.story.pods_line(
            self.target.namespace, self.target.name, told, time.monotonic()
        ):
            self.log.info(line)

    def why_queued(
        self, hook: RayJobHook, rayjob: dict, observation: Observation, force: bool = False
    ) -> None:
        """As the trigger (``kueue_ray.trigger_story.tell_why_queued``): who holds the quota, and whether
        waiting can admit it; read with the position."""
        from kueue_ray.holdings import holdings_of
        from kueue_ray.why_queued_log import why_queued_sentences

        queue = self.target.queue_of(rayjob)
        if observation.phase not in POSITION_PHASES or not observation.workload_name or not queue:
            return
        cluster_queue, workloads = hook.quota_state(queue, self.target.namespace)
        cohort = ((cluster_queue or {}).get("spec") or {}).get("cohortName")
        try:
            queues = hook.list_kueue_objects("clusterqueues") if cohort else []
            rayjobs = {r["metadata"].get("uid"): r for r in hook.list_managed_rayjobs(self.target.namespace)}
        except Exception:  # noqa: BLE001 - the explanation then leaves the cohort and the holders' tasks out
            queues, rayjobs = [], {}
        own = next((w for w in workloads if w["metadata"].get("name") == observation.workload_name), None)
        sentences = why_queued_sentences(cluster_queue, own, holdings_of(workloads), queues, rayjobs.get)
        for line in self.state.story.why_lines(self.target.namespace, self.target.name, sentences, force):
            self.log.info(line)

    def position(self, hook: RayJobHook, queue: str | None, observation: Observation) -> str | None:
        if not queue:
            return None
        found = hook.queue_position(self.target.namespace, queue, observation.workload_name)
        return found.describe() if found else None
