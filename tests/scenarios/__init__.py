"""Kueue admission scenarios: the project's stories of who gets admitted, who waits and who is preempted.

Each ``*.yaml`` file here is one story (format in README.md). Two drivers replay every story: the pure
scheduler replay in ``tests/unit/kubesim/kueue/test_scheduler.py`` and the full cluster over HTTP in
``tests/integration/kubesim/test_scenarios.py``. ``load`` checks a story before either runs it, so a
story that forgets a RayJob or misspells a state fails loudly instead of asserting less.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

DIRECTORY = Path(__file__).resolve().parent
STATES = ("admitted", "pending")
JOB_KEYS = {"queue", "priority", "head", "workers", "mode", "namespace"}
STEP_KEYS = {"submit", "finish", "apply", "relabel", "pause", "then", "queues"}
QUEUE_KEYS = {"status", "reason", "message"}
EVICTION_KEYS = {"reason", "underlyingCause", "count"}
CONDITION_KEYS = {"status", "reason", "message"}


@dataclass(frozen=True)
class Expectation:
    """What one live RayJob must show once the cluster has settled after a step."""

    state: str
    """``admitted``: its Workload has ``QuotaReserved=True``; ``pending``: it has a Workload without it."""
    preempted: bool | str = False
    """False: never preempted so far; True: preempted at least once; a reason (``InClusterQueue``, ...):
    preempted, and its ``Preempted`` condition is True with that reason now."""
    message: str | None = None
    """A substring of its ``QuotaReserved`` condition's message."""
    suspended: bool | None = None
    """The RayJob's ``spec.suspend``, when the story says."""
    priority: int | None = None
    """Its Workload's ``spec.priority``."""
    flavors: dict[str, str] | None = None
    """resource -> the flavor its admission assigned it, in every pod set requesting it."""
    usage: dict[str, str] | None = None
    """resource -> what its admission charges, summed over pod sets (a Kubernetes quantity)."""
    evictions: tuple[dict, ...] | None = None
    """Exactly its Workload's ``status.schedulingStats.evictions`` (``reason``, ``underlyingCause``,
    ``count``). Written by the Kueue controller, so only the HTTP driver checks it."""
    conditions: dict[str, dict | None] | None = None
    """Condition type -> ``{status, reason}`` its Workload's condition of that type shows (``message``
    too when given), or None: the Workload has no condition of that type. Written by the Kueue
    controller, so only the HTTP driver checks it."""


@dataclass(frozen=True)
class QueueExpectation:
    """A ClusterQueue's ``Active`` condition once the cluster has settled after a step."""

    status: str
    """``"True"`` or ``"False"``."""
    reason: str | None = None
    message: str | None = None
    """The whole message, exactly."""

    def problems(self, condition: dict) -> list[str]:
        """How ``condition`` ({status, reason, message}) differs from what is expected; empty when it matches."""
        wanted = {"status": self.status, "reason": self.reason, "message": self.message}
        return [
            f"{key} {condition.get(key)!r}, expected {value!r}"
            for key, value in wanted.items()
            if value is not None and condition.get(key) != value
        ]


@dataclass(frozen=True)
class Step:
    submit: tuple[str, ...] = ()
    finish: tuple[str, ...] = ()
    apply: tuple[dict, ...] = ()
    relabel: dict[str, str] = field(default_factory=dict)
    """RayJob name -> the WorkloadPriorityClass its ``kueue.x-k8s.io/priority-class`` label names from now."""
    pause: float = 0.0
    then: dict[str, Expectation] = field(default_factory=dict)
    """Every RayJob submitted and not finished, and what it must show; empty when the step checks nothing."""
    queues: dict[str, QueueExpectation] = field(default_factory=dict)
    """ClusterQueue name -> its ``Active`` condition; only the queues named are checked."""


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    source: str
    kueue: tuple[dict, ...]
    rayjobs: dict[str, dict]
    """name -> {queue, priority?, head: requests, workers?: [{group, replicas, requests}], mode?, namespace?}"""
    story: tuple[Step, ...]
    http_only: str | None = None
    """Why the pure driver cannot replay this story (it is then skipped there, with this reason)."""


def load(path: Path) -> Scenario:
    data = yaml.safe_load(path.read_text())
    where = path.name
    rayjobs = data.get("rayjobs") or {}
    for name, spec in rayjobs.items():
        unknown = set(spec) - JOB_KEYS
        if unknown:
            raise ValueError(f"{where}: rayjob {name} has unknown keys {sorted(unknown)}")
    story, live = [], []
    for index, raw in enumerate(data["story"]):
        step = _step(raw, f"{where} step {index}")
        for name in step.submit:
            if name not in rayjobs:
                raise ValueError(f"{where} step {index}: {name} is not declared under rayjobs")
            live.append(name)
        for name in step.relabel:
            if name not in live:
                raise ValueError(f"{where} step {index}: relabel of {name}, which is not live")
        live = [name for name in live if name not in step.finish]
        if step.then and set(step.then) != set(live):
            raise ValueError(
                f"{where} step {index}: 'then' must name exactly the live RayJobs {sorted(live)}, "
                f"not {sorted(step.then)}"
            )
        story.append(step)
    return Scenario(
        name=path.stem,
        about=data["about"],
        source=data["source"],
        kueue=tuple(data.get("kueue") or ()),
        rayjobs=rayjobs,
        story=tuple(story),
        http_only=data.get("http_only"),
    )


def _step(raw: dict, where: str) -> Step:
    unknown = set(raw) - STEP_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    then = {name: _expectation(value, f"{where} {name}") for name, value in (raw.get("then") or {}).items()}
    queues = {
        name: _queue(value, f"{where} queue {name}") for name, value in (raw.get("queues") or {}).items()
    }
    return Step(
        submit=tuple(raw.get("submit") or ()),
        finish=tuple(raw.get("finish") or ()),
        apply=tuple(raw.get("apply") or ()),
        relabel=dict(raw.get("relabel") or {}),
        pause=float(raw.get("pause") or 0.0),
        then=then,
        queues=queues,
    )


def _expectation(value: str | dict, where: str) -> Expectation:
    if isinstance(value, str):
        expectation = Expectation(state=value)
    else:
        value = dict(value)
        if "evictions" in value:
            value["evictions"] = tuple(value["evictions"])
            for entry in value["evictions"]:
                if set(entry) != EVICTION_KEYS:
                    raise ValueError(
                        f"{where}: an eviction names exactly {sorted(EVICTION_KEYS)}, not {entry}"
                    )
        for type_, wanted in (value.get("conditions") or {}).items():
            if wanted is not None and not (
                set(wanted) >= {"status", "reason"} and set(wanted) <= CONDITION_KEYS
            ):
                raise ValueError(
                    f"{where}: condition {type_} is null (absent) or names status, reason and maybe "
                    f"message, not {wanted}"
                )
        expectation = Expectation(**value)
    if expectation.state not in STATES:
        raise ValueError(f"{where}: state {expectation.state!r} is not one of {STATES}")
    if (expectation.flavors or expectation.usage) and expectation.state != "admitted":
        raise ValueError(f"{where}: flavors and usage describe an admission, so the state must be admitted")
    return expectation


def _queue(value: dict, where: str) -> QueueExpectation:
    unknown = set(value) - QUEUE_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    if value.get("status") not in ("True", "False"):
        raise ValueError(f"{where}: status must be the string 'True' or 'False'")
    return QueueExpectation(**value)


def all_scenarios() -> list[Scenario]:
    return [load(path) for path in sorted(DIRECTORY.glob("*.yaml"))]
