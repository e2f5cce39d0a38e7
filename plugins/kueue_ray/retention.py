"""When a finished RayJob this integration created may be deleted: the janitor's retention rule (pure).

A RayJob that ended holds no quota, but it stays in the cluster with its Workload, its submitter Job and
that Job's pods (KubeRay's ``ttlSecondsAfterFinished`` removes only the RayCluster), and every list of
RayJobs or Workloads reads them all again. So the janitor deletes them once they have been finished for
longer than the retention period; their Workload, submitter Job and pods go with them through their
owner references (Kubernetes' garbage collector, background propagation).

The rule never deletes what someone may still read:

* only finished RayJobs (``Complete``, ``Failed``, ``ValidationFailed``) that are not already being
  deleted and carry this integration's identity annotations;
* finished at least ``retention`` ago, measured on the API server's clock (``status.endTime`` against
  the ``Date`` of the list answer), so a skewed worker clock cannot shorten it;
* its DAG run no longer exists, or it has ended (``success`` / ``failed``) and the task that collects
  the RayJob's result (the registered waiting sensor, else the submitting task) has ended or is gone:
  that task wrote its XComs (``timeline``, ``rayjob``) when it ended, so nothing of the task's own
  result is lost. A run still running (a downstream sensor may not have started yet) or a task that may
  still come back (retrying, deferred, running, cleared) keeps the RayJob whatever its age.

Example::

    >>> from datetime import UTC, datetime, timedelta
    >>> job = {"metadata": {"annotations": AirflowIdentity(dag_id="etl", task_id="submit", run_id="r1",
    ...        try_number=1).annotations()},
    ...        "status": {"jobDeploymentStatus": "Complete", "endTime": "2026-11-01T00:00:00Z"}}
    >>> expiry_reason(job, now=datetime(2026, 11, 9, tzinfo=UTC), retention=timedelta(days=7),
    ...               run_state="success", task_states={"submit": "success"})
    'finished (Complete) 8 d ago, longer than the retention of 7 d, and its task submit ended success'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timedelta

from kueue_ray.kube.api import parse_time
from kueue_ray.naming import AirflowIdentity, Waiter
from kueue_ray.orphans import ENDED_STATES, FINISHED_DEPLOYMENT_STATUSES, state_key

DEFAULT_RETENTION_DAYS = 7.0
"""How long a finished RayJob is kept when neither ``[kueue_ray] retention_days`` nor the janitor says."""
CONFIG_OPTION = "retention_days"
"""The option in Airflow's ``[kueue_ray]`` section (env ``AIRFLOW__KUEUE_RAY__RETENTION_DAYS``)."""
ENDED_RUN_STATES = frozenset({"success", "failed"})
"""DAG run states in which no task of the run runs any more (until a user clears one)."""


def parse_retention_days(value: object, *, source: str = "retention_days") -> timedelta:
    """A retention given in days (int, float or their text, e.g. from a Param or ``airflow.cfg``).

    >>> parse_retention_days("1.5")
    datetime.timedelta(days=1, seconds=43200)

    Raises ValueError naming ``source``, the value and the fix for anything but a finite number >= 0.
    """
    try:
        days = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        days = math.nan
    if isinstance(value, bool) or not math.isfinite(days) or days < 0:
        raise ValueError(
            f"{source}={value!r} is not a retention period: give the number of days a finished RayJob is "
            f"kept, a number >= 0 (e.g. 7, or 0.5 for 12 hours)"
        )
    return timedelta(days=days)


def needs_retention_decision(rayjob: dict) -> bool:
    """A finished RayJob created by an Airflow task, not yet being deleted: what the retention rule
    judges (the orphan rule, ``orphans.needs_decision``, judges the active ones)."""
    metadata = rayjob.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return False
    if ((rayjob.get("status") or {}).get("jobDeploymentStatus") or "") not in FINISHED_DEPLOYMENT_STATUSES:
        return False
    return AirflowIdentity.from_annotations(metadata.get("annotations")) is not None


def finished_at(rayjob: dict) -> datetime | None:
    """When the RayJob finished, on the API server's clock: KubeRay's ``status.endTime``; for a RayJob
    that failed validation before it ever started (no endTime), its ``creationTimestamp``."""
    status = rayjob.get("status") or {}
    ended = parse_time(status.get("endTime"))
    if ended is None and status.get("jobDeploymentStatus") == "ValidationFailed":
        ended = parse_time((rayjob.get("metadata") or {}).get("creationTimestamp"))
    return ended


def past_retention(rayjob: dict, *, now: datetime, retention: timedelta) -> bool:
    """Finished at least ``retention`` before ``now`` (the API server's time): the only RayJobs for
    which the janitor asks Airflow about their DAG run."""
    ended = finished_at(rayjob)
    return ended is not None and now - ended >= retention


def expiry_reason(
    rayjob: dict,
    *,
    now: datetime,
    retention: timedelta,
    run_state: str | None,
    task_states: Mapping[str, str | None],
) -> str | None:
    """Why ``rayjob`` may be deleted now, in words for the task log; None while it must be kept.

    ``now`` is the API server's time (the ``Date`` of the answer the RayJob came in); ``run_state`` is
    the state of the RayJob's DAG run, None when the run no longer exists; ``task_states`` are that run's
    task states keyed as by ``orphans.state_key``. Call only for RayJobs that
    :func:`needs_retention_decision`.
    """
    if not needs_retention_decision(rayjob):
        return None
    metadata = rayjob["metadata"]
    annotations = metadata.get("annotations") or {}
    owner = AirflowIdentity.from_annotations(annotations)
    ended = finished_at(rayjob)
    if owner is None or ended is None or not past_retention(rayjob, now=now, retention=retention):
        return None  # also when the server wrote no finish time: nothing to measure the retention from
    age = now - ended
    status = rayjob["status"]["jobDeploymentStatus"]
    finished = f"finished ({status}) {_span(age)} ago, longer than the retention of {_span(retention)}"
    if run_state is None:
        if not owner.deployment:
            return None  # legacy: the run may be another deployment's, which this one cannot see
        return f"{finished}, and its DAG run {owner.dag_id} / {owner.run_id} no longer exists"
    if run_state not in ENDED_RUN_STATES:
        return None
    waiter = Waiter.from_annotations(annotations)
    key = state_key(waiter.task_id, waiter.map_index) if waiter else state_key(owner.task_id, owner.map_index)
    if key not in task_states:
        if not owner.deployment:
            return None
        return f"{finished}, and its task {key} no longer exists in DAG run {owner.run_id}"
    if task_states[key] not in ENDED_STATES:
        return None
    return f"{finished}, and its task {key} ended {task_states[key]}"


def _span(duration: timedelta) -> str:
    """A retention-sized duration in the unit a reader expects: ``8 d``, ``1.5 d``, ``5 h``, ``90 s``."""
    seconds = duration.total_seconds()
    if seconds >= 86400:
        return f"{round(seconds / 86400, 1):g} d"
    if seconds >= 3600:
        return f"{round(seconds / 3600, 1):g} h"
    return f"{seconds:.0f} s"
