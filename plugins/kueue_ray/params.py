"""The Trigger-form Params every Kueue DAG of this project offers: which priority class and which queue, and
whole numbers that are refused, not changed, outside their range.

Each DAG used to spell these out itself, so the list of WorkloadPriorityClasses, their explanations and the
LocalQueues lived in three places and drifted apart whenever one DAG was edited. They describe the cluster
(``include/manifests/kueue/``), not a pipeline, so they are defined once here; a DAG only says what its
choice means for it (title, description, default queue).

Priority and queue carry no ``section``: Airflow 3.3's Trigger and backfill forms open only their first
section ("Run Parameters", where Params without a section go) and collapse every named one, so these two
decisions, which every run makes, stay in view. Each DAG lists them first.

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

LOCAL_QUEUES: tuple[str, ...] = ("user-queue", "team-a", "team-b", "multikueue-queue")
"""The LocalQueues in ``NAMESPACE`` of the queue setups: ``user-queue`` (single-queue), the two teams', and
``multikueue-queue`` (a MultiKueue manager's, whose RayJobs run on its worker clusters)."""

PRIORITY_EXPLAINED: dict[str, str] = {
    "dev-priority": "dev-priority (100): waits behind production, may be preempted",
    "prod-priority": "prod-priority (1000): admitted first, preempts dev-priority work",
}
"""What each class means for the run, shown instead of the bare name: the consequence is the decision."""

QUEUE_EXPLAINED: dict[str, str] = {
    "user-queue": "user-queue (single-queue setup)",
    "team-a": "team-a (team-queues setup)",
    "team-b": "team-b (team-queues setup)",
    "multikueue-queue": "multikueue-queue (MultiKueue setup: runs on a worker cluster)",
}
"""Which installed queue setup each LocalQueue belongs to: only one setup's queues exist on a cluster."""

QUEUE_ALTERNATIVES: dict[str, str] = {
    "user-queue": "team-a/team-b (the team-queues setup: "
    "kubectl apply -f include/manifests/kueue/ -f include/manifests/kueue/team-queues/)",
}
"""Where a RayJob goes that a LocalQueue of one setup can never admit, when the cluster has no other queue
that could: the single queue holds one GPU, a team queue 8 by borrowing. Only one setup is installed at a
time, so the preflight cannot find the other setup's queues in the cluster; this names them."""


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


def bounded_int(
    default: int, low: int, high: int, *, title: str, description: str, section: str | None = None
) -> Param:
    """A whole number from ``low`` to ``high``, refused outside that range rather than changed.

    The range sits one level down, in ``allOf: [{minimum, maximum}]``: Airflow 3.3's form hands a
    top-level ``minimum`` / ``maximum`` to its number field, which silently clamps what was typed (Epochs
    100 becomes 50) and so runs something the user did not ask for. Nested, the field keeps the value, and
    Airflow's jsonschema check refuses the trigger (form, REST API, CLI and backfill ``dag_run_conf``
    alike) with the param's name and jsonschema's own words ("100 is greater than the maximum of 50").
    The description states the range, so the form shows it before anything is typed.

    >>> bounded_int(3, 1, 50, title="Epochs", description="Passes over the data.").schema["allOf"]
    [{'minimum': 1, 'maximum': 50}]
    """
    if not low <= default <= high:
        raise ValueError(f"{title}: default {default} is outside {low} to {high}")
    extra = {"section": section} if section else {}
    return Param(
        default,
        type="integer",
        allOf=[{"minimum": low, "maximum": high}],
        title=title,
        description=f"{description.rstrip()} Allowed: {low} to {high}.",
        **extra,
    )


def integer_range(param: Param) -> tuple[int, int] | None:
    """The (lowest, highest) whole number an integer Param accepts, from its top-level or nested
    ``minimum`` / ``maximum``; None when it lacks either bound."""
    bounds: dict[str, int] = {}
    for schema in (param.schema, *param.schema.get("allOf", ())):
        bounds.update({key: schema[key] for key in ("minimum", "maximum") if key in schema})
    if "minimum" not in bounds or "maximum" not in bounds:
        return None
    return bounds["minimum"], bounds["maximum"]
