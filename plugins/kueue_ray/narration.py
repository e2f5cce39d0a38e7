"""The task log's story of a RayJob: which observations become lines, and in words people read.

Shared by the trigger (deferred waits) and the worker-side wait, so a task tells the same story wherever
it waits; ``kueue_ray.trigger.describe_transition`` writes the lines. Pure: the callers look things up
(queue positions, the preemptor RayJob) and pass them in.

* One line per change of what Kueue or KubeRay says (phase, reason, message), quoting them, with the queue
  position while the job waits. A line that would only repeat the previous one is dropped: e.g. Kueue
  keeps the eviction message on a just-preempted Workload, so the QUEUED line after PREEMPTED would say
  the same thing again.
* While the job waits, the position is checked again every ``POSITION_RELOG_SECONDS`` and logged when it
  moved, so a long wait shows its progress: at most one position line per task per that interval (the
  first check after a transition line waits a few seconds more, so that tasks queued together do not
  all check in the same instant: ``Story.spread``). The trigger reads it again only when a Workload
  of the namespace changed since its last read (a position in a LocalQueue can move for no other
  reason), so a quiet queue costs no request.
* Kueue names a preemptor only by UIDs ("Preempted to accommodate a workload (UID: ..., JobUID: ...)";
  the JobUID is the preemptor RayJob's uid). When that RayJob is known, the line names it, with the DAG
  and run its annotations record.
* Kueue prints memory in binary units exactly ("7812500Ki"); lines round such amounts to the largest
  binary unit ("7.45Gi").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

from kueue_ray.naming import AirflowIdentity
from kueue_ray.phases import POSITION_PHASES, Phase
from kueue_ray.quantity import readable_bytes
from kueue_ray.status import Observation
from kueue_ray.why_queued import verdict_gist
from kueue_ray.workload import workload_priority

POD_CHECK_SECONDS = 10.0
"""How often the Ray cluster's pods are read while it starts (admitted, the Ray job not running yet)."""
POSITION_RELOG_SECONDS = 30.0
"""The shortest interval between two queue-position lines of one task."""

_PREEMPTOR = re.compile(r"a workload \(UID: (?P<workload_uid>[^,()]+), JobUID: (?P<job_uid>[^()]+)\)")
_BINARY_QUANTITY = re.compile(r"\b(?P<number>\d+)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei)\b")
_SUFFIX_FACTOR = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def readable_quantities(message: str) -> str:
    """``message`` with every binary-suffixed amount ("7812500Ki") spelled as people read it ("7.45Gi")."""

    def rewrite(match: re.Match) -> str:
        return readable_bytes(Decimal(match["number"]) * _SUFFIX_FACTOR[match["suffix"]])

    return _BINARY_QUANTITY.sub(rewrite, message)


def preemptor_job_uid(message: str) -> str | None:
    """The preemptor's JobUID in Kueue's eviction message (None when absent or "UNKNOWN")."""
    match = _PREEMPTOR.search(message or "")
    if not match or match["job_uid"].strip() in ("", "UNKNOWN"):
        return None
    return match["job_uid"].strip()


def describe_rayjob(rayjob: dict) -> str:
    """``RayJob ray/name (DAG d, run r, task t)``, or just the RayJob when Airflow did not create it."""
    metadata = rayjob.get("metadata") or {}
    text = f"RayJob {metadata.get('namespace')}/{metadata.get('name')}"
    identity = AirflowIdentity.from_annotations(metadata.get("annotations"))
    if identity is not None:
        text += f" (DAG {identity.dag_id}, run {identity.run_id}, task {identity.task_id})"
    return text


def name_preemptor(message: str, preemptor: dict | None) -> str:
    """Kueue's eviction message with the preemptor RayJob named next to its UIDs, when it is known."""
    match = _PREEMPTOR.search(message or "")
    if not match or preemptor is None:
        return message
    named = (
        f"{describe_rayjob(preemptor)} (Workload UID: {match['workload_uid']}, JobUID: {match['job_uid']})"
    )
    return message[: match.start()] + named + message[match.end() :]


@dataclass(slots=True)
class Story:
    """What one task's log has said about its RayJob, so it says each thing once."""

    last_said: tuple[str, str, str] | None = None
    """(phase, reason, message) of the last observation told."""
    last_message: str | None = None
    """The Kueue / KubeRay message of the last line written."""
    position: str | None = None
    position_told_at: float | None = None
    """Monotonic time the position was last logged (or checked unchanged)."""
    priority_seen: tuple[str | None, int | None] | None = None
    """The Workload's (priority class, priority) last seen."""
    pods_told: str | None = None
    """The pods line last written (``kueue_ray.pod_states``)."""
    pods_checked_at: float | None = None
    """Monotonic time the pods were last read; None when not checking (not starting)."""
    why_told: str | None = None
    """The gist of the "why still queued" verdict last written (``kueue_ray.why_queued.verdict_gist``):
    the explanation is written again only when it changes."""
    position_version: int | None = None
    """The queue's version (``Subscription.workloads_version``) when the position was last read."""
    spread: float = 0.0
    """Seconds added to the first position check after a transition line. Thousands of tasks queued
    together write their transition lines together; with their checks due at the same instant every
    interval, each would write its moved position in the same pass of the triggerer's event loop, holding
    up every other trigger. A per-task ``spread`` (a few seconds, at most ``POSITION_RELOG_SECONDS``)
    staggers them once; from then on each task keeps its own rhythm."""
    _extra: float = field(default=0.0, init=False, repr=False)
    """``spread`` while the next check is the first after a transition line, else 0."""

    def news(self, observation: Observation) -> bool:
        """Whether ``observation`` says something new; call once per observation."""
        said = (observation.phase.value, observation.reason, observation.message)
        if said == self.last_said:
            return False
        self.last_said = said
        repeat = (
            observation.phase is Phase.QUEUED
            and bool(observation.message)
            and observation.message == self.last_message
        )
        self.last_message = observation.message
        return not repeat

    def priority_line(
        self, namespace: str, name: str, workload: dict | None, changed_by: str | None = None
    ) -> str | None:
        """The line to write when the Workload's priority changed since it was last seen (a relabelled
        RayJob: Kueue carries the new class to its Workload, and Kueue reorders or preempts); None the
        first time and while it stays."""
        seen = workload_priority(workload)
        if seen is None:
            return None
        before, self.priority_seen = self.priority_seen, seen
        if before is None or before == seen:
            return None
        by = f" (changed from Airflow by {changed_by})" if changed_by else ""
        return (
            f"RayJob {namespace}/{name}: priority changed to {seen[0]} ({seen[1]}), from {before[0]} "
            f"({before[1]}){by}; Kueue orders its queue and preempts by the new priority"
        )

    def pods_check_in(self, observation: Observation, now: float) -> float | None:
        """Seconds until the pods should be read again; None when the Ray cluster is not starting, or starts
        on a MultiKueue worker cluster (its pods are there, not on the manager the wait reads)."""
        if (
            observation.phase is not Phase.ADMITTED
            or not observation.ray_cluster
            or observation.worker_cluster
        ):
            self.pods_checked_at = None
            return None
        if self.pods_checked_at is None:
            return 0.0
        return max(0.0, self.pods_checked_at + POD_CHECK_SECONDS - now)

    def pods_line(self, namespace: str, name: str, told: str, now: float) -> str | None:
        """After a read of the pods: the line to write when what they say changed, else None."""
        self.pods_checked_at = now
        if told == self.pods_told:
            return None
        self.pods_told = told
        return f"RayJob {namespace}/{name}: Ray cluster starting, pods: {told}"

    def why_lines(self, namespace: str, name: str, sentences: list[str], force: bool = False) -> list[str]:
        """The "why still queued" lines to write (verdict first; one log line each, so that every line
        carries the RayJob), none when the verdict's gist (``why_queued.verdict_gist``: not its counts) was
        already told and ``force`` is not set (a transition line was just written)."""
        gist = verdict_gist(sentences[0]) if sentences else None
        if gist is None or (gist == self.why_told and not force):
            return []
        self.why_told = gist
        return [f"RayJob {namespace}/{name}: why still queued: {sentence}" for sentence in sentences]

    def told_position(self, position: str | None, now: float, version: int | None = None) -> None:
        """The line just written carried ``position`` (None: none known), read at queue ``version``."""
        self.position, self.position_told_at, self.position_version = position, now, version
        self._extra = self.spread

    def position_current(self, version: int | None, now: float) -> bool:
        """Whether the position told is still the queue's: nothing changed since it was read. Then the next
        check waits another interval, and no read is made."""
        if version is None or version != self.position_version:
            return False
        self.position_told_at, self._extra = now, 0.0
        return True

    def position_check_in(self, observation: Observation, now: float) -> float | None:
        """Seconds until the position should be checked again; None when it is not waiting in a queue."""
        if observation.phase not in POSITION_PHASES or self.position_told_at is None:
            return None
        return max(0.0, self.position_told_at + POSITION_RELOG_SECONDS + self._extra - now)

    def position_line(
        self,
        namespace: str,
        name: str,
        phase: Phase,
        position: str | None,
        now: float,
        version: int | None = None,
    ) -> str | None:
        """After a check: the line to write when the position moved, else None (and the next check waits
        another interval either way)."""
        moved = position is not None and position != self.position
        self.position_told_at, self.position_version, self._extra = now, version, 0.0
        if not moved:
            return None
        self.position = position
        return f"RayJob {namespace}/{name}: still {phase.value} — {position}"
