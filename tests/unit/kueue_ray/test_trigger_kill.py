"""A trigger's on_kill deletes only once its task instance has let go, and the triggerer's repeated
cancellation (it cancels the trigger again on every loop until it ends) cannot cut that decision short."""

import asyncio

from kueue_ray.deletion import still_deferred
from kueue_ray.trigger_base import WaitTrigger
from kueue_ray.waiting import WaitTarget


class Recorder(WaitTrigger):
    kind = "RayJob"
    target_type = WaitTarget

    def __init__(self, state, state_delay=0.0, kill_delay=0.0):
        super().__init__(name="rj", namespace="ray", uid="u", kubernetes_conn_id="k", policy=None)
        self.state, self.state_delay, self.kill_delay = state, state_delay, kill_delay
        self.killed = False

    def serialize(self):
        return self.classpath(), {}

    async def read_task_state(self):
        await asyncio.sleep(self.state_delay)
        if isinstance(self.state, Exception):
            raise self.state
        return self.state

    async def kill(self):
        await asyncio.sleep(self.kill_delay)
        self.killed = True


def test_only_a_task_that_left_the_deferred_state_has_let_go():
    assert still_deferred("deferred") is not None
    assert "another triggerer" in still_deferred("deferred")
    for state in ("failed", "success", "queued", "running", "up_for_retry", None):
        assert still_deferred(state) is None


def test_a_user_kill_deletes_and_a_lost_trigger_or_an_unknown_state_does_not():
    for state, killed in (
        ("failed", True),
        ("success", True),
        ("deferred", False),
        (RuntimeError("x"), False),
    ):
        trigger = Recorder(state)
        asyncio.run(trigger.on_kill())
        assert trigger.killed is killed, state


def test_nothing_is_deleted_once_the_trigger_fired():
    trigger = Recorder("failed")
    trigger.fire({"status": "success"})
    asyncio.run(trigger.on_kill())
    assert not trigger.killed


def test_repeated_cancellation_neither_skips_nor_cuts_the_decision_and_the_delete():
    async def scenario():
        trigger = Recorder("failed", state_delay=0.2, kill_delay=0.2)
        on_kill = asyncio.ensure_future(trigger.on_kill())
        for _ in range(8):  # what the triggerer does about every second, compressed
            await asyncio.sleep(0.05)
            on_kill.cancel()
        await asyncio.wait_for(on_kill, timeout=5)
        return trigger.killed

    assert asyncio.run(scenario()) is True
