"""What happened to a RayJob while Airflow waited: queueing, admission checks, admissions, preemptions,
evictions for pods that never got ready, resource use.

The trigger feeds every observed transition into a :class:`Timeline`; the result travels in the trigger
event and lands in XCom, so it must survive ``to_dict`` / ``from_dict`` (JSON only) and keep accumulating
after a round trip (a triggerer restart resumes from the dict it last emitted).

Every phase change is also kept in ``transitions`` (when, which phase, Kueue's or KubeRay's reason and
message), so the Kueue tab of a task can draw what happened as spans (``kueue_ray.ui.spans``) instead of
only totals.

Time between two observations is attributed to the phase seen at the first of them. Resource-seconds
count the admitted ``resourceUsage`` of the current admission for the time spent RUNNING under it
(e.g. 2 GPUs for 60 s -> ``{"nvidia.com/gpu": 120.0}``): what the job actually consumed, not what it
held while its cluster was starting or being torn down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kueue_ray.kube.api import parse_time
from kueue_ray.phases import (
    ADMITTED_PHASES,
    EVICTION_PHASES,
    HOLDING_QUOTA_PHASES,
    TERMINAL_PHASES,
    WAITING_PHASES,
    Phase,
)
from kueue_ray.quantity import parse_quantity
from kueue_ray.status import Observation
from kueue_ray.workload import PODS_READY_TIMEOUT, QUOTA_RESERVED, workload_priority

Timestamp = datetime | float | int | str


def to_epoch(at: Timestamp) -> float:
    """datetime (naive = UTC), epoch seconds or ISO 8601 text -> epoch seconds."""
    moment = parse_time(at) if isinstance(at, str) else at
    if moment is None:
        raise ValueError(f"{at!r} is not a timestamp: expected ISO 8601 text, a datetime or epoch seconds")
    if isinstance(moment, datetime):
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return float(moment)


def to_iso(epoch: float | None) -> str | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC).isoformat()


@dataclass(slots=True)  # a triggerer holds one per waiting task
class Timeline:
    submitted_at: float | None = None
    admissions: list[dict] = field(default_factory=list)
    """[{"at", "cluster_queue", "flavors", "reserved_at", "queued_since", "worker_cluster"}], one per
    (re-)admission: when Kueue admitted it (``at``), when it reserved the quota (``reserved_at``: earlier
    than ``at`` only when admission checks had to pass), when this wait for admission began
    (``queued_since``: submission, or the preemption or eviction before it), and the MultiKueue worker
    cluster it was dispatched to (None without MultiKueue)."""
    preemptions: list[dict] = field(default_factory=list)
    """[{"at", "reason", "message"}], one per preemption."""
    evictions: list[dict] = field(default_factory=list)
    """[{"at", "reason", "message"}], one per eviction that was not a preemption: ``PodsReadyTimeout``
    (pods not ready in time), ``AdmissionCheck``, stopped queues, ..."""
    finished_at: float | None = None
    final_phase: str | None = None
    queued_seconds: float = 0.0
    """Time not admitted (submitted, queued, inadmissible, waiting for admission checks), over all waits."""
    awaiting_checks_seconds: float = 0.0
    """The part of ``queued_seconds`` spent with quota reserved, waiting for admission checks."""
    admitted_seconds: float = 0.0
    """Time holding quota (cluster starting, running, retrying, being preempted)."""
    running_seconds: float = 0.0
    resource_seconds: dict[str, float] = field(default_factory=dict)
    phase: str | None = None
    last_observed_at: float | None = None
    resource_usage: dict[str, str] = field(default_factory=dict)
    """Admitted resources of the current admission."""
    preemption_count: int = 0
    """Kueue preemptions (Observation.preemptions) already accounted for in ``preemptions``."""
    pods_ready_eviction_count: int = 0
    """``PodsReadyTimeout`` evictions (Observation.pods_ready_evictions) already listed in ``evictions``."""
    queued_since: float | None = None
    """When the current wait for admission began (None: at submission)."""
    priority: list | None = None
    """The Workload's [priority class, priority value] last seen (``record_priority``)."""
    quota_reserved_at: float | None = None
    """When Kueue reserved quota for the admission being waited for (admission checks pending)."""
    transitions: list[dict] = field(default_factory=list)
    """[{"at", "phase", "reason", "message"}], one per phase change, oldest first. What happened before
    the first observation is filled in from the objects' own timestamps (see ``_catch_up``)."""
    worker_cluster: str | None = None
    """The MultiKueue worker cluster that last ran it (``Observation.worker_cluster``)."""

    def record(self, observation: Observation, at: Timestamp) -> bool:
        """Account for the time since the last observation and note this one; True if the phase changed."""
        now = to_epoch(at)
        previous = Phase(self.phase) if self.phase else None
        current = observation.phase
        if self.submitted_at is None:
            self.submitted_at = now
        admitted_at = None
        current_since = now
        first_look = self.last_observed_at is None
        if self.last_observed_at is None:
            admitted_at = self._catch_up(observation, self.submitted_at, now)
            current_since = self._transitions_before(observation, admitted_at, now)
        elif previous is not None:
            self._attribute(previous, max(0.0, now - self.last_observed_at))
        self.last_observed_at = max(now, self.last_observed_at or now)
        if current is Phase.AWAITING_CHECKS and self.quota_reserved_at is None:
            self.quota_reserved_at = now

        newly_admitted = current in ADMITTED_PHASES and previous not in ADMITTED_PHASES
        # First seen over: it was admitted if Kueue says so (finished Workloads keep Admitted=True), or it
        # ended while holding quota other than by a deactivation (which may come before admission, e.g. a
        # rejected admission check).
        was_admitted = observation.admitted_at is not None or (
            observation.cluster_queue is not None and current is not Phase.DEACTIVATED
        )
        first_seen_finished = current in TERMINAL_PHASES and not self.admissions and was_admitted
        # First seen being evicted (e.g. a waiter that starts while Kueue preempts it): the admission it is
        # losing happened, and comes before the eviction recorded below.
        first_seen_evicted = first_look and current in EVICTION_PHASES and was_admitted
        if newly_admitted or first_seen_finished or first_seen_evicted:
            at = admitted_at if admitted_at is not None else now
            self.admissions.append(
                {
                    "at": at,
                    "cluster_queue": observation.cluster_queue,
                    "flavors": observation.flavors,
                    "reserved_at": min(self.quota_reserved_at or at, at),
                    "queued_since": self.queued_since if self.queued_since is not None else self.submitted_at,
                    "worker_cluster": observation.worker_cluster,
                }
            )
            self.quota_reserved_at = None
            self.resource_usage = dict(observation.resource_usage)
        elif current in ADMITTED_PHASES and observation.resource_usage:
            self.resource_usage = dict(observation.resource_usage)
        if observation.worker_cluster:
            self.worker_cluster = observation.worker_cluster
            if self.admissions and not self.admissions[-1].get("worker_cluster"):
                # the dispatch became known after the admission was noted (a read between two writes)
                self.admissions[-1]["worker_cluster"] = observation.worker_cluster

        # Kueue's Preempted condition says why (InClusterQueue, InCohortReclamation, ...) in its own words;
        # the Evicted reason alone is just "Preempted".
        kueue_words = observation.last_preemption or {
            "reason": observation.reason,
            "message": observation.message,
        }
        if current is Phase.PREEMPTED and previous is not Phase.PREEMPTED:
            self.preemptions.append({"at": now, **kueue_words})
            self._requeued(now)
            if observation.preemptions > self.preemption_count:
                self.preemption_count += 1
        while observation.preemptions > self.preemption_count:
            # The PREEMPTED moment itself was not observed (e.g. RUNNING straight to QUEUED).
            self.preemptions.append({"at": now, **kueue_words})
            self._requeued(now)
            self.preemption_count += 1
            self._note(Phase.PREEMPTED, now, kueue_words["reason"], kueue_words["message"])
        self._record_evictions(observation, previous, now)

        if current in TERMINAL_PHASES and self.final_phase is None:
            self.finished_at = self.finished_at or now  # the catch-up may know the Ray job's own end
            self.final_phase = current.value
        if current is not previous or (self.transitions and self.transitions[-1]["phase"] != current.value):
            if current in TERMINAL_PHASES:
                # set with final_phase just above, or at the terminal observation that set final_phase
                # (to_dict and from_dict keep both)
                assert self.finished_at is not None
                since = self.finished_at
            else:
                since = current_since
            self._note(current, since, observation.reason, observation.message)
        self.phase = current.value
        return current is not previous

    def _record_evictions(self, observation: Observation, previous: Phase | None, now: float) -> None:
        """Evictions other than preemptions; ``PodsReadyTimeout`` ones are counted from the Workload's
        eviction stats, so one whose PODS_NOT_READY moment was not observed is listed too."""
        current = observation.phase
        said = {"reason": observation.reason, "message": observation.message}
        if current in (Phase.PODS_NOT_READY, Phase.EVICTED) and previous is not current:
            self.evictions.append({"at": now, **said})
            self._requeued(now)
            if (
                current is Phase.PODS_NOT_READY
                and observation.pods_ready_evictions > self.pods_ready_eviction_count
            ):
                self.pods_ready_eviction_count += 1
        while observation.pods_ready_evictions > self.pods_ready_eviction_count:
            self.evictions.append({"at": now, "reason": PODS_READY_TIMEOUT, "message": observation.message})
            self._requeued(now)
            self.pods_ready_eviction_count += 1

    def record_priority(self, workload: dict | None, changed_by: str | None, at: Timestamp) -> bool:
        """A change of the Workload's priority (its RayJob relabelled, e.g. from the Kueue tab: Kueue
        carries the class to the Workload) as a transition of the current phase, reason
        ``PriorityChanged``, saying from what, to what and who changed it; True if it changed."""
        priority = workload_priority(workload)
        if priority is None or not self.phase:
            return False
        seen = list(priority)  # as the XCom's JSON keeps it
        before, self.priority = self.priority, seen
        if before is None or before == seen:
            return False
        by = f", changed from Airflow by {changed_by}" if changed_by else ""
        words = f"priority {before[0]} ({before[1]}) -> {seen[0]} ({seen[1]}){by}"
        self._note(Phase(self.phase), to_epoch(at), "PriorityChanged", words)
        return True

    def _requeued(self, at: float) -> None:
        """Kueue took the quota away: the next admission is waited for from here."""
        self.queued_since = at
        self.quota_reserved_at = None

    def _note(self, phase: Phase, at: float, reason: str = "", message: str = "") -> None:
        """Append a transition, never before the previous one (clocks and 1 s precision differ)."""
        if self.transitions:
            at = max(at, self.transitions[-1]["at"])
        self.transitions.append({"at": at, "phase": phase.value, "reason": reason, "message": message})

    def _transitions_before(self, observation: Observation, reserved_at: float | None, now: float) -> float:
        """Note the phases a late first observation implies and return since when the current one holds.

        Queued from submission; admitted from Kueue's quota reservation and running from the Ray job's
        start, when the objects say when (``_catch_up`` found the reservation). Without such a timestamp
        the current phase is dated at its first observation.
        """
        phase = observation.phase
        submitted = self.submitted_at if self.submitted_at is not None else now
        if phase in (Phase.SUBMITTED, Phase.QUEUED) and not observation.preemptions:
            return submitted
        self._note(Phase.QUEUED, submitted)
        if reserved_at is None:
            return now
        if phase is Phase.ADMITTED:
            return reserved_at
        self._note(Phase.ADMITTED, reserved_at, QUOTA_RESERVED, "")
        started = self._within(observation.ray_job_started_at, reserved_at, now)
        if phase is Phase.RUNNING:
            return started if started is not None else now
        if started is not None:
            self._note(Phase.RUNNING, started, "Running", "")
        return now

    def _catch_up(self, observation: Observation, submitted: float, now: float) -> float | None:
        """Account for the time before the first observation; return when quota was reserved, if known.

        A waiter often starts after the fact: the sensor runs once the submit task has finished, a
        sensor retry starts when the RayJob may be over, and a restarted triggerer begins again from the
        trigger's arguments. The objects say when things happened: Kueue's ``QuotaReserved`` transition
        ends the queueing, and the Ray job's own start and end (``rayJobInfo``) bound the running. What
        cannot be recovered: an earlier admission that was preempted before the first observation counts
        as queueing (its preemption is still counted, from the Workload's eviction stats).
        """
        phase = observation.phase
        if phase is Phase.AWAITING_CHECKS and observation.quota_reserved_at:
            reserved_at = self._clamp(to_epoch(observation.quota_reserved_at), submitted, now)
            self._attribute(Phase.QUEUED, reserved_at - submitted)
            self._attribute(Phase.AWAITING_CHECKS, now - reserved_at)
            self.quota_reserved_at = reserved_at
            return None
        if phase in WAITING_PHASES:
            self._attribute(phase, max(0.0, now - submitted))
            return None
        if not observation.quota_reserved_at or not (
            phase in HOLDING_QUOTA_PHASES or phase in TERMINAL_PHASES
        ):
            return None
        quota_at = self._clamp(to_epoch(observation.quota_reserved_at), submitted, now)
        # Admitted once the admission checks passed (at the reservation when there were none).
        reserved_at = (
            self._clamp(to_epoch(observation.admitted_at), quota_at, now)
            if observation.admitted_at
            else quota_at
        )
        self.quota_reserved_at = quota_at
        self.resource_usage = dict(observation.resource_usage)
        self._attribute(Phase.QUEUED, quota_at - submitted)
        self._attribute(Phase.AWAITING_CHECKS, reserved_at - quota_at)
        started = self._within(observation.ray_job_started_at, reserved_at, now)
        if phase in TERMINAL_PHASES:
            ended = self._within(observation.ray_job_finished_at, started or reserved_at, now)
            if started is not None and ended is not None:
                self._attribute(Phase.ADMITTED, started - reserved_at)
                self._attribute(Phase.RUNNING, ended - started)
                self.finished_at = ended
        elif phase is Phase.RUNNING and started is not None:
            self._attribute(Phase.ADMITTED, started - reserved_at)
            self._attribute(Phase.RUNNING, now - started)
        else:
            self._attribute(Phase.ADMITTED, now - reserved_at)
        return reserved_at

    @staticmethod
    def _within(value: str | None, earliest: float | None, latest: float) -> float | None:
        """A Kubernetes timestamp clamped into [earliest, latest]: they have 1 s precision, and clocks
        differ, so never before what it follows nor after now."""
        return None if not value else Timeline._clamp(to_epoch(value), earliest, latest)

    @staticmethod
    def _clamp(at: float, earliest: float | None, latest: float) -> float:
        return min(max(at, earliest if earliest is not None else float("-inf")), latest)

    def _attribute(self, phase: Phase, seconds: float) -> None:
        if phase in WAITING_PHASES:
            self.queued_seconds += seconds
            if phase is Phase.AWAITING_CHECKS:
                self.awaiting_checks_seconds += seconds
        elif phase in HOLDING_QUOTA_PHASES:
            self.admitted_seconds += seconds
        if phase is Phase.RUNNING:
            self.running_seconds += seconds
            for resource, amount in self.resource_usage.items():
                used = float(parse_quantity(amount)) * seconds
                self.resource_seconds[resource] = self.resource_seconds.get(resource, 0.0) + used

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form: ISO 8601 UTC instants, seconds rounded to milliseconds."""
        return {
            "submitted_at": to_iso(self.submitted_at),
            "admissions": [
                {**a, **{k: to_iso(a[k]) for k in ("at", "reserved_at", "queued_since") if k in a}}
                for a in self.admissions
            ],
            "preemptions": [{**p, "at": to_iso(p["at"])} for p in self.preemptions],
            "evictions": [{**e, "at": to_iso(e["at"])} for e in self.evictions],
            "finished_at": to_iso(self.finished_at),
            "final_phase": self.final_phase,
            "queued_seconds": round(self.queued_seconds, 3),
            "awaiting_checks_seconds": round(self.awaiting_checks_seconds, 3),
            "admitted_seconds": round(self.admitted_seconds, 3),
            "running_seconds": round(self.running_seconds, 3),
            "resource_seconds": {k: round(v, 3) for k, v in self.resource_seconds.items()},
            "phase": self.phase,
            "last_observed_at": to_iso(self.last_observed_at),
            "resource_usage": dict(self.resource_usage),
            "preemption_count": self.preemption_count,
            "pods_ready_eviction_count": self.pods_ready_eviction_count,
            "queued_since": to_iso(self.queued_since),
            "quota_reserved_at": to_iso(self.quota_reserved_at),
            "transitions": [{**t, "at": to_iso(t["at"])} for t in self.transitions],
            "priority": self.priority,
            "worker_cluster": self.worker_cluster,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Timeline:
        data = data or {}

        def epoch(value: Any) -> float | None:
            return None if value is None else to_epoch(value)

        return cls(
            submitted_at=epoch(data.get("submitted_at")),
            admissions=[
                {**a, **{k: epoch(a.get(k)) for k in ("at", "reserved_at", "queued_since") if k in a}}
                for a in data.get("admissions") or []
            ],
            preemptions=[{**p, "at": epoch(p.get("at"))} for p in data.get("preemptions") or []],
            evictions=[{**e, "at": epoch(e.get("at"))} for e in data.get("evictions") or []],
            finished_at=epoch(data.get("finished_at")),
            final_phase=data.get("final_phase"),
            queued_seconds=float(data.get("queued_seconds") or 0.0),
            awaiting_checks_seconds=float(data.get("awaiting_checks_seconds") or 0.0),
            admitted_seconds=float(data.get("admitted_seconds") or 0.0),
            running_seconds=float(data.get("running_seconds") or 0.0),
            resource_seconds={k: float(v) for k, v in (data.get("resource_seconds") or {}).items()},
            phase=data.get("phase"),
            last_observed_at=epoch(data.get("last_observed_at")),
            resource_usage=dict(data.get("resource_usage") or {}),
            preemption_count=int(data.get("preemption_count") or 0),
            pods_ready_eviction_count=int(data.get("pods_ready_eviction_count") or 0),
            queued_since=epoch(data.get("queued_since")),
            quota_reserved_at=epoch(data.get("quota_reserved_at")),
            transitions=[{**t, "at": epoch(t.get("at"))} for t in data.get("transitions") or []],
            priority=data.get("priority"),
            worker_cluster=data.get("worker_cluster"),
        )
