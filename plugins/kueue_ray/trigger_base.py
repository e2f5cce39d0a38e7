"""What the RayJob and RayService triggers share: their wait policy, resuming after an unexpected error,
and firing exactly once.

A trigger that ends without an event fails its task for a reason that has nothing to do with the object it
waits for, so ``run`` never lets an error of its own end the wait: it logs it and resumes after a jittered,
doubling pause, continuing with what the wait has learnt so far (``progress``). An event that resumes the
task on a worker is held until ``resume_settle_seconds`` after the deferral (Airflow's race, below).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

from airflow.triggers.base import BaseTaskEndEvent, BaseTrigger, TriggerEvent

from kueue_ray import options
from kueue_ray.kube.api import parse_time
from kueue_ray.kube.refusals import Backoff
from kueue_ray.wait_policy import WaitPolicy

RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX = 1.0, 60.0
"""Pause before resuming a wait that an unexpected error interrupted (doubling, jittered)."""
KILL_BUDGET_SECONDS = 20.0
"""How long the kill decision and its delete may take: under Airflow's ``[triggerer] on_kill_timeout``
(30 s by default)."""
STATE_READ_SECONDS = 10.0
"""How long the kill decision waits for its task instance's state (``KILL_BUDGET_SECONDS`` leaves the rest
to the delete): unanswered, the object stays and the task log says why, instead of Airflow's bare
"on_kill() timed out" (seen once in CI, from a triggerer that had just taken the trigger over)."""
DEFAULT_RESUME_SETTLE_SECONDS = 10.0
"""How long after the deferral a trigger holds an event that resumes its task on a worker.

Airflow 3.3.2's scheduler fails a deferred task whose trigger fired soon after the deferral: the worker that
deferred exits with success, and when the scheduler drains that executor event only after the trigger has
put the task back to queued or running (its guard covers scheduled only), it logs "state mismatch" and
fails the try (apache/airflow#67287 queued, #71580 and #72716 running; fixes #71579 and #72767 not
released). The deferring worker's supervisor exits and the scheduler drains its event 4-7 s after the
deferral (measured here under load, and in those reports). So a deploy whose RayService serves within
seconds, or a RayJob that fails at once, lost its try and was retried, rolling the service out again.
An event the trigger would fire sooner is held until then, counted from the deferral (``deferred_at``): a
trigger that a restarted triggerer runs again later holds nothing. An event that ends the task in the
triggerer (``TaskSuccessEvent``) is not held: the task is no longer queued or running when the stale
event is drained."""


def resume_settle_seconds() -> float:
    """``[kueue_ray] resume_settle_seconds`` (``AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS``; 0 holds
    nothing), read in the triggerer; ``DEFAULT_RESUME_SETTLE_SECONDS`` when unset."""
    return options.seconds("resume_settle_seconds", DEFAULT_RESUME_SETTLE_SECONDS, zero_allowed=True)


def seconds_since(deferred_at: str | None) -> float:
    """Seconds since ``deferred_at`` (ISO, with its offset); 0 when it is missing or cannot be read, so an
    odd value holds the full settle time rather than ending the wait with an error."""
    try:
        deferred = parse_time(deferred_at)
        return (datetime.now(UTC) - deferred).total_seconds() if deferred is not None else 0.0
    except (TypeError, ValueError):  # no offset, or not a time
        return 0.0


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
        deferred_at: str | None = None,
        **target: Any,
    ) -> None:
        super().__init__()
        self.target = self.target_type(**target)
        self.kubernetes_conn_id = kubernetes_conn_id
        self.policy = policy if isinstance(policy, WaitPolicy) else WaitPolicy.from_dict(policy)
        self.deferred_at = deferred_at
        """ISO time the task deferred, given by the task as it defers: what the settle time counts from
        (unknown: from the trigger's start), and how the RayJob trigger tells a restart from a first start
        (``kueue_ray.metrics``)."""
        self._fired = False
        self._hook: Any = None

    @property
    def log(self) -> Any:
        """One logger per trigger class (``LoggingMixin.logger``), not one per trigger as
        ``LoggingMixin.log`` makes: the triggerer sends a line to its task's log by the trigger's context
        (the ``trigger_id`` it binds as the trigger starts), not by the logger, and 10,000 waits kept
        10,000 loggers (~0.8 KiB each, bench/README.md)."""
        return type(self).logger()

    @property
    def hook(self) -> Any:
        """The async hook on ``kubernetes_conn_id`` (``make_hook``), made once per trigger on first use. Not
        a ``cached_property``, whose write through the instance's ``__dict__`` cost each of 10,000 waiting
        triggers ~750 bytes."""
        if self._hook is None:
            self._hook = self.make_hook()
        return self._hook

    def make_hook(self) -> Any:
        """The async hook this trigger reads through."""
        raise NotImplementedError

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
        arguments = {
            "kubernetes_conn_id": self.kubernetes_conn_id,
            "policy": self.policy.to_dict(),
            "deferred_at": self.deferred_at,
        }
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
                async with asyncio.timeout(STATE_READ_SECONDS):
                    held = still_deferred(await self.read_task_state())
            except TimeoutError:
                held = (
                    f"its task instance's state was not read within {STATE_READ_SECONDS:.0f} s (the "
                    "triggerer's channel to Airflow's API server did not answer); the janitor deletes it once "
                    "no task waits for it"
                )
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
        """The one event, which resumes the task on a worker. ``run`` hands it over (held until the
        settle time); from then on ``on_kill`` deletes nothing."""
        return TriggerEvent(payload)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        settle = resume_settle_seconds()
        # From the deferral, so a trigger a restarted triggerer runs again holds nothing; at most the settle
        # time from now, whatever the worker's clock said.
        since = seconds_since(self.deferred_at)
        settle_until = time.monotonic() + min(settle, max(0.0, settle - since))
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
            if not isinstance(event, BaseTaskEndEvent) and (hold := settle_until - time.monotonic()) > 0:
                self.log.info(
                    "Resuming the task on a worker in %.1fs: Airflow 3.3.2 would fail a task resumed this "
                    "soon after deferring (apache/airflow#72716)",
                    hold,
                )
                await asyncio.sleep(hold)
            self._fired = True
            yield event
            return
