"""Why a wait ended: a ``Verdict``, whose ``status`` is the trigger's one TriggerEvent's.

A module of its own so the operator and sensor modules, which every DAG file imports, can name verdicts
without importing the trigger (and with it Airflow's trigger machinery and the watch hub), and so the
pure judges of a wait (``kueue_ray.waiting``, ``kueue_ray.quota_holders``) share them without importing
each other.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """Why waiting is over. ``status`` is one of the constants below."""

    status: str
    reason: str
    message: str


SUCCESS = "success"
FAILED = "failed"
INADMISSIBLE = "inadmissible"
QUEUE_TIMEOUT = "queue_timeout"
RUN_TIMEOUT = "run_timeout"
TOO_MANY_PREEMPTIONS = "too_many_preemptions"
PODS_NOT_READY = "pods_not_ready"
"""Kueue evicted it more often than ``max_pods_ready_evictions`` because its pods never got ready."""
DELETED = "deleted"
READY_TIMEOUT = "ready_timeout"
REFUSED = "refused"
"""The API server refused (401/403) a read the wait needs for ``[kueue_ray] refusal_timeout`` in a row."""
API_NOT_SERVED = "api_not_served"
"""The cluster does not serve an API group/version the wait needs (Kueue or KubeRay not installed)."""
UNREADABLE = frozenset({REFUSED, API_NOT_SERVED})
"""Verdicts about the wait's access to the cluster, not about the RayJob: nothing more can be read of it."""
"""A RayService admitted longer than ``ready_timeout`` without serving."""
EXECUTION_TIMEOUT = "execution_timeout"
"""The task's ``execution_timeout`` passed while it waited (Airflow 3.3 does not enforce it when deferred)."""

GAVE_UP = frozenset(
    {INADMISSIBLE, QUEUE_TIMEOUT, RUN_TIMEOUT, TOO_MANY_PREEMPTIONS, PODS_NOT_READY, EXECUTION_TIMEOUT}
)
"""Verdicts that end the wait while the RayJob itself is still queued or running."""
