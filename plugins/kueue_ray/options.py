"""The plugin's ``[kueue_ray]`` options that are a number of seconds, read where they are used (triggerer
or worker) with one rule: unset or empty gives the default; anything else must be a number of seconds
(more than 0, or at least 0 where 0 turns the behaviour off), else an error naming the option, the value,
its environment variable and an example."""

from __future__ import annotations

SECTION = "kueue_ray"
"""The plugin's section of Airflow's configuration, for every option it reads."""


def seconds(option: str, default: float, *, zero_allowed: bool) -> float:
    """``[kueue_ray] <option>`` in seconds; ``default`` when unset or without Airflow's configuration."""
    try:
        from airflow.configuration import conf
    except ImportError:  # pragma: no cover - only without Airflow
        return default
    value = conf.get(SECTION, option, fallback=None)
    if value in (None, ""):
        return default
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not (number >= 0 if zero_allowed else number > 0):  # also refuses "nan"
        bound = ">= 0" if zero_allowed else "> 0"
        raise ValueError(
            f"[{SECTION}] {option}: {value!r} is not a number of seconds {bound}. Fix: set it (or "
            f"AIRFLOW__{SECTION.upper()}__{option.upper()}) to e.g. {default:g}"
        )
    return number
