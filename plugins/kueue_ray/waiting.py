"""When to stop waiting, and waiting in a worker: what the triggers, the operators and the sensor share.

The ``Watchdog`` judges every observation by the task's ``kueue_ray.wait_policy.WaitPolicy``. ``WorkerWait`` is the
trigger's wait done with synchronous reads in a worker slot (``deferrable=False`` and the sensor's poke
mode), so a task tells the same story wherever it waited.

Importing this module does not import ``kubernetes`` or Airflow's trigger machinery: the hook is passed in.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from kueue_ray.api import parse_time, utcnow
from kueue_ray.naming import QUEUE_LABEL
from kueue_ray.narration import Story, name_preemptor, preemptor_job_uid, readable_quantities
from kueue_ray.phases import ADMITTED_PHASES, POSITION_PHASES, WAITING_PHASES, Phase
from kueue_ray.quota_holders import with_quota_holders
from kueue_ray.server_clock import server_clock
from kueue_ray.status import Observation, observe, pods_not_ready_hint
from kueue_ray.timeline import Timeline
from kueue_ray.verdicts import (
    API_NOT_SERVED,
    DELETED,
    EXECUTION_TIMEOUT,
    FAILED,
    INADMISSIBLE,
    PODS_NOT_READY,
    QUEUE_TIMEOUT,
    REFUSED,
    RUN_TIMEOUT,
    SUCCESS,
    TOO_MANY_PREEMPTIONS,
    Verdict,
)
from kueue_ray.wait_policy import WaitPolicy
from kueue_ray.workload import PODS_READY_TIMEOUT, admitted_since, owner_deleted, quota_lost_since

if TYPE_CHECKING:
    from kueue_ray.hook import RayJobHook

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


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
    """The API server's clock minus this process's (``kueue_ray.server_clock``): ``now`` is on the server's
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
                SUCCESS if self.succeeded(observation) else FAILED, observation.reason, observation.message
            )
        deadline = parse_time(policy.deadline)
        if deadline is not None and now >= deadline + timedelta(seconds=self.offset_s):
            return Verdict(
                EXECUTION_TIMEOUT,
                "ExecutionTimeout",
                f"execution_timeout passed at {policy.deadline} while it was {observation.phase.value}: "
                f"{observation.describe()}",
            )
        if policy.max_preemptions is not None and observation.preemptions > policy.max_preemptions:
            return Verdict(
                TOO_MANY_PREEMPTIONS,
                "MaxPreemptionsExceeded",
                f"preempted {observation.preemptions} times, more than "
                f"max_preemptions={policy.max_preemptions}; Kueue says: {observation.describe()}",
            )
        limit = policy.max_pods_ready_evictions
        if limit is not None and observation.pods_ready_evictions > limit:
            return Verdict(
                PODS_NOT_READY,
                PODS_READY_TIMEOUT,
                f"{pods_not_ready_hint(self.pods_ready_timeout)}. Kueue evicted it "
                f"{observation.pods_ready_evictions} times because its pods did not all become ready "
                f"(PodsReadyTimeout), more than max_pods_ready_evictions={limit}; Kueue says: "
                f"{observation.describe()}",
            )
        if phase is self.inadmissible_phase and policy.fail_on_inadmissible:
            waited = (now - self.inadmissible_since).total_seconds()
            if waited >= policy.inadmissible_grace:
                return Verdict(
                    INADMISSIBLE,
                    observation.reason,
                    f"Kueue cannot admit it: {observation.message} (unchanged for {waited:.0f}s, "
                    f"inadmissible_grace={policy.inadmissible_grace:g}s)",
                )
        if phase in self.waiting_phases and policy.queue_timeout is not None:
            waited = (now - self.waiting_since).total_seconds()
            if waited >= policy.queue_timeout:
                return Verdict(
                    QUEUE_TIMEOUT,
                    "QueueTimeout",
                    f"not admitted within queue_timeout={policy.queue_timeout:g}s (waiting since "
                    f"{self.waiting_since.isoformat()}); Kueue says: {observation.describe()}",
                )
        limit = getattr(policy, self.admitted_limit)
        if phase in self.admitted_phases and limit is not None:
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
        return Verdict(
            RUN_TIMEOUT,
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
        elif phase in self.admitted_phases:
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


def deleted_verdict(kind: str, namespace: str, name: str, uid: str, what: str) -> Verdict:
    """The verdict for an object deleted under a waiting task (``what``: when, e.g. "before it finished")."""
    return Verdict(DELETED, f"{kind}Deleted", f"{kind} {namespace}/{name} (uid {uid}) was deleted {what}")


def access_verdict(ended: BaseException) -> Verdict:
    """The verdict for a wait that can no longer read the cluster (``kueue_ray.refusals.RefusedTooLong``
    or ``ApiNotServed``); its message is the whole explanation."""
    from kueue_ray.refusals import ApiNotServed

    if isinstance(ended, ApiNotServed):
        return Verdict(API_NOT_SERVED, "ApiNotServed", ended.message)
    return Verdict(REFUSED, "Refused", str(ended))


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
    if observation.phase is Phase.RUNNING and observation.job_id:
        line += f" [Ray job {observation.job_id} on RayCluster {observation.ray_cluster}]"
    if observation.preemptions:
        line += f" [preempted {observation.preemptions}x so far]"
    if position:
        line += f" — {position}"
    return line


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

    def watchdog(self, policy: WaitPolicy) -> Watchdog:
        return Watchdog(policy, parse_time(self.submitted_at) or utcnow())


class WorkerWait:
    """The trigger's rules, one synchronous read at a time: ``deferrable=False`` and the sensor's poke mode.

    Same observe() / Watchdog / Timeline / Story as the trigger, so a task tells the same story whether it
    waited in the triggerer or in a worker slot.
    """

    def __init__(self, target: WaitTarget, policy: WaitPolicy, log: Any) -> None:
        self.target = target
        self.policy = policy
        self.log = log
        self.timeline = Timeline()
        self.watchdog = target.watchdog(policy)
        self.story = Story()
        from kueue_ray.refusals import RefusalWindow, refusal_timeout

        self.refusals = RefusalWindow(refusal_timeout())
        self.log.info("Limits: %s", policy.limits(self.watchdog.admitted_limit))

    def step(self, hook: RayJobHook) -> dict[str, Any] | None:
        """Read the RayJob and its Workload once; the event payload when waiting is over, else None."""
        target = self.target
        try:
            rayjob, workload = hook.read_state(target.name, target.namespace, target.uid)
        except Exception as exc:
            if not transient(exc):
                return self.cannot_read(hook, exc)
            from kueue_ray.api_errors import describe_error

            # The hook already retried it for a while: the API server is having a bad minute. Waiting goes
            # on (as in the triggerer); the next read decides.
            self.log.warning(
                "Reading RayJob %s/%s failed (%s); reading it again at the next poll",
                target.namespace,
                target.name,
                describe_error(exc),
            )
            return None
        if rayjob is None or owner_deleted(workload):
            verdict = deleted_verdict(
                "RayJob", target.namespace, target.name, target.uid, "before it finished"
            )
            return target.payload(verdict, None, self.timeline)
        self.refusals.cleared()
        observation = observe(rayjob, workload)
        clock = server_clock(getattr(hook, "conn_id", None) or "kubernetes_default")
        now, self.watchdog.offset_s = clock.now(), clock.offset_s  # the clock the server's timestamps use
        self.timeline.record(observation, now)
        self.tell(hook, rayjob, observation)
        verdict = self.watchdog.check(observation, workload, now)
        if verdict is None:
            return None
        local_queue = target.queue or ((rayjob["metadata"].get("labels") or {}).get(QUEUE_LABEL))
        if verdict.status == QUEUE_TIMEOUT and local_queue:
            queue, workloads = hook.quota_state(local_queue, target.namespace)
            verdict = with_quota_holders(verdict, queue, workloads, observation.workload_name)
        return target.payload(verdict, observation, self.timeline)

    def cannot_read(self, hook: RayJobHook, exc: BaseException) -> dict[str, Any] | None:
        """A read that failed for a reason other than a bad minute: a 401/403 is waited out for the refusal
        window (then the wait ends, saying what was refused and to whom), an API the cluster does not serve
        ends it at once; anything else is raised."""
        from kueue_ray.errors import ClusterAccessError
        from kueue_ray.refusals import ApiNotServed, RefusedTooLong

        explained = hook.explained(exc, self.target.namespace) if hasattr(exc, "status") else exc
        if not isinstance(explained, ClusterAccessError):
            raise exc
        if getattr(exc, "status", None) not in (401, 403):  # not served: nothing to wait out
            verdict = access_verdict(ApiNotServed("", "", str(explained)))
            return self.target.payload(verdict, None, self.timeline)
        from kueue_ray.api_errors import read_of
        from kueue_ray.refusals import Denial

        verb, resource = (read_of(exc) or ("get", "rayjobs.ray.io"))[:2]
        denial = Denial.of(verb, resource, self.target.namespace, exc)
        started = self.refusals.refused(denial, time.monotonic())
        if self.refusals.expired():
            from kueue_ray.api_errors import refusal_message

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
            return self.target.payload(access_verdict(ended), None, self.timeline)
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
        while (event := self.step(hook)) is None:
            time.sleep(self.policy.poll_interval)
        return event

    def tell(self, hook: RayJobHook, rayjob: dict, observation: Observation) -> None:
        """Log what is new, as the trigger does: a transition (queue position, preemptor named) or, while
        waiting, a position that moved since the last line."""
        target, story, now = self.target, self.story, time.monotonic()
        if story.news(observation):
            position = self.position(hook, rayjob, observation)
            uid = preemptor_job_uid(observation.message)
            preemptor = find_rayjob(hook, target.namespace, uid) if uid else None
            self.log.info(
                describe_transition(target.namespace, target.name, observation, position, preemptor)
            )
            story.told_position(position, now)
            self.why_queued(hook, rayjob, observation, force=True)
        elif (check := story.position_check_in(observation, now)) is not None and check <= 0:
            position = self.position(hook, rayjob, observation)
            line = story.position_line(target.namespace, target.name, observation.phase, position, now)
            if line:
                self.log.info(line)
            self.why_queued(hook, rayjob, observation)
        self.pods(hook, observation)

    def pods(self, hook: RayJobHook, observation: Observation) -> None:
        """As the trigger (``kueue_ray.trigger_story.tell_pods``): while the Ray cluster starts, its pods'
        phase and the scheduler's or kubelet's reason, written when they change."""
        from kueue_ray.pod_states import describe_pods, pod_states

        check = self.story.pods_check_in(observation, time.monotonic())
        if check is None or check > 0:
            return
        try:
            pods = hook.cluster_pods(observation.ray_cluster, self.target.namespace)
        except Exception:  # noqa: BLE001 - the pods are told at the next check
            pods = None
        if pods is None:
            self.story.pods_checked_at = time.monotonic()
            return
        told = describe_pods(pod_states(pods))
        if line := self.story.pods_line(self.target.namespace, self.target.name, told, time.monotonic()):
            self.log.info(line)

    def why_queued(
        self, hook: RayJobHook, rayjob: dict, observation: Observation, force: bool = False
    ) -> None:
        """As the trigger (``kueue_ray.trigger_story.tell_why_queued``): who holds the quota, and whether
        waiting can admit it; read with the position."""
        from kueue_ray.why_queued import why_queued_sentences

        queue = self.target.queue or ((rayjob["metadata"].get("labels") or {}).get(QUEUE_LABEL))
        if observation.phase not in POSITION_PHASES or not observation.workload_name or not queue:
            return
        cluster_queue, workloads = hook.quota_state(queue, self.target.namespace)
        cohort = ((cluster_queue or {}).get("spec") or {}).get("cohortName")
        try:
            queues = hook.list_kueue_objects("clusterqueues") if cohort else []
            rayjobs = {r["metadata"].get("uid"): r for r in hook.list_managed_rayjobs(self.target.namespace)}
        except Exception:  # noqa: BLE001 - the explanation then leaves the cohort and the holders' tasks out
            queues, rayjobs = [], {}
        sentences = why_queued_sentences(
            cluster_queue, workloads, queues, observation.workload_name, rayjobs.get
        )
        for line in self.story.why_lines(self.target.namespace, self.target.name, sentences, force):
            self.log.info(line)

    def position(self, hook: RayJobHook, rayjob: dict, observation: Observation) -> str | None:
        queue = self.target.queue or ((rayjob["metadata"].get("labels") or {}).get(QUEUE_LABEL))
        if observation.phase not in POSITION_PHASES or not observation.workload_name or not queue:
            return None
        found = hook.queue_position(self.target.namespace, queue, observation.workload_name)
        return found.describe() if found else None
