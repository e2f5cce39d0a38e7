"""Whether a RayJob's priority may be changed from Airflow, under the same policy as a trigger (pure).

Kueue v0.19.2 lets the ``kueue.x-k8s.io/priority-class`` label of a RayJob change while it waits or runs
(``jobframework/validation.go``: it may not be added to a running job nor removed, its value may change),
and its job reconciler (``UpdateWorkloadPriority``) carries the new WorkloadPriorityClass to the Workload's
``spec.priorityClassRef`` and ``spec.priority``, whether or not it holds quota: a pending job moves in its
queue, a running one may be preempted by, or preempt, others. So Airflow changes the label and nothing else.

Who may: a user who may edit the DAG (the caller checks); to what: what the task's ``priority_policy``
would give a run of this kind (``kueue_ray.priority.resolve_priority``): a class among ``allowed``, and for a
backfill run no higher than ``backfill_priority`` unless ``allow_backfill_priority``. A task without a
``priority_policy`` runs at a fixed priority, which is not changed from the tab either.

Not once MultiKueue has dispatched it (``kueue_ray.multikueue``): the manager's MultiKueue copies a new
priority to the worker's Workload, and the worker's Kueue sets it back from the worker's copy of the RayJob,
whose label is the old one, over and over (``workload.go`` reconcileGroup step 5 against the worker's job
reconciler; kubesim reproduces it). Before dispatch the manager's Workload is the only one that matters.

    >>> policy = {"allowed": ["dev-priority", "prod-priority"]}
    >>> may_change(policy, "backfill", "dev-priority", "prod-priority").allowed
    False
    >>> may_change(policy, "manual", "dev-priority", "prod-priority").allowed
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kueue_ray.naming import PRIORITY_CHANGED_BY_ANNOTATION, PRIORITY_CLASS_LABEL
from kueue_ray.priority import normalize_run_type


@dataclass(frozen=True)
class ChangeDecision:
    allowed: bool
    reason: str
    choices: tuple[str, ...] = ()
    """The classes this run may be changed to (the current one included)."""


def choices(policy: Mapping[str, Any] | None, run_type: Any) -> tuple[str, ...]:
    """The classes a run of ``run_type`` may have under ``policy``, lowest first."""
    if not policy:
        return ()
    allowed = policy.get("allowed") or ()
    ranked = (
        sorted(allowed, key=lambda name: allowed[name]) if isinstance(allowed, Mapping) else list(allowed)
    )
    if normalize_run_type(run_type) == "backfill" and not policy.get("allow_backfill_priority"):
        ceiling = policy.get("backfill_priority", "dev-priority")
        if ceiling in ranked:
            ranked = ranked[: ranked.index(ceiling) + 1]
    return tuple(ranked)


def may_change(
    policy: Mapping[str, Any] | None,
    run_type: Any,
    current: str | None,
    requested: str,
    worker: str | None = None,
) -> ChangeDecision:
    """Whether ``requested`` may replace ``current`` for a run of ``run_type`` under the task's ``policy``;
    ``worker``: the MultiKueue worker cluster the RayJob was dispatched to, if any.

    >>> may_change({"allowed": ["dev", "prod"]}, "manual", "dev", "prod", worker="gpu-east").reason[:60]
    "the RayJob was dispatched by MultiKueue to worker cluster 'g"
    """
    options = choices(policy, run_type)
    if not policy:
        return ChangeDecision(
            False,
            "the task sets a fixed priority (no priority_policy): its priority is not changed from Airflow",
        )
    if worker:
        return ChangeDecision(
            False,
            f"the RayJob was dispatched by MultiKueue to worker cluster {worker!r}: a new priority class "
            "would be copied to the worker's Workload by the manager and set back by the worker's Kueue "
            "from its copy of the RayJob, without end. Change the priority before dispatch, or stop the "
            "task and run it again with the new one",
            options,
        )
    if requested == current:
        return ChangeDecision(False, f"the RayJob already has priority {requested}", options)
    if requested not in options:
        kind = normalize_run_type(run_type)
        why = (
            f"a {kind} run may have at most {options[-1]} (allow_backfill_priority is not set)"
            if kind == "backfill" and options
            else f"the task's priority_policy allows {', '.join(options) or 'none'}"
        )
        return ChangeDecision(False, f"priority {requested!r} is not allowed: {why}", options)
    return ChangeDecision(True, f"priority {current} -> {requested}", options)


def priority_terms(policy: Mapping[str, Any] | None, dag_run: Any) -> dict[str, Any]:
    """The task's priority policy and its run's type, kept in the ``rayjob`` XCom: what a change from the
    Kueue tab is judged by (the tab cannot load the task's operator); nothing when there is neither."""
    run_type = getattr(dag_run, "run_type", None)
    if not policy and run_type is None:
        return {}
    return {
        "priority_policy": dict(policy) if policy else None,
        "run_type": normalize_run_type(run_type) if run_type is not None else None,
    }


def relabel_patch(requested: str) -> dict:
    """The merge patch that changes the RayJob's WorkloadPriorityClass label (all Kueue needs)."""
    return {"metadata": {"labels": {PRIORITY_CLASS_LABEL: requested}}}


def changed_by(rayjob: dict | None) -> str | None:
    """Who changed the RayJob's priority from Airflow (the user the annotation of the last change names:
    ``"<user>: <from> -> <to>"``); None when it was never changed from Airflow.

    >>> changed_by({"metadata": {"annotations": {PRIORITY_CHANGED_BY_ANNOTATION: "ada: dev -> prod"}}})
    'ada'
    """
    annotations = ((rayjob or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(PRIORITY_CHANGED_BY_ANNOTATION)
    return value.split(":", 1)[0] if value else None
