"""Which RayJobs no Airflow task will ever wait for again: the janitor's rule (pure, no I/O).

Why a sweep is needed at all: a RayJob holds Kueue quota (and GPUs) until it finishes. When a user marks a
waiting task failed or success, Airflow calls the trigger's ``on_kill`` and the RayJob is deleted, but
Airflow only calls ``on_kill`` for a trigger some triggerer has loaded, and never on a deferral timeout. So
a RayJob can outlive every task that cared about it: the submitting task's worker died right after
creating it and no retry was left; a sensor's deferral ``timeout`` expired (Airflow cancels the trigger
without ``on_kill``); a task was marked failed before any triggerer loaded its trigger and another
triggerer of an HA pair cleaned the trigger up; its DAG run was deleted. Such a RayJob runs, or waits in
the queue, ahead of work someone does wait for. Kubernetes owner references cannot express "owned by an
Airflow task instance", so the janitor compares each RayJob's Airflow identity (its annotations) with the
states Airflow holds for that task instance.

The rule is deliberately narrow, so that it never deletes a RayJob someone still expects to run:

* only RayJobs created by this integration (the identity annotations) *in this Airflow deployment*
  (``kueue_ray.deployment``) that are still active: finished ones hold no quota, one already being deleted
  is being dealt with, and another deployment's are never this one's to judge (its DAG runs live in
  another metadata database: "no such run here" says nothing about them);
* its DAG run no longer exists (only for this deployment's own RayJobs: a *legacy* one, made before
  RayJobs carried their deployment, may be another deployment's, so only positive evidence counts for it:
  its DAG run exists here and its task ended); or
* a sensor registered as its waiter (``WAITER_ANNOTATION``, only with ``delete_on_kill``) and that task
  instance has ended or is gone; or
* no task registered as waiter and the submitting task ended without success (failed, upstream_failed,
  skipped, removed) or is gone. A submitting task that *succeeded* without a waiter handed the RayJob on
  (``wait_for_completion=False`` with nobody waiting is a fire-and-forget submission): left alone.

Task states that may still come back (``up_for_retry``, ``up_for_reschedule``, ``deferred``, ``running``,
``queued``, ``scheduled``, no state yet) never make an orphan: the next try adopts the RayJob.
"""

from __future__ import annotations

from collections.abc import Mapping

from kueue_ray.naming import DEPLOYMENT_LABEL, MANAGED_BY_SELECTOR, AirflowIdentity, Waiter

ENDED_STATES = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})
"""Task instance states no try will leave again without a user clearing the task."""
ENDED_WITHOUT_SUCCESS = ENDED_STATES - {"success"}
FINISHED_DEPLOYMENT_STATUSES = frozenset({"Complete", "Failed", "ValidationFailed"})


def state_key(task_id: str, map_index: int) -> str:
    """How Airflow's execution API keys task states: ``task_id``, or ``task_id_<map_index>`` if mapped."""
    return task_id if map_index < 0 else f"{task_id}_{map_index}"


def janitor_selectors(deployment: str) -> tuple[str, str]:
    """The two lists the janitor makes: this deployment's RayJobs, and legacy ones (no deployment label)."""
    return (
        f"{MANAGED_BY_SELECTOR},{DEPLOYMENT_LABEL}={deployment}",
        f"{MANAGED_BY_SELECTOR},!{DEPLOYMENT_LABEL}",
    )


def needs_decision(rayjob: dict, deployment: str | None = None) -> bool:
    """An active RayJob created by an Airflow task (of ``deployment``, or legacy, when given): the only
    kind the janitor ever looks at."""
    metadata = rayjob.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return False
    if ((rayjob.get("status") or {}).get("jobDeploymentStatus") or "") in FINISHED_DEPLOYMENT_STATUSES:
        return False
    owner = AirflowIdentity.from_annotations(metadata.get("annotations"))
    if owner is None:
        return False
    return deployment is None or owner.deployment in ("", deployment)


def orphan_reason(rayjob: dict, *, run_exists: bool, task_states: Mapping[str, str | None]) -> str | None:
    """Why ``rayjob`` is an orphan, in words for the task log; None while a task may still wait for it.

    ``task_states`` are the states of the RayJob's DAG run, keyed as by :func:`state_key` (a task missing
    from it no longer exists in the run). Call only for RayJobs that :func:`needs_decision`.
    """
    annotations = rayjob["metadata"].get("annotations") or {}
    owner = AirflowIdentity.from_annotations(annotations)
    if owner is None:
        return None
    if not run_exists:
        if not owner.deployment:
            return None  # legacy: the run may be another deployment's, which this one cannot see
        return f"its DAG run {owner.dag_id} / {owner.run_id} no longer exists"
    waiter = Waiter.from_annotations(annotations)
    if waiter is not None:
        key = state_key(waiter.task_id, waiter.map_index)
        if key not in task_states:
            if not owner.deployment:
                return None
            return f"the task waiting for it, {key}, no longer exists in DAG run {owner.run_id}"
        if task_states[key] in ENDED_STATES:
            return f"the task waiting for it, {key}, ended {task_states[key]} without deleting it"
        return None
    key = state_key(owner.task_id, owner.map_index)
    if key not in task_states:
        if not owner.deployment:
            return None
        return f"the task that submitted it, {key}, no longer exists in DAG run {owner.run_id}"
    if task_states[key] in ENDED_WITHOUT_SUCCESS:
        return f"the task that submitted it, {key}, ended {task_states[key]} and no task waits for it"
    return None
