"""Which WorkloadPriorityClass a DAG run's RayJob gets, decided from how the run was started.

The policy, in short: the schedule decides for scheduled runs; a person decides for manual runs (the
``priority`` param, checked against the allowed classes); backfills are bulk re-processing and must not
preempt production work, so they are clamped to a low class unless the DAG explicitly allows otherwise;
asset-triggered runs inherit the priority of the run that produced the asset, so a high-priority
training run does not hand its model to a low-priority inference run.

Priority names are compared by their rank in ``allowed``: a sequence is ordered from lowest to highest,
a mapping gives each class its WorkloadPriorityClass value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kueue_ray.errors import PolicyError

PRIORITY_PARAM = "priority"
"""The DAG param (and asset event extra key) that carries a requested priority class."""


@dataclass(frozen=True)
class PriorityDecision:
    priority_class: str
    source: str
    """"default", "params", "backfill-policy" or "asset-event"."""
    note: str
    """Why, in one sentence for the task log."""


def normalize_run_type(run_type: Any) -> str:
    """Accept Airflow's DagRunType enum, its value or its str() ("DagRunType.MANUAL")."""
    value = str(getattr(run_type, "value", run_type)).lower()
    value = value.removeprefix("dagruntype.")
    return "backfill" if value == "backfill_job" else value


def resolve_priority(
    *,
    run_type: Any,
    params: Mapping[str, Any] | None,
    default_priority: str,
    allowed: Sequence[str] | Mapping[str, int],
    allow_backfill_priority: bool = False,
    backfill_priority: str = "dev-priority",
    asset_events_extra: Iterable[Mapping[str, Any] | None] = (),
) -> PriorityDecision:
    """Decide the priority class for a run; raise PolicyError for a class that is not allowed."""
    rank = _ranks(allowed)
    _check(default_priority, "default_priority", rank)
    params = params or {}
    requested = params.get(PRIORITY_PARAM)
    if requested is not None:
        _check(requested, f"params.{PRIORITY_PARAM}", rank)
    kind = normalize_run_type(run_type)

    if kind == "scheduled":
        return PriorityDecision(
            default_priority, "default", f"scheduled run: using the DAG's default priority {default_priority}"
        )
    if kind == "backfill":
        wanted = requested or default_priority
        if allow_backfill_priority:
            return PriorityDecision(
                wanted,
                "params" if requested else "default",
                f"backfill run: priority {wanted} (allow_backfill_priority is set)",
            )
        _check(backfill_priority, "backfill_priority", rank)
        note = f"backfill run: priority clamped to {backfill_priority}"
        if wanted != backfill_priority:
            note += f" (requested {wanted}); set allow_backfill_priority=True to keep the requested priority"
        return PriorityDecision(backfill_priority, "backfill-policy", note)
    if kind == "asset_triggered":
        inherited: list[str] = []
        ignored: list[object] = []
        for extra in asset_events_extra:
            value = (extra or {}).get(PRIORITY_PARAM)
            if value is None:
                continue
            (inherited if value in rank else ignored).append(value)
        note_ignored = f"; ignored unknown priorities {sorted(set(map(str, ignored)))}" if ignored else ""
        if inherited:
            best = max(inherited, key=rank.__getitem__)
            return PriorityDecision(
                best,
                "asset-event",
                f"asset-triggered run: inherited priority {best} from the upstream run{note_ignored}",
            )
        return PriorityDecision(
            default_priority,
            "default",
            f"asset-triggered run: no upstream priority in the asset events, using {default_priority}{note_ignored}",
        )
    if requested:
        return PriorityDecision(requested, "params", f"{kind} run: priority {requested} from params")
    return PriorityDecision(
        default_priority, "default", f"{kind} run: using the DAG's default priority {default_priority}"
    )


def backfill_without_conf(dag_run: Any, params: Mapping[str, Any] | None) -> str | None:
    """The warning for a backfill ``dag_run`` (its ``run_type``, ``conf``, ``dag_id``) whose conf is empty,
    None for any other run.

    Airflow 3.3's backfill dialog shows the DAG's params, but sends them (``dag_run_conf``) only when
    "Override parameters on existing runs" is ticked; otherwise every run it creates has an empty conf and
    runs with the DAG's defaults, whatever the form showed. The task cannot tell a deliberate default from a
    dropped choice, so it says which values it uses and the three ways that carry params.

    >>> from types import SimpleNamespace as Run
    >>> print(backfill_without_conf(Run(run_type="backfill", conf={}, dag_id="d"), {"epochs": 3}))
    ... # doctest: +ELLIPSIS
    This backfill run has no conf, so it runs with the DAG's defaults (epochs=3). ... --dag-run-conf ...
    """
    if normalize_run_type(getattr(dag_run, "run_type", None)) != "backfill" or getattr(dag_run, "conf", None):
        return None
    dag_id = getattr(dag_run, "dag_id", None) or "<dag_id>"
    defaults = ", ".join(f"{key}={value!r}" for key, value in (params or {}).items()) or "none"
    return (
        f"This backfill run has no conf, so it runs with the DAG's defaults ({defaults}). To backfill "
        "with other params: tick 'Override parameters on existing runs' in the backfill dialog (Airflow "
        "3.3 sends the form's params only then, to new runs too); or `airflow backfill create --dag-id "
        f"{dag_id} --from-date ... --to-date ... --dag-run-conf '{{\"epochs\": 2}}'`; or POST "
        '/api/v2/backfills with "dag_run_conf". See the README, "Backfills".'
    )


def _ranks(allowed: Sequence[str] | Mapping[str, int]) -> dict[str, int]:
    if isinstance(allowed, Mapping):
        return {str(name): int(value) for name, value in allowed.items()}
    return {str(name): index for index, name in enumerate(allowed)}


def _check(value: Any, field: str, rank: Mapping[str, int]) -> None:
    if value not in rank:
        raise PolicyError(
            "not an allowed WorkloadPriorityClass",
            field=field,
            value=value,
            fix=f"use one of {list(rank)}",
        )
