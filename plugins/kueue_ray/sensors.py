"""RayJobSensor: wait for a RayJob someone else submitted (often SubmitRayJobOperator with
``wait_for_completion=False``), with the same rules and the same story in the log as the operator.

Deferrable by default (one shared watch in the triggerer); ``deferrable=False`` pokes with the sync hook
in ``poke`` or ``reschedule`` mode.

Marking a deferred sensor failed (or success) stops what it waits for, as it would for the operator: its
trigger's on_kill deletes the RayJob, but only one submitted in the sensor's own DAG run, and only while
this very try is the RayJob's registered waiter. Before deferring, the sensor stamps itself into the
RayJob's ``WAITER_ANNOTATION``; a Clear's new try re-stamps before the old try's on_kill runs, so the old
try leaves the RayJob to the new one. A RayJob of another run, or not created by Airflow, is never
touched. ``delete_on_kill=False`` makes the sensor a pure watcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from kueue_ray.links import KueueTabLink, RayDashboardLink, dashboard_template, where_to_look
from kueue_ray.naming import PRIORITY_CLASS_LABEL, QUEUE_LABEL
from kueue_ray.results import RAYJOB_XCOM_KEY, finish, rayjob_details
from kueue_ray.submitting import task_identity, trigger_ending

if TYPE_CHECKING:
    from airflow.sdk import Context

    from kueue_ray.hook import RayJobHook
    from kueue_ray.waiting import WaitTarget
    from kueue_ray.worker_wait import WorkerWait


class RayJobSensor(BaseSensorOperator):
    """Wait until a RayJob finishes, through Kueue queueing, admission and preemption.

    Name the RayJob directly (``rayjob_name`` + ``namespace``, both templated) or point at the task that
    submitted it (``submit_task_id``: its ``rayjob`` XCom gives name, namespace and uid). On success it
    returns ``{name, namespace, uid}`` and pushes the timeline (XCom key ``timeline``): submission,
    each admission (ClusterQueue, flavors), preemptions with reasons, finish time, queued / running
    seconds, final phase and resource-seconds per resource.

    .. code-block:: python

        wait = RayJobSensor(task_id="wait_for_training", submit_task_id="train", run_timeout=4 * 3600)

    :param rayjob_name: RayJob name (templated).
    :param namespace: its namespace (templated; default "default").
    :param submit_task_id: take name / namespace / uid from this task's ``rayjob`` XCom instead.
    :param kubernetes_conn_id: Airflow ``kubernetes`` connection.
    :param deferrable: wait in the triggerer (default); else poke / reschedule with the sync hook.
    :param end_in_triggerer: when the RayJob succeeds, end the task in the triggerer with the same XComs
        and log lines (default); False resumes on a worker. See ``SubmitRayJobOperator``.
    :param queue_timeout / run_timeout / fail_on_inadmissible / inadmissible_grace / max_preemptions /
        max_pods_ready_evictions: see ``kueue_ray.wait_policy.WaitPolicy`` and ``SubmitRayJobOperator``
        (``max_pods_ready_evictions`` defaults to 1 here too). In reschedule mode the inadmissible grace
        restarts with every poke; use poke mode or deferral when it matters.
    :param delete_on_kill: when the deferred sensor is killed (marked failed / success), delete the RayJob if
        it was submitted in the same DAG run and this try is still its waiter (see the module docstring).
        Killing a sensor that waits in a worker (``deferrable=False``) deletes nothing.
    :param resync_interval: the longest a missed watch event may go unnoticed while deferred, seconds: the
        triggerer's watch hub relists the namespace at the shortest interval of its triggers.
    :param log_tail_lines: driver (submitter) log lines copied into the task log at the end.
    :param ray_dashboard_url_template: URL of the "Ray dashboard" link (see ``SubmitRayJobOperator``).
    """

    template_fields: Sequence[str] = (
        "rayjob_name",
        "namespace",
        "submit_task_id",
        "queue_timeout",
        "run_timeout",
    )
    operator_extra_links = (KueueTabLink(), RayDashboardLink())

    def __init__(
        self,
        *,
        rayjob_name: str | None = None,
        namespace: str = "default",
        submit_task_id: str | None = None,
        kubernetes_conn_id: str = "kubernetes_default",
        deferrable: bool = True,
        end_in_triggerer: bool = True,
        queue_timeout: float | None = None,
        run_timeout: float | None = None,
        fail_on_inadmissible: bool = True,
        inadmissible_grace: float = 60.0,
        max_preemptions: int | None = None,
        max_pods_ready_evictions: int | None = 1,
        delete_on_kill: bool = True,
        resync_interval: float = 300.0,
        log_tail_lines: int = 50,
        ray_dashboard_url_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not rayjob_name and not submit_task_id:
            raise ValueError("RayJobSensor needs rayjob_name or submit_task_id")
        self.rayjob_name = rayjob_name
        self.namespace = namespace
        self.submit_task_id = submit_task_id
        self.kubernetes_conn_id = kubernetes_conn_id
        self.deferrable = deferrable
        self.end_in_triggerer = end_in_triggerer
        self.queue_timeout = queue_timeout
        self.run_timeout = run_timeout
        self.fail_on_inadmissible = fail_on_inadmissible
        self.inadmissible_grace = inadmissible_grace
        self.max_preemptions = max_preemptions
        self.max_pods_ready_evictions = max_pods_ready_evictions
        self.delete_on_kill = delete_on_kill
        self.resync_interval = resync_interval
        self.log_tail_lines = log_tail_lines
        self.ray_dashboard_url_template = ray_dashboard_url_template
        self.rayjob_details: dict[str, Any] | None = None
        self._target: WaitTarget | None = None
        self._wait: WorkerWait | None = None

    @cached_property
    def hook(self) -> RayJobHook:
        """The synchronous hook on ``kubernetes_conn_id``, made once per task try."""
        from kueue_ray.hook import RayJobHook

        return RayJobHook(kubernetes_conn_id=self.kubernetes_conn_id)

    def _find(self, context: Context) -> dict[str, Any]:
        """The RayJob to wait for; it must exist."""
        if self.submit_task_id:
            reference = context["ti"].xcom_pull(task_ids=self.submit_task_id, key=RAYJOB_XCOM_KEY)
            if not reference:
                raise AirflowException(
                    f"submit_task_id={self.submit_task_id!r} pushed no {RAYJOB_XCOM_KEY!r} XCom; "
                    "is it a SubmitRayJobOperator that ran before this sensor?"
                )
            name, namespace = reference["name"], reference["namespace"]
        else:
            name, namespace = self.rayjob_name, self.namespace
        rayjob = self.hook.get_rayjob(name, namespace)
        if rayjob is None:
            raise AirflowException(f"RayJob {namespace}/{name} does not exist")
        if self.submit_task_id and reference.get("uid") not in (None, rayjob["metadata"]["uid"]):
            raise AirflowException(
                f"RayJob {namespace}/{name} was replaced (uid {rayjob['metadata']['uid']}, "
                f"expected {reference['uid']}); not waiting for an object the submitting task did not create"
            )
        return rayjob

    def _register_as_waiter(self, rayjob: dict, context: Context) -> dict | None:
        """Stamp this try as the RayJob's waiter, so its trigger's on_kill may delete the RayJob; the waiter
        identity for the trigger, or None when this sensor must never delete it."""
        from kueue_ray.hook import foreign_run

        waiter = task_identity(context)
        metadata = rayjob["metadata"]
        foreign = foreign_run(rayjob, waiter)
        if foreign is not None:
            self.log.info(
                "Killing this task will not delete RayJob %s/%s: %s",
                metadata["namespace"],
                metadata["name"],
                foreign,
            )
            return None
        if self.hook.register_waiter(rayjob, waiter) is None:
            self.log.info(
                "RayJob %s/%s changed hands while registering as its waiter",
                metadata["namespace"],
                metadata["name"],
            )
            return None
        return vars(waiter).copy()

    def _wait_target(self, rayjob: dict) -> WaitTarget:
        from kueue_ray.waiting import WaitTarget

        metadata = rayjob["metadata"]
        labels = metadata.get("labels") or {}
        return WaitTarget(
            name=metadata["name"],
            namespace=metadata["namespace"],
            uid=metadata["uid"],
            queue=labels.get(QUEUE_LABEL),
            priority=labels.get(PRIORITY_CLASS_LABEL),
            submitted_at=metadata.get("creationTimestamp") or datetime.now(UTC).isoformat(),
        )

    def execute(self, context: Context) -> Any:
        rayjob = self._find(context)
        self.rayjob_details = rayjob_details(rayjob)
        context["ti"].xcom_push(key=RAYJOB_XCOM_KEY, value=self.rayjob_details)
        for line in where_to_look(dashboard_template(self), self.rayjob_details):
            self.log.info(line)
        self._target = self._wait_target(rayjob)
        if self.deferrable:
            from kueue_ray.trigger import RayJobTrigger
            from kueue_ray.wait_policy import WaitPolicy

            waiter = self._register_as_waiter(rayjob, context) if self.delete_on_kill else None
            trigger = RayJobTrigger(
                **vars(self._target),
                kubernetes_conn_id=self.kubernetes_conn_id,
                policy=WaitPolicy.of(self, context),
                owner=None,  # a sensor never owns the RayJob; at most it is its registered waiter
                waiter=waiter,
                end_in_triggerer=trigger_ending(self, RayJobSensor, {}),
                deferred_at=datetime.now(UTC).isoformat(),
            )
            self.defer(
                trigger=trigger,
                method_name="execute_complete",
                timeout=timedelta(seconds=self.timeout) if self.timeout else None,
            )
        return super().execute(context)

    def poke(self, context: Context) -> PokeReturnValue:
        from kueue_ray.wait_policy import WaitPolicy
        from kueue_ray.worker_wait import WorkerWait

        if self._wait is None:  # kept across pokes in poke mode; rebuilt per poke in reschedule mode
            # The driver log on a MultiKueue worker is followed between pokes only in poke mode: a
            # rescheduled task is a new process each poke, and no stream outlives it.
            lines = self.log_tail_lines if self.mode == "poke" else 0
            self._wait = WorkerWait(self._target, WaitPolicy.of(self, context), self.log, tail_lines=lines)
        event = self._wait.step(self.hook)
        if event is None:
            self._wait.follow_driver_log(self.hook)
            return PokeReturnValue(is_done=False)
        event = self._wait.with_driver_log(event)
        return PokeReturnValue(is_done=True, xcom_value=self.execute_complete(context, event))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from kueue_ray.results import event_details

        self.rayjob_details = event_details(event)
        context["ti"].xcom_push(key=RAYJOB_XCOM_KEY, value=self.rayjob_details)
        return finish(self, context, event, log_tail_lines=self.log_tail_lines)
