"""One wait step (pure): read -> observe -> record -> tell -> judge -> payload, for RayJobs and RayServices.

Every wait (the RayJob and RayService triggers, and their twins in a worker slot) reads the object and its
Workloads, hands the read to ``wait_step`` and does what the returned ``Step`` says: write its lines, look
up the queue position and the preemptor a transition line names, read again from the API server when a
clock's verdict came from a cache, and end with its payload. What differs between a RayJob and a
RayService (how it is observed, timed, worded and reported) is a ``WaitKind``, made by its target
(``kueue_ray.waiting.WaitTarget.kind``, ``kueue_ray.rayservice.waiting.ServiceTarget.kind``).

Freshness is decided here, once: a read older than the one the wait last acted on (a watch event queued
while a newer read ran) is not acted on; the newer state is judged again instead, so what a wait says
never moves backwards.

Example, the steps of a RayJob preempted while running (``tests/unit/kueue_ray/test_wait_step.py``)::

    state = WaitState.start(kind, policy)
    step = wait_step(kind, state, Read(rayjob, workload), now)
    step.news          # True: a transition line is due; the driver looks up step.position_in and
                       # step.preemptor_uid and writes step.transition_line(position, preemptor)
    step.verdict       # None: keep waiting, at most step.deadline seconds before the next step
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from kueue_ray.narration import Story
from kueue_ray.verdicts import Verdict


class Judge(Protocol):
    """What a wait step asks of its watchdog (``kueue_ray.waiting.Watchdog`` and its RayService form)."""

    offset_s: float

    def check(self, observation: Any, workload: dict | None, now: datetime) -> Verdict | None: ...

    def seconds_until_next_deadline(self, now: datetime) -> float | None: ...


@dataclass(frozen=True)
class WaitKind:
    """What a wait step needs to know of one kind of object, for one target.

    :param observe: (object, related) -> its observation (``related``: the RayJob's Workload or None, the
        RayService's Workloads).
    :param gone: whether the read says the object is gone (deleted, or its Workload's owner deleted).
    :param deleted: the verdict then.
    :param workload: what of ``related`` the watchdog's clocks read.
    :param record: record the observation in the timeline; the lines of what only the timeline noticed.
    :param describe: (observation, position, preemptor) -> the transition line.
    :param payload: (verdict, observation, timeline) -> the event payload.
    :param queue_of: the LocalQueue to read a position in, from the object.
    :param position_phases: the phases whose transition line carries the queue position.
    :param preemptor_uid: the preemptor's uid named in an observation, for the line to name it.
    :param clock_verdicts: verdicts a clock gives; confirmed on a fresh read before they end a wait.
    :param watchdog: (policy) -> the watchdog that judges this target.
    :param timeline: (dict or None) -> the timeline a deferred wait records in, continued from the dict
        the task deferred with (a wait in a worker slot starts an empty one).
    """

    observe: Callable[[dict, Any], Any]
    gone: Callable[[dict | None, Any], bool]
    deleted: Verdict
    workload: Callable[[Any], dict | None]
    record: Callable[[Any, Any, datetime], list[str]]
    describe: Callable[[Any, str | None, dict | None], str]
    payload: Callable[[Verdict, Any, Any], dict[str, Any]]
    queue_of: Callable[[dict], str | None]
    position_phases: frozenset
    preemptor_uid: Callable[[Any], str | None]
    clock_verdicts: frozenset[str]
    watchdog: Callable[[Any], Judge]
    timeline: Callable[[dict[str, Any] | None], Any]


@dataclass(frozen=True)
class Read:
    """One read of the object (None: not found) and what is related to it (the RayJob's Workload or None,
    the RayService's list of Workloads). ``fresh``: read from the API server just now, not from a cache
    that may be an event behind."""

    obj: dict | None
    related: Any = None
    fresh: bool = False


@dataclass
class WaitState:
    """What a wait carries from one step to the next; it survives a wait resumed after an error."""

    timeline: Any
    watchdog: Judge
    story: Story = field(default_factory=Story)
    acted_on: Read | None = None
    """The last read a step acted on (freshness is judged against it)."""

    @classmethod
    def start(cls, kind: WaitKind, policy: Any, timeline: Any, story: Story | None = None) -> WaitState:
        """A wait's first state: ``timeline`` to record in, judged by ``policy``."""
        return cls(timeline, kind.watchdog(policy), story or Story())


@dataclass(frozen=True)
class Step:
    """What one step says to do. ``verdict`` None: keep waiting (at most ``deadline`` seconds before the
    next step, None: until something changes). ``confirm``: a clock's verdict came from a read that may be
    behind; read again from the API server (``Read(fresh=True)``) and step again before ending."""

    kind: WaitKind
    timeline: Any
    observation: Any = None
    read: Read | None = None
    """The read acted on: the newest of the one given and the one acted on before."""
    lines: tuple[str, ...] = ()
    """Lines to write before anything else (what the timeline noticed)."""
    news: bool = False
    """A transition line is due: ``transition_line`` with the position and the preemptor looked up."""
    position_in: str | None = None
    """The LocalQueue to read the transition line's position in (None: the line has none)."""
    preemptor_uid: str | None = None
    """The uid of the object that preempted this one, for the line to name it (None: none named)."""
    verdict: Verdict | None = None
    confirm: bool = False
    deadline: float | None = None

    @property
    def gone(self) -> bool:
        """The object is gone: the wait ends with ``kind.deleted`` and nothing was observed."""
        return self.verdict is not None and self.observation is None

    @property
    def payload(self) -> dict[str, Any] | None:
        """The event payload when the wait ends here, else None."""
        if self.verdict is None or self.confirm:
            return None
        return self.kind.payload(self.verdict, self.observation, self.timeline)

    def transition_line(self, position: str | None, preemptor: dict | None = None) -> str:
        return self.kind.describe(self.observation, position, preemptor)

    def ending(self, verdict: Verdict) -> Step:
        """This step ending with ``verdict`` instead (e.g. a queue timeout's message with the quota's
        holders the driver read)."""
        return replace(self, verdict=verdict)


def newest(read: Read, acted_on: Read | None) -> Read:
    """``read``, with any object older than what was last acted on replaced by that (a watch event queued
    while a newer read ran); a deletion (None) is always news.

    >>> old, new = {"metadata": {"resourceVersion": "5"}}, {"metadata": {"resourceVersion": "9"}}
    >>> newest(Read(old, None), Read(new, None)).obj is new
    True
    """
    if acted_on is None:
        return read
    obj, related = _newer(read.obj, acted_on.obj), _newer_related(read.related, acted_on.related)
    # what was kept of an earlier read is only as fresh as that read
    return Read(obj, related, read.fresh and obj is read.obj and related == read.related)


def _newer(candidate: dict | None, current: dict | None) -> dict | None:
    if candidate is None or current is None or not _older(candidate, current):
        return candidate
    return current


def _older(candidate: dict, current: dict) -> bool:
    """Whether ``candidate`` is an older version than ``current``: resourceVersions are opaque to clients,
    but every API server in practice issues increasing integers (etcd revisions); anything else is news."""
    try:
        return int(candidate["metadata"]["resourceVersion"]) < int(current["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


def _newer_related(candidate: Any, current: Any) -> Any:
    if not isinstance(candidate, list):
        return _newer(candidate, current if isinstance(current, dict) else None)
    by_uid = {(w.get("metadata") or {}).get("uid"): w for w in current or []}
    return [_newer(w, by_uid.get((w.get("metadata") or {}).get("uid"))) for w in candidate]


def wait_step(kind: WaitKind, state: WaitState, read: Read, now: datetime, offset_s: float = 0.0) -> Step:
    """One step of a wait on ``read`` at ``now`` (on the API server's clock, ``offset_s`` ahead of this
    process's): observe, record in ``state.timeline``, decide what to tell, judge by ``state.watchdog``."""
    read = newest(read, state.acted_on)
    state.acted_on = read
    if kind.gone(read.obj, read.related):
        return Step(kind, state.timeline, read=read, verdict=kind.deleted)
    assert read.obj is not None  # gone() says so when it is not
    state.watchdog.offset_s = offset_s
    observation = kind.observe(read.obj, read.related)
    lines = tuple(kind.record(state.timeline, observation, now))
    news = state.story.news(observation)
    position_in = preemptor = None
    if news:
        if observation.phase in kind.position_phases and observation.workload_name:
            position_in = kind.queue_of(read.obj)
        preemptor = kind.preemptor_uid(observation)
    verdict = state.watchdog.check(observation, kind.workload(read.related), now)
    return Step(
        kind,
        state.timeline,
        observation,
        read,
        lines,
        news,
        position_in,
        preemptor,
        verdict,
        confirm=verdict is not None and verdict.status in kind.clock_verdicts and not read.fresh,
        deadline=state.watchdog.seconds_until_next_deadline(now),
    )
