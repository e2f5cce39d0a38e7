"""What the operators that submit to Kueue share: ``SubmitRayJobOperator`` (``kueue_ray.operators``) and
``DeployRayServiceOperator`` (``kueue_ray.serving``) both derive from ``KueueSubmitOperator``.

The shared part is the front of a task: the arguments (template, LocalQueue, priority and its policy, the
overrides, the wait's limits), the hook made once per try, the priority decided from how the run was
started, the template built and checked against the cluster's queues before anything is created (bad
input fails the task without retries), and the trigger's ending in the triggerer. The operators keep only
what differs: what they create and what they wait for.

Importing this module is as cheap as importing the operators (every DAG file does): the hook, manifests,
status model and trigger are imported where they run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

from kueue_ray.errors import KueueRayError
from kueue_ray.links import KueueTabLink, RayDashboardLink, dashboard_template
from kueue_ray.naming import AirflowIdentity

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kueue_ray.hook import RayJobHook
    from kueue_ray.manifests import BuiltRayJob
    from kueue_ray.preflight import QueueCapacity


def task_identity(context: Context) -> AirflowIdentity:
    """The task try running now, in this Airflow deployment, as the RayJob's annotations record it."""
    from kueue_ray.deployment import current

    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return AirflowIdentity(
        dag_id=ti.dag_id,
        task_id=ti.task_id,
        run_id=ti.run_id,
        map_index=-1 if map_index is None else int(map_index),
        try_number=int(getattr(ti, "try_number", 1) or 1),
        deployment=current(),
    )


def run_priority(log: Any, context: Context, priority: str, policy: Mapping[str, Any] | None) -> str:
    """The WorkloadPriorityClass for this run: ``priority`` as given, or with a ``priority_policy``
    decided from how the run was started (``kueue_ray.priority.resolve_priority``), logging why."""
    from kueue_ray.priority import backfill_without_conf, resolve_priority

    dag_run = context.get("dag_run")
    if warning := backfill_without_conf(dag_run, context.get("params")):
        log.warning(warning)
    if not policy:
        return priority
    extras = [
        getattr(event, "extra", None)
        for events in (context.get("triggering_asset_events") or {}).values()
        for event in events
    ]
    decision = resolve_priority(
        run_type=getattr(dag_run, "run_type", "manual"),
        params=context.get("params"),
        default_priority=priority,
        allowed=policy["allowed"],
        allow_backfill_priority=bool(policy.get("allow_backfill_priority", False)),
        backfill_priority=policy.get("backfill_priority", "dev-priority"),
        asset_events_extra=extras,
    )
    log.info("Priority %s (%s): %s", decision.priority_class, decision.source, decision.note)
    return decision.priority_class


def template_searchpath(task: BaseOperator, given: str | Sequence[str] | None) -> str | Sequence[str] | None:
    """Where ``task`` looks for its template by name: ``given`` (the operator's ``template_searchpath``),
    else its DAG's ``template_searchpath``; the shipped templates are searched after either
    (``kueue_ray.manifests.template_folders``)."""
    if given:
        return given
    return getattr(task.dag, "template_searchpath", None) if task.has_dag() else None


def take_local_queue(
    operator: str, local_queue: str | None, kwargs: dict[str, Any], *, stacklevel: int = 3
) -> str:
    """The Kueue LocalQueue an operator was given: ``local_queue=``, or the deprecated ``queue=`` (taken
    out of ``kwargs``, with a DeprecationWarning). ``queue`` is ``BaseOperator``'s executor queue, so it
    never reaches ``BaseOperator`` from here: the executor queue is ``executor_queue=`` or the DAG's
    ``default_args["queue"]``, which only ``BaseOperator`` reads."""
    legacy = kwargs.pop("queue", None)
    if legacy is not None and local_queue is not None:
        raise TypeError(
            f"{operator} got both local_queue={local_queue!r} and queue={legacy!r}; queue= is the "
            f"deprecated name of local_queue=: pass only local_queue= (and executor_queue= for Airflow's "
            f"executor queue)"
        )
    if legacy is not None:
        warnings.warn(
            f"{operator}(queue=...) is deprecated: use local_queue= for the Kueue LocalQueue "
            f"(queue is BaseOperator's executor queue; set that one with executor_queue=)",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        return legacy
    if local_queue is None:
        raise TypeError(f"{operator} needs local_queue=: the Kueue LocalQueue to submit to, e.g. 'team-a'")
    return local_queue


def build_and_preflight(
    task: Any,
    build: Callable[..., BuiltRayJob],
    *,
    name: str,
    priority: str,
    identity: AirflowIdentity,
    **extra: Any,
) -> tuple[BuiltRayJob, QueueCapacity]:
    """Render ``task``'s template into a validated body with ``build`` (``manifests.build_rayjob`` or
    ``build_rayservice``) from the arguments both operators share, then check it against the cluster's
    queues (``RayJobHook.preflight``). Raises ``KueueRayError`` before anything is created."""
    from kueue_ray.wait_policy import WaitPolicy

    WaitPolicy.of(task)  # a bad timeout fails the task here, not after the create
    built = build(
        task.template,
        name=name,
        namespace=task.namespace,
        queue=task.local_queue,
        priority=priority,
        identity=identity,
        values=task.values,
        image=task.image,
        runtime_env=task.runtime_env,
        worker_replicas=task.worker_replicas,
        resources=task.ray_resources,
        annotations=task.annotations,
        template_searchpath=template_searchpath(task, task.template_searchpath),
        **extra,
    )
    return built, task.hook.preflight(built, task.namespace, task.local_queue, priority)


OWN_LINKS = (RayDashboardLink, KueueTabLink)
"""The extra links a success ended in the triggerer leaves as a worker would (``trigger_ending``)."""


def needs_worker(operator: BaseOperator, own_class: type) -> str | None:
    """Why ``operator``'s success must resume on a worker rather than end in the triggerer; None if it
    need not. Ending in the triggerer skips everything a worker runs after ``execute_complete``."""
    if type(operator).execute_complete is not own_class.execute_complete:
        return f"{type(operator).__name__} overrides execute_complete"
    if operator.on_success_callback:
        return "it has an on_success_callback, which Airflow 3.3 runs only on a worker"
    if operator.outlets:
        return "it has outlets, whose asset events a worker emits"
    if type(operator).post_execute is not BaseOperator.post_execute:
        return f"{type(operator).__name__} overrides post_execute"
    others = [link.name for link in operator.operator_extra_links if not isinstance(link, OWN_LINKS)]
    if others:
        return f"its extra links {others} are computed on a worker"
    from airflow.sdk.listener import get_listener_manager

    if get_listener_manager().has_listeners:
        # Airflow refuses to parse a task whose ``end_from_trigger`` is set while listeners are installed,
        # for this reason; deciding here instead keeps such deployments working, on the worker path.
        return "listener plugins are installed, and they see a task succeed only on a worker"
    return None


def trigger_ending(
    operator: BaseOperator, own_class: type, rayjob_extra: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The trigger's ``end_in_triggerer`` for this task (``kueue_ray.results.TriggerEnding``), or None when
    a success must resume on a worker (switched off, or ``needs_worker``; the task log says why)."""
    if not operator.end_in_triggerer:
        return None
    reason = needs_worker(operator, own_class)
    if reason is not None:
        operator.log.info("When its RayJob succeeds, this task resumes on a worker: %s", reason)
        return None
    from kueue_ray.results import TriggerEnding

    template = dashboard_template(operator)
    # The Kueue tab's link is known from the deferral on (the task instance's page) and stays as the
    # deferring segment pushed it; the dashboard's may need fields KubeRay fills in later, so it is rendered
    # again at the end.
    links = {
        link.xcom_key: template
        for link in operator.operator_extra_links
        if isinstance(link, RayDashboardLink)
    }
    return TriggerEnding(
        log_tail_lines=operator.log_tail_lines,
        rayjob_extra=dict(rayjob_extra),
        links=links,
        push_return_value=bool(operator.do_xcom_push),
    ).to_dict()


@contextmanager
def bad_input_fails() -> Iterator[None]:
    """A ``KueueRayError`` fails the task for good: the DAG or the cluster's queues need fixing, and
    retrying the same inputs cannot help."""
    try:
        yield
    except KueueRayError as error:
        raise AirflowFailException(str(error)) from error


class KueueSubmitOperator(BaseOperator):
    """The arguments, hook and checks every operator that submits to Kueue shares; see the module doc.
    Subclasses make their hook (``new_hook``) and say what they create and wait for."""

    template_fields: Sequence[str] = (
        "template",
        "values",
        "image",
        "runtime_env",
        "worker_replicas",
        "ray_resources",
        "annotations",
        "local_queue",
        "priority",
        "namespace",
        "queue_timeout",
    )

    def __init__(
        self,
        *,
        template: str | Mapping[str, Any],
        local_queue: str | None = None,
        priority: str,
        namespace: str = "default",
        values: Mapping[str, Any] | None = None,
        image: str | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        worker_replicas: int | Mapping[str, int] | None = None,
        ray_resources: Mapping[str, Mapping[str, str | int]] | None = None,
        annotations: Mapping[str, str] | None = None,
        priority_policy: Mapping[str, Any] | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = True,
        queue_timeout: float | str | None = None,
        fail_on_inadmissible: bool = True,
        inadmissible_grace: float = 60.0,
        max_preemptions: int | None = None,
        max_pods_ready_evictions: int | None = 1,
        poll_interval: float = 5.0,
        resync_interval: float = 300.0,
        template_searchpath: str | Sequence[str] | None = None,
        executor_queue: str | None = None,
        **kwargs: Any,
    ) -> None:
        # The deprecation names the DAG file's line: it is two calls further up than take_local_queue's
        # own caller would be (the subclass's __init__ and Airflow's wrapper of this one).
        local_queue = take_local_queue(type(self).__name__, local_queue, kwargs, stacklevel=5)
        if executor_queue is not None:
            kwargs["queue"] = executor_queue
        super().__init__(**kwargs)
        self.template = template
        self.template_searchpath = template_searchpath
        self.local_queue = local_queue
        self.priority = priority
        self.namespace = namespace
        self.values = values
        self.image = image
        self.runtime_env = runtime_env
        self.worker_replicas = worker_replicas
        self.ray_resources = ray_resources
        self.annotations = annotations
        self.priority_policy = dict(priority_policy) if priority_policy else None
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.queue_timeout = queue_timeout
        self.fail_on_inadmissible = fail_on_inadmissible
        self.inadmissible_grace = inadmissible_grace
        self.max_preemptions = max_preemptions
        self.max_pods_ready_evictions = max_pods_ready_evictions
        self.poll_interval = poll_interval
        self.resync_interval = resync_interval

    @cached_property
    def hook(self) -> RayJobHook:
        """The synchronous hook on ``kubernetes_conn_id``, made once per task try (``new_hook``)."""
        return self.new_hook()

    def new_hook(self) -> RayJobHook:
        raise NotImplementedError

    def resolve_priority(self, context: Context) -> str:
        """The WorkloadPriorityClass for this run; with a policy, from the run type and params."""
        return run_priority(self.log, context, self.priority, self.priority_policy)

    def prepare(
        self,
        context: Context,
        build: Callable[..., BuiltRayJob],
        name_of: Callable[[AirflowIdentity], str],
        **extra: Any,
    ) -> tuple[AirflowIdentity, str, BuiltRayJob, QueueCapacity]:
        """This try's identity, the run's priority, and the body ``build`` renders for the object
        ``name_of`` names, checked against the cluster (``build_and_preflight``); raises ``KueueRayError``
        before anything is created."""
        identity = task_identity(context)
        priority = self.resolve_priority(context)
        built, capacity = build_and_preflight(
            self, build, name=name_of(identity), priority=priority, identity=identity, **extra
        )
        return identity, priority, built, capacity
