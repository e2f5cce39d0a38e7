"""The bounds of every wait: default timeouts, "no limit", and the task's ``execution_timeout`` as a
deadline that travels with the trigger (pure; ``kueue_ray.wait_policy.WaitPolicy`` holds them).

Airflow 3.3 applies ``execution_timeout`` to each segment a task runs on a worker, not to the time it is
deferred: a task with ``execution_timeout=2h`` could wait in the triggerer for ever. So the operator turns
the timeout into a moment when it defers (``execution_deadline``), the trigger carries it, and the
``Watchdog`` ends the wait when it passes (verdict ``execution_timeout``): the task resumes, deletes the
RayJob it owns and fails, as after a queue timeout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kueue_ray.errors import KueueRayError
from kueue_ray.kube.api import utcnow

DEFAULT_QUEUE_TIMEOUT = 24 * 3600.0
"""A day in the queue: a request that can never fit next to what holds the quota must not wait for ever."""
DEFAULT_RUN_TIMEOUT = 72 * 3600.0
"""Three days from the last admission: longer than any pipeline here trains, short of for ever."""
DEFAULT_READY_TIMEOUT = 3600.0
"""An hour from a RayService cluster's admission until it serves (image pulls, model loading)."""
TIMEOUT_FIELDS = ("queue_timeout", "run_timeout", "ready_timeout")
NO_LIMIT = "inf"
"""How a timeout says "no limit" (in an argument, a Param or the trigger's kwargs); None means the default."""


class BadTimeout(KueueRayError, ValueError):
    """A timeout argument or Param that is not a number of seconds > 0 nor "inf"."""


def timeout_seconds(name: str, value: Any) -> float | None:
    """A timeout given as seconds, or ``"inf"`` (``math.inf``) for none: None for no limit. Raises
    ValueError naming the field, the value and the fix for anything else."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if seconds == math.inf:
        return None
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise BadTimeout(
            "not a timeout",
            field=name,
            value=value,
            fix=f'give seconds > 0, "{NO_LIMIT}" for no limit, or leave it unset for the default',
        )
    return seconds


def span(seconds: float) -> str:
    """``24 h``, ``90 min``, ``45 s``: a timeout as a reader of the task log takes it in."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def execution_deadline(task: Any, context: Mapping[str, Any]) -> str | None:
    """When the task's ``execution_timeout`` runs out: this try's start (Airflow's ``start_date``) plus the
    timeout, as ISO 8601; None without an ``execution_timeout``."""
    timeout = getattr(task, "execution_timeout", None)
    if not isinstance(timeout, timedelta):
        return None
    ti = context.get("ti")
    started = getattr(ti, "start_date", None) or utcnow()
    return (started + timeout).isoformat()
