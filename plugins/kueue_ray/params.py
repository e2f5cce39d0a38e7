"""The Trigger-form Params every Kueue DAG of this project offers: which priority class and which queue.

Each DAG used to spell these out itself, so the list of WorkloadPriorityClasses, their explanations and the
LocalQueues lived in three places and drifted apart whenever one DAG was edited. They describe the cluster
(``include/manifests/kueue/``), not a pipeline, so they are defined once here; a DAG only says what its
choice means for it (title, description, default queue).

Imported by every DAG file at parse time, so it stays light: Airflow's ``Param`` and nothing else (no
Kubernetes client, template engine, YAML or hook).
"""

from __future__ import annotations

from airflow.sdk import Param

NAMESPACE = "ray"
"""Where the LocalQueues are (``include/manifests/kueue/``), so where the DAGs' RayJobs must be created."""

PRIORITY_CLASSES: dict[str, int] = {"dev-priority": 100, "prod-priority": 1000}
"""The WorkloadPriorityClasses of include/manifests/kueue/, with their values (higher wins); in this
order, so the form lists the default first."""

LOCAL_QUEUES: tuple[str, ...] = ("user-queue", "team-a", "team-b")
"""The LocalQueues in ``NAMESPACE`` of both queue setups: ``user-queue`` (single-queue) and the two teams'."""

SCHEDULING_SECTION = "Scheduling"
"""The Trigger-form section that groups priority and queue, so they read as one decision."""

PRIORITY_EXPLAINED: dict[str, str] = {
    "dev-priority": "dev-priority (100): waits behind production, may be preempted",
    "prod-priority": "prod-priority (1000): admitted first, preempts dev-priority work",
}
"""What each class means for the run, shown instead of the bare name: the consequence is the decision."""

QUEUE_EXPLAINED: dict[str, str] = {
    "user-queue": "user-queue (single-queue setup)",
    "team-a": "team-a (team-queues setup)",
    "team-b": "team-b (team-queues setup)",
}
"""Which installed queue setup each LocalQueue belongs to: only one setup's queues exist on a cluster."""


def priority_param(
    description: str, *, title: str = "Priority", default: str = "dev-priority", explained: bool = True
) -> Param:
    """A WorkloadPriorityClass choice; ``explained`` shows what each class means next to its name.

    The enum makes the form (and a trigger through the REST API) refuse a class the cluster does not
    have, before a run exists; the operator's priority policy still decides what a run actually gets.
    """
    extra = {"values_display": dict(PRIORITY_EXPLAINED)} if explained else {}
    return Param(
        default,
        type="string",
        enum=list(PRIORITY_CLASSES),
        **extra,
        title=title,
        description=description,
        section=SCHEDULING_SECTION,
    )


def queue_param(default: str, description: str, *, explained: bool = False) -> Param:
    """A LocalQueue choice; ``explained`` says which queue setup each queue belongs to.

    The default depends on the DAG: one that needs a team's GPUs cannot run on the single-queue setup.
    """
    extra = {"values_display": dict(QUEUE_EXPLAINED)} if explained else {}
    return Param(
        default,
        type="string",
        enum=list(LOCAL_QUEUES),
        **extra,
        title="LocalQueue",
        description=description,
        section=SCHEDULING_SECTION,
    )


LIMITS_SECTION = "Limits"
"""The Trigger-form section with a run's wait bounds."""


def timeout_param(default: float | None, title: str, description: str) -> Param:
    """A wait bound in seconds for one run (``queue_timeout``, ``run_timeout``), passed to an operator's or
    sensor's templated argument of that name: empty keeps the operator's default bound, ``"inf"`` asks
    for none (``kueue_ray.bounds``)."""
    return Param(
        default,
        type=["null", "number", "string"],
        title=title,
        description=f'{description} Seconds; empty: the default bound; "inf": no limit.',
        section=LIMITS_SECTION,
    )
