"""Why a wait ended: a ``Verdict``, whose ``status`` (a ``VerdictStatus``) is the trigger's one TriggerEvent's.

A module of its own so the operator and sensor modules, which every DAG file imports, can name verdicts
without importing the trigger (and with it Airflow's trigger machinery and the watch hub), and so the
pure judges of a wait (``kueue_ray.waiting``, ``kueue_ray.quota_holders``) share them without importing
each other.
"""

from dataclasses import dataclass
from enum import StrEnum


class VerdictStatus(StrEnum):
    """Why waiting is over, as the task log, the event payload and the XComs spell it: a member equals
    its value (``VerdictStatus.SUCCESS == "success"``), so payloads read back from JSON compare alike.

    >>> VerdictStatus("queue_timeout") is VerdictStatus.QUEUE_TIMEOUT, f"{VerdictStatus.SUCCESS}"
    (True, 'success')
    """

    SUCCESS = "success"
    FAILED = "failed"
    INADMISSIBLE = "inadmissible"
    QUEUE_TIMEOUT = "queue_timeout"
    RUN_TIMEOUT = "run_timeout"
    """A RayJob admitted longer than ``run_timeout`` without finishing."""
    TOO_MANY_PREEMPTIONS = "too_many_preemptions"
    PODS_NOT_READY = "pods_not_ready"
    """Kueue evicted it more often than ``max_pods_ready_evictions`` because its pods never got ready."""
    DELETED = "deleted"
    READY_TIMEOUT = "ready_timeout"
    """A RayService admitted longer than ``ready_timeout`` without serving."""
    REFUSED = "refused"
    """The API server refused (401/403) a read the wait needs for ``[kueue_ray] refusal_timeout`` in a row."""
    API_NOT_SERVED = "api_not_served"
    """The cluster does not serve an API group/version the wait needs (Kueue or KubeRay not installed)."""
    EXECUTION_TIMEOUT = "execution_timeout"
    """The task's ``execution_timeout`` passed while it waited (Airflow 3.3 does not enforce it when
    deferred)."""


@dataclass(frozen=True)
class Verdict:
    """Why waiting is over. ``status`` is a ``VerdictStatus``; the payloads carry its value."""

    status: VerdictStatus
    reason: str
    message: str


UNREADABLE = frozenset({VerdictStatus.REFUSED, VerdictStatus.API_NOT_SERVED})
"""Verdicts about the wait's access to the cluster, not about the RayJob: nothing more can be read of it."""
GAVE_UP = frozenset(
    {
        VerdictStatus.INADMISSIBLE,
        VerdictStatus.QUEUE_TIMEOUT,
        VerdictStatus.RUN_TIMEOUT,
        VerdictStatus.TOO_MANY_PREEMPTIONS,
        VerdictStatus.PODS_NOT_READY,
        VerdictStatus.EXECUTION_TIMEOUT,
    }
)
"""Verdicts that end the wait while the RayJob itself is still queued or running."""
