"""SubmitRayJobOperator: run a task as a KubeRay RayJob that Kueue queues, prioritises and admits.

What it shares with the RayService deploy operator (arguments, hook, priority, build and preflight, the
trigger's ending) is ``kueue_ray.submitting``'s; this module keeps what is a RayJob's: submit or adopt,
wait, withdraw what it gave up on.

Importing this module (as every DAG file does) must stay cheap: the dag-processor re-imports it for every
parse of every DAG file that uses it. So at module level it imports only what defining the operator class
needs (``BaseOperator``, the extra links, and the light ``naming``, ``results`` and ``verdicts``). The
trigger (which brings Airflow's trigger machinery and the watch hub), the wait (``kueue_ray.waiting``, ``kueue_ray.worker_wait``), the
status / timeline logic, the hook and the manifests are imported inside the methods that run on a worker or
the triggerer, where their cost is paid once per task, not once per parse.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from kueue_ray.links import KueueTabLink, RayDashboardLink, dashboard_template, where_to_look
from kueue_ray.naming import AirflowIdentity
from kueue_ray.priority_change import priority_terms
from kueue_ray.results import RAYJOB_XCOM_KEY, finish, rayjob_details
from kueue_ray.submitting import KueueSubmitOperator, bad_input_fails, task_identity, trigger_ending
from kueue_ray.verdicts import GAVE_UP

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kueue_ray.hook import RayJobHook


class SubmitRayJobOperator(KueueSubmitOperator):
    """Submit a RayJob to a Kueue LocalQueue with a WorkloadPriorityClass, and wait for it.

    The RayJob is built from a Jinja template (``kueue_ray/templates/<name>.yaml.j2`` or your own, a path,
    or a dict) and checked before anything reaches the cluster: the manifest is validated, the LocalQueue and
    WorkloadPriorityClass must exist, and the request must fit the ClusterQueue's maximum capacity
    (counting cohort borrowing). Then each try creates a RayJob of its own name (the deployment, task
    instance and try hashed): a later try adopts an earlier try's RayJob only while it is unfinished (the
    worker died mid-wait: no duplicate is queued), and submits afresh after a finished one, so Clear and
    retries re-run the work (``reuse_succeeded`` opts into skipping it after a success).

    Waiting is deferred to the triggerer by default, where one shared watch serves all waiting tasks, and
    a success ends the task there too (``end_in_triggerer``): the task leaves the same XComs and log
    lines without taking a worker slot again or waiting for the scheduler to hand it one.
    The task log tells what happens and why (queued with position, admitted with flavors, running,
    preempted, requeued, ...). Every wait is bounded: ``queue_timeout`` (default 24 h; waiting for admission
    checks, quota reserved but not yet admitted, is queueing too), ``run_timeout`` (default 72 h, from the
    admission), ``"inf"`` for none, and ``execution_timeout`` also while deferred (``kueue_ray.bounds``). The task fails with Kueue's/KubeRay's message when the RayJob fails, an
    admission check rejects it, it stays inadmissible longer than ``inadmissible_grace``, or it exceeds a
    timeout, ``max_preemptions`` or ``max_pods_ready_evictions``; a RayJob given up on while still queued or
    running is deleted.

    .. code-block:: python

        from kueue_ray.operators import SubmitRayJobOperator

        train = SubmitRayJobOperator(
            task_id="train",
            template="llm-train",
            values={"epochs": "{{ params.epochs }}"},
            local_queue="team-a",
            priority="prod-priority",
            priority_policy={"allowed": ["dev-priority", "prod-priority"]},
            run_timeout=6 * 3600,
        )

    :param template: a template name (``<name>`` or ``<name>.yaml.j2``) looked up in ``template_searchpath``
        and then among the shipped ``kueue_ray/templates``, a file path, or a RayJob dict.
    :param template_searchpath: folder(s) holding your own templates; default: the DAG's
        ``template_searchpath``.
    :param local_queue: Kueue LocalQueue in ``namespace`` (templated). Not ``queue``: that is
        ``BaseOperator``'s executor queue, set with ``executor_queue`` or the DAG's ``default_args``;
        ``queue=`` is still read as the LocalQueue, with a DeprecationWarning.
    :param priority: WorkloadPriorityClass; with ``priority_policy`` it is the DAG's default priority.
    :param namespace: namespace of the RayJob.
    :param values: template variables.
    :param entrypoint / image / runtime_env / worker_replicas / annotations: overrides applied to the
        rendered RayJob (see ``kueue_ray.manifests.build_rayjob``).
    :param ray_resources: per-group container resources, ``manifests.build_rayjob(resources=...)``
        (not ``resources``: that name is BaseOperator's executor resources and cannot be templated).
    :param priority_policy: enable run-type-aware priorities (``kueue_ray.priority.resolve_priority``):
        {"allowed": [low, ..., high] or {name: value}, "allow_backfill_priority": False,
        "backfill_priority": "dev-priority"}. Manual runs may choose with the ``priority`` param.
    :param kubernetes_conn_id: Airflow ``kubernetes`` connection.
    :param wait_for_completion: wait for the RayJob to finish (else return after submitting).
    :param deferrable: wait in the triggerer (default) instead of holding a worker slot.
    :param end_in_triggerer: when the RayJob succeeds, end the task in the triggerer (default): XComs
        ``timeline``, ``rayjob``, ``return_value`` and the dashboard link, the closing lines and the driver
        log tail in the task log, then Airflow's ``TaskSuccessEvent``; no worker runs again. False resumes
        on a worker (``execute_complete``), as does every failure (so retries apply) and a task that must
        run code on a worker at its end (a subclass overriding ``execute_complete`` or ``post_execute``, an
        ``on_success_callback``, ``outlets``, other extra links; the task log says which).
    :param reuse_succeeded: memoization, off by default: when an earlier try of this task instance (e.g.
        before a Clear) has a RayJob that succeeded, take its result instead of running the work again
        (logged at WARNING). Off, Clear and retries always submit a new RayJob after a finished one.
    :param queue_timeout / run_timeout: seconds; see ``kueue_ray.wait_policy.WaitPolicy``.
    :param fail_on_inadmissible / inadmissible_grace / max_preemptions: see ``WaitPolicy``.
    :param max_pods_ready_evictions: how many evictions for pods that did not get ready within Kueue's
        waitForPodsReady timeout (30 min by default; usually a taint without toleration, or an image that
        cannot be pulled) are tolerated; the next one fails the task with that hint and deletes the RayJob
        (Kueue itself would requeue it forever). Default 1; None never gives up.
    :param poll_interval: seconds between reads when waiting in the worker (``deferrable=False``).
    :param resync_interval: the longest a missed watch event may go unnoticed while deferred, seconds: the
        triggerer's watch hub relists the namespace at the shortest interval of its triggers.
    :param log_tail_lines: driver (submitter) log lines copied into the task log at the end.
    :param ray_dashboard_url_template: URL of the "Ray dashboard" link, a ``str.format`` template over
        {namespace}, {name}, {uid} (see ``kueue_ray.links``); default: localhost through the
        ``kubectl port-forward`` the task log prints.
    """

    template_fields: Sequence[str] = (
        *KueueSubmitOperator.template_fields,
        "entrypoint",
        "run_timeout",
    )
    template_fields_renderers = {
        "values": "json",
        "runtime_env": "json",
        "ray_resources": "json",
        "template": "yaml",
    }
    operator_extra_links = (KueueTabLink(), RayDashboardLink())
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        entrypoint: str | None = None,
        wait_for_completion: bool = True,
        end_in_triggerer: bool = True,
        reuse_succeeded: bool = False,
        run_timeout: float | None = None,
        log_tail_lines: int = 50,
        ray_dashboard_url_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.entrypoint = entrypoint
        self.wait_for_completion = wait_for_completion
        self.end_in_triggerer = end_in_triggerer
        self.reuse_succeeded = reuse_succeeded
        self.run_timeout = run_timeout
        self.log_tail_lines = log_tail_lines
        self.ray_dashboard_url_template = ray_dashboard_url_template
        self.rayjob_details: dict[str, Any] | None = None
        self._owned: tuple[str, str, str, AirflowIdentity] | None = None

    def new_hook(self) -> RayJobHook:
        from kueue_ray.hook import RayJobHook

        return RayJobHook(kubernetes_conn_id=self.kubernetes_conn_id)

    # --- execution -----------------------------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any] | None:
        from kueue_ray.manifests import build_rayjob
        from kueue_ray.quantity import describe_resources
        from kueue_ray.status import TERMINAL_PHASES, observe
        from kueue_ray.trigger import RayJobTrigger
        from kueue_ray.wait_policy import WaitPolicy
        from kueue_ray.waiting import WaitTarget
        from kueue_ray.worker_wait import WorkerWait

        with bad_input_fails():
            identity, priority, built, queue_capacity = self.prepare(
                context, build_rayjob, AirflowIdentity.rayjob_name, entrypoint=self.entrypoint
            )
        self.log.info(
            "Preflight ok: LocalQueue %s -> ClusterQueue %s; RayJob requests %s in total",
            self.local_queue,
            queue_capacity.cluster_queue,
            describe_resources(built.total_request),
        )
        hook = self.hook
        rayjob = self.submit(hook, built.body, identity)
        metadata = rayjob["metadata"]
        self._owned = (metadata["name"], self.namespace, metadata["uid"], identity)
        terms = priority_terms(self.priority_policy, context.get("dag_run"))
        self.rayjob_details = rayjob_details(rayjob, queue=self.local_queue, priority=priority, **terms)
        context["ti"].xcom_push(key=RAYJOB_XCOM_KEY, value=self.rayjob_details)
        for line in where_to_look(dashboard_template(self), self.rayjob_details):
            self.log.info(line)
        reference = {"name": metadata["name"], "namespace": self.namespace, "uid": metadata["uid"]}
        if not self.wait_for_completion:
            return reference

        target = WaitTarget(
            name=metadata["name"],
            namespace=self.namespace,
            uid=metadata["uid"],
            queue=self.local_queue,
            priority=priority,
            submitted_at=metadata.get("creationTimestamp") or datetime.now(UTC).isoformat(),
        )
        policy = WaitPolicy.of(self, context)
        if self.deferrable and observe(rayjob, None).phase not in TERMINAL_PHASES:
            trigger = RayJobTrigger(
                **vars(target),
                kubernetes_conn_id=self.kubernetes_conn_id,
                policy=policy,
                owner=vars(identity).copy(),
                end_in_triggerer=trigger_ending(
                    self, SubmitRayJobOperator, {"queue": self.local_queue, "priority": priority, **terms}
                ),
                deferred_at=datetime.now(UTC).isoformat(),
            )
            self.defer(trigger=trigger, method_name="execute_complete")
        waiter = WorkerWait(target, policy, self.log, tail_lines=self.log_tail_lines)
        return self.execute_complete(context, waiter.wait(hook))

    def submit(self, hook: RayJobHook, body: dict, identity: AirflowIdentity) -> dict:
        """Create this try's RayJob, or adopt the one an earlier try left unfinished (``kueue_ray.adoption``).

        * an earlier try's RayJob still queued or running -> adopted, and re-annotated with this try number
          so the earlier try's trigger will not delete it on kill (a worker died mid-wait);
        * earlier tries' RayJobs all finished -> this try creates its own: Clear and retries re-run the
          work, and the earlier ones stay readable; ``reuse_succeeded=True`` takes an earlier success
          instead (logged at WARNING);
        * this try's name taken by anything that is not this try -> error: we never touch what is not ours.
        """
        from kueue_ray.adoption import plan

        decided = plan(
            identity, hook.earlier_tries(self.namespace, identity), reuse_succeeded=self.reuse_succeeded
        )
        for level, line in decided.lines:
            self.log.log(level, line)
        if decided.chosen is not None:
            rayjob, holder = decided.chosen.rayjob, decided.chosen.holder
            if holder != identity:
                rayjob = hook.claim_rayjob(rayjob, identity)
            return rayjob
        name = body["metadata"]["name"]
        rayjob, created = hook.create_or_get_rayjob(body, self.namespace)
        if created:
            self.log.info(
                "Created RayJob %s/%s (uid %s) for try %s",
                self.namespace,
                name,
                rayjob["metadata"]["uid"],
                identity.try_number,
            )
            return rayjob
        holder = AirflowIdentity.from_annotations(rayjob["metadata"].get("annotations"))
        if holder != identity:
            raise AirflowException(
                f"RayJob {self.namespace}/{name} already exists and belongs to {holder or 'something else'}, "
                f"not to this try ({identity}); delete it or rename the task"
            )
        self.log.info("RayJob %s/%s was already created by this try; waiting for it", self.namespace, name)
        return rayjob

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after waiting: timeline to XCom, driver log to the task log, raise unless succeeded."""
        from kueue_ray.results import event_details

        self.rayjob_details = event_details(
            event,
            queue=event.get("queue") or self.local_queue,
            priority=event.get("priority"),
            **priority_terms(self.priority_policy, context.get("dag_run")),
        )
        context["ti"].xcom_push(key=RAYJOB_XCOM_KEY, value=self.rayjob_details)
        if event["status"] in GAVE_UP:
            self._withdraw(context, event)
        return finish(self, context, event, log_tail_lines=self.log_tail_lines)

    def _withdraw(self, context: Context, event: dict[str, Any]) -> None:
        """We stop waiting for a RayJob that has not finished: take it out of the queue (or stop it) rather
        than leave it to be admitted later with nobody waiting. Only if this try still owns it."""
        result = self.hook.delete_if_owned(
            event["name"], event["namespace"], event["uid"], task_identity(context)
        )
        self.log.info(
            "Gave up on RayJob %s/%s (%s): delete -> %s",
            event["namespace"],
            event["name"],
            event["status"],
            result,
        )

    def on_kill(self) -> None:
        """Killed while waiting in the worker (deferrable=False): delete the RayJob if this try owns it."""
        if self._owned is None:
            return
        name, namespace, uid, identity = self._owned
        result = self.hook.delete_if_owned(name, namespace, uid, identity)
        self.log.info("on_kill: RayJob %s/%s %s", namespace, name, result)
