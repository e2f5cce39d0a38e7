"""``WaitPolicy``: the wait options a DAG author sets (timeouts, grace, limits, intervals).

The operators and the sensor build it from their arguments, the trigger carries it in its kwargs as one
dict (``to_dict`` / ``from_dict``), and ``kueue_ray.waiting.Watchdog`` judges every observation by it.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from kueue_ray.bounds import (
    DEFAULT_QUEUE_TIMEOUT,
    DEFAULT_READY_TIMEOUT,
    DEFAULT_RUN_TIMEOUT,
    NO_LIMIT,
    TIMEOUT_FIELDS,
    execution_deadline,
    span,
    timeout_seconds,
)

DEFAULT_RESYNC_SECONDS = 300.0
"""The longest a missed watch event may go unnoticed by default (the hub's relist interval)."""


def _count(value: Any) -> int | None:
    return None if value in (None, "", "None") else int(value)


@dataclass(frozen=True)
class WaitPolicy:
    """How long and how patiently a task waits for its RayJob or RayService.

    Every wait is bounded by default: queueing is normal under Kueue, but a request that can never fit
    next to what already holds the quota would otherwise wait for ever. Each timeout left unset (None, an
    empty Param) takes its default; ``"inf"`` (``math.inf``) asks for no limit.

    :param queue_timeout: seconds a wait for admission may last this time (since submission, or since the
        last admission was lost); waiting for admission checks counts. Default ``DEFAULT_QUEUE_TIMEOUT``.
    :param run_timeout: a RayJob's seconds since its last admission (``Admitted=True``); default
        ``DEFAULT_RUN_TIMEOUT``.
    :param ready_timeout: a RayService's seconds from its cluster's admission until it serves; default
        ``DEFAULT_READY_TIMEOUT``.
    :param fail_on_inadmissible: stop when Kueue keeps saying it cannot admit the Workload...
    :param inadmissible_grace: ...for this many seconds.
    :param max_preemptions: stop after more preemptions than this; None for no limit.
    :param max_pods_ready_evictions: stop after more evictions for pods not ready within Kueue's
        waitForPodsReady timeout than this (Kueue itself requeues such a Workload forever); None for no
        limit.
    :param poll_interval: seconds between reads when waiting in a worker.
    :param resync_interval: the longest a missed watch event may go unnoticed in the triggerer, seconds:
        the watch hub relists a namespace at the shortest interval of its triggers.
    :param deadline: the task's ``execution_timeout`` as a moment (ISO 8601, Airflow's clock): Airflow
        3.3 does not enforce ``execution_timeout`` while a task is deferred, so the deadline travels with
        the trigger, which ends the wait when it passes (``execution_deadline``).
    """

    queue_timeout: float | None = DEFAULT_QUEUE_TIMEOUT
    run_timeout: float | None = DEFAULT_RUN_TIMEOUT
    ready_timeout: float | None = DEFAULT_READY_TIMEOUT
    fail_on_inadmissible: bool = True
    inadmissible_grace: float = 60.0
    max_preemptions: int | None = None
    max_pods_ready_evictions: int | None = 1
    poll_interval: float = 5.0
    resync_interval: float = DEFAULT_RESYNC_SECONDS
    deadline: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values, for the trigger's kwargs (no limit as ``"inf"``: None reads as the default)."""
        data = asdict(self)
        for name in TIMEOUT_FIELDS:
            if data[name] is None:
                data[name] = NO_LIMIT
        return data

    def limits(self, admitted_limit: str = "run_timeout") -> str:
        """The bounds of this wait in words, for the task log when the wait starts.

        >>> WaitPolicy(queue_timeout=600).limits()
        'queue_timeout 10 min, run_timeout 72 h (default); no execution_timeout'
        """
        parts = []
        for name in ("queue_timeout", admitted_limit):
            value = getattr(self, name)
            default = {f.name: f.default for f in fields(self)}[name]
            if value is None:
                parts.append(f'{name} none ("{NO_LIMIT}": waits for ever)')
            else:
                parts.append(f"{name} {span(value)}{' (default)' if value == default else ''}")
        deadline = f"execution_timeout at {self.deadline}" if self.deadline else "no execution_timeout"
        return f"{', '.join(parts)}; {deadline}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> WaitPolicy:
        """The policy from ``to_dict``'s output or any mapping holding some of its fields (the rest keep their
        defaults); numbers may be text, as templates render them."""
        data = {f.name: data[f.name] for f in fields(cls) if f.name in (data or {})}
        for name in TIMEOUT_FIELDS:
            if name in data:
                if data[name] in (None, "", "None"):
                    del data[name]  # unset: the default bound
                else:
                    data[name] = timeout_seconds(name, data[name])
        if data.get("deadline") in ("", "None"):
            data["deadline"] = None
        for name in ("max_preemptions", "max_pods_ready_evictions"):
            if name in data:
                data[name] = _count(data[name])
        for name in ("inadmissible_grace", "poll_interval", "resync_interval"):
            if name in data:
                data[name] = float(data[name])
        if "fail_on_inadmissible" in data:
            data["fail_on_inadmissible"] = bool(data["fail_on_inadmissible"])
        return cls(**data)

    @classmethod
    def of(cls, task: Any, context: Mapping[str, Any] | None = None) -> WaitPolicy:
        """The policy an operator or sensor was given: its attributes named like the fields (rendered, when
        they are template fields), and with ``context`` the deadline of its ``execution_timeout``."""
        given = {
            f.name: getattr(task, f.name)
            for f in fields(cls)
            if hasattr(task, f.name) and f.name != "deadline"
        }
        policy = cls.from_dict(given)
        if context is not None:
            policy = replace(policy, deadline=execution_deadline(task, context))
        return policy
