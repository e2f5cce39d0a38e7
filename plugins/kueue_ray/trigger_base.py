"""What the RayJob and RayService triggers share: their wait policy, resuming after an unexpected error,
and firing exactly once.

A trigger that ends without an event fails its task for a reason that has nothing to do with the object it
waits for, so ``run`` never lets an error of its own end the wait: it logs it and resumes after a jittered,
doubling pause, continuing with what the wait has learnt so far (``progress``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from kueue_ray.refusals import Backoff
from kueue_ray.waiting import WaitPolicy

RESUME_BACKOFF_INITIAL, RESUME_BACKOFF_MAX = 1.0, 60.0
"""Pause before resuming a wait that an unexpected error interrupted (doubling, jittered)."""


class WaitTrigger(BaseTrigger):
    """Base of the triggers that wait for one object (``kind`` named ``name`` in ``namespace``).

    Subclasses say what the wait has learnt (``start``) and how one attempt waits (``wait_once``).
    """

    kind: ClassVar[str]

    def __init__(
        self,
        *,
        name: str,
        namespace: str,
        uid: str,
        kubernetes_conn_id: str,
        policy: WaitPolicy | dict[str, Any] | None,
    ) -> None:
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.uid = uid
        self.kubernetes_conn_id = kubernetes_conn_id
        self.policy = policy if isinstance(policy, WaitPolicy) else WaitPolicy.from_dict(policy)
        self._fired = False

    def classpath(self) -> str:
        """Where the triggerer finds this class again: the module it is defined in, not this base's."""
        return f"{type(self).__module__}.{type(self).__qualname__}"

    def start(self) -> Any:
        """What one wait learns and the next attempt continues (timeline, clocks); logged as it starts."""
        raise NotImplementedError

    async def wait_once(self, progress: Any) -> TriggerEvent:
        """Wait until waiting is over; the event to fire."""
        raise NotImplementedError

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
