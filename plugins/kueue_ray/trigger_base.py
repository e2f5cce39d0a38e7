"""What the RayJob and RayService triggers share: their wait policy, resuming after an unexpected error,
and firing exactly once.

A trigger that ends without an event fails its task for a reason that has nothing to do with the object it
waits for, so ``run`` never lets an error of its own end the wait: it logs it and resumes after a jittered,
doubling pause, continuing with what the wait has learnt so far (``progress``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from kueue_ray.kube.refusals import Backoff
from kueue_ray.wait_policy import WaitPolicy

RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX = 1.0, 60.0
"""Pause before resuming a wait that an unexpected error interrupted (doubling, jittered)."""
KILL_BUDGET_SECONDS = 20.0
"""How long the kill decision and its delete may take: under Airflow's ``[triggerer] on_kill_timeout``
(30 s by default)."""


async def task_state(ti: Any) -> str | None:
    """The current state of the task instance ``ti`` (any try), through the triggerer's channel to the
    API server, as the provider's pod trigger reads it; None when the task instance no longer exists."""
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import GetTaskStates

    from kueue_ray.orphans import state_key

    map_index = getattr(ti, "map_index", -1)
    map_index = -1 if map_index is None else int(map_index)
    response = await task_runner.SUPERVISOR_COMMS.asend(
        GetTaskStates(dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=map_index)
    )
    states = (getattr(response, "task_states", None) or {}).get(ti.run_id) or {}
    return states.get(state_key(ti.task_id, map_index))


class WaitTrigger(BaseTrigger):
    """Base of the triggers that wait for one object (``kind`` named ``name`` in ``namespace``).

    What it waits for is a ``target`` (``target_type``: ``WaitTarget``, ``ServiceTarget``), given as that
    dataclass's fields and serialized as them, so the target's fields are declared in one place.
    Subclasses say what else they carry (``arguments``), what the wait has learnt (``start``) and how one
    attempt waits (``wait_once``).
    """

    kind: ClassVar[str]
    target_type: ClassVar[Callable[..., Any]]

    def __init__(
        self,
        *,
        kubernetes_conn_id: str = "kubernetes_default",
        policy: WaitPolicy | dict[str, Any] | None = None,
        **target: Any,
    ) -> None:
        super().__init__()
        self.target = self.target_type(**target)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.policy = policy if isinstance(policy, WaitPolicy) else WaitPolicy.from_dict(policy)
        self._fired = False

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def namespace(self) -> str:
        return self.target.namespace

    @property
    def uid(self) -> str:
        return self.target.uid

    def arguments(self) -> dict[str, Any]:
        """What the trigger carries besides its target, its connection and its policy, as ``__init__``
        takes it back."""
        raise NotImplementedError

    def serialize(self) -> tuple[str, dict[str, Any]]:
        arguments = {"kubernetes_conn_id": self.kubernetes_conn_id, "policy": self.policy.to_dict()}
        return self.classpath(), {**vars(self.target), **arguments, **self.arguments()}

    def classpath(self) -> str:
        """Where the triggerer finds this class again: the module it is defined in, not this base's."""
        return f"{type(self).__module__}.{type(self).__qualname__}"

    def start(self) -> Any:
        """What one wait learns and the next attempt continues (timeline, clocks); logged as it starts."""
        raise NotImplementedError

    async def wait_once(self, progress: Any) -> TriggerEvent:
        """Wait until waiting is over; the event to fire."""
        raise NotImplementedError

    async def kill(self) -> None:
        """Delete what this task try owns (its task has let go of it); log what was done."""
        raise NotImplementedError

    async def on_kill(self) -> None:
        """Airflow says a user acted on the task (mark failed or success, clear): delete the object, once
        the task instance has really let go (``deletion.still_deferred``), through ``kill``.

        The decision and the delete run as a task of their own, bounded by ``KILL_BUDGET_SECONDS``: the
        triggerer cancels this trigger again on every loop until it ends, and a cancellation between the
        state read and the delete, or during the delete, must neither skip nor half-do it.
        """
        if self._fired:
            return
        decision = asyncio.ensure_future(self._kill_once_let_go())
        while not decision.done():
            try:
                await asyncio.shield(decision)
            except asyncio.CancelledError:
                continue  # the triggerer's repeated cancellation: the bounded decision finishes regardless
        decision.result()

    @staticmethod
    async def _position(queue: str | None, observation: Any, subscription: Any) -> str | None:
        """The queue position of the observed Workload for a log line (a transition, QUEUED or
        INADMISSIBLE), from the LocalQueue's shared visibility read: asked for only when such a line is
        written."""
        if not queue:
            return None
        positions = await subscription.pending_positions(queue)
        position = positions.get(observation.workload_name) if positions else None
        return position.describe() if position else None

    async def read_task_state(self) -> str | None:
        """The state of this trigger's task instance now (``task_state``)."""
        return await task_state(self.task_instance)

    async def _kill_once_let_go(self) -> None:
        from kueue_ray.deletion import still_deferred

        async with asyncio.timeout(KILL_BUDGET_SECONDS):
            try:
                held = still_deferred(await self.read_task_state())
            except Exception as exc:  # noqa: BLE001 - not knowing is a reason to keep, never to delete
                held = (
                    f"its task instance's state could not be read ({type(exc).__name__}: {exc}); the janitor "
                    f"deletes it once no task waits for it"
                )
            if held is not None:
                self.log.info("Not deleting %s %s/%s: %s", self.kind, self.namespace, self.name, held)
                return
            await self.kill()

    def fire(self, payload: dict[str, Any]) -> TriggerEvent:
        """The one event, which resumes the task on a worker; from now on ``on_kill`` deletes nothing."""
        self._fired = True
        return TriggerEvent(payload)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        progress = self.start()
        watchdog = getattr(progress, "watchdog", None)
        self.log.info("Limits: %s", self.policy.limits(getattr(watchdog, "admitted_limit", "run_timeout")))
        backoff = Backoff(RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX)
        while True:
            try:
                event = await self.wait_once(progress)
            except Exception:  # noqa: BLE001 - only the object may end the wait, never an error of ours
                delay = backoff.next_delay()
                self.log.exception(
                    "Waiting for %s %s/%s was interrupted; resuming in %.1fs",
                    self.kind,
                    self.namespace,
                    self.name,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            yield event
            return
