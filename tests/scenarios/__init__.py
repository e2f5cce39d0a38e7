"""Kueue admission scenarios: the project's stories of who gets admitted, who waits and who is preempted.

Each ``*.yaml`` file here is one story (format in README.md). Two drivers replay every story: the pure
scheduler replay in ``tests/unit/kubesim/test_kueue_scheduler.py`` and the full cluster over HTTP in
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


@dataclass(frozen=True)
class Step:
    submit: tuple[str, ...] = ()
    finish: tuple[str, ...] = ()
    apply: tuple[dict, ...] = ()
    pause: float = 0.0
    then: dict[str, Expectation] = field(default_factory=dict)
    """Every RayJob submitted and not finished, and what it must show; empty when the step checks nothing."""


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    source: str
    kueue: tuple[dict, ...]
    rayjobs: dict[str, dict]
    """name -> {queue, priority?, head: requests, workers?: [{group, replicas, requests}], mode?, namespace?}"""
    story: tuple[Step, ...]


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
    )


def _step(raw: dict, where: str) -> Step:
    unknown = set(raw) - {"submit", "finish", "apply", "pause", "then"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    then = {name: _expectation(value, f"{where} {name}") for name, value in (raw.get("then") or {}).items()}
    return Step(
        submit=tuple(raw.get("submit") or ()),
        finish=tuple(raw.get("finish") or ()),
        apply=tuple(raw.get("apply") or ()),
        pause=float(raw.get("pause") or 0.0),
        then=then,
    )


def _expectation(value: str | dict, where: str) -> Expectation:
    expectation = Expectation(state=value) if isinstance(value, str) else Expectation(**value)
    if expectation.state not in STATES:
        raise ValueError(f"{where}: state {expectation.state!r} is not one of {STATES}")
    return expectation


def all_scenarios() -> list[Scenario]:
    return [load(path) for path in sorted(DIRECTORY.glob("*.yaml"))]
