"""A trigger's on_kill deletes only once its task instance has let go, and the triggerer's repeated
cancellation (it cancels the trigger again on every loop until it ends) cannot cut that decision short.
An event that resumes the task on a worker is held until the trigger has run the settle time (Airflow
3.3.2 fails a task resumed within seconds of deferring); one that ends the task in the triggerer is not."""

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest
from airflow.triggers.base import TaskSuccessEvent
from kueue_ray.deletion import still_deferred
from kueue_ray.trigger_base import WaitTrigger, resume_settle_seconds, seconds_since
from kueue_ray.waiting import WaitTarget


class Recorder(WaitTrigger):
    kind = "RayJob"
    target_type = WaitTarget

    def __init__(self, state, state_delay=0.0, kill_delay=0.0, deferred_at=None):
        super().__init__(
            name="rj", namespace="ray", uid="u", kubernetes_conn_id="k", policy=None, deferred_at=deferred_at
        )
        self.state, self.state_delay, self.kill_delay = state, state_delay, kill_delay
        self.killed = False

    def arguments(self):
        return {}

    def start(self):
        return None

    async def wait_once(self, progress):
        return self.event

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


def test_a_state_read_that_never_answers_keeps_the_object_and_says_why(monkeypatch, capfd):
    """The triggerer's channel to Airflow's API server did not answer a kill's state read for 20 s once
    (CI, a triggerer that had just taken the trigger over): Airflow logged only "on_kill() timed out". The
    read now has half the kill's budget; unanswered, nothing is deleted and the task log says why."""
    import kueue_ray.trigger_base as trigger_base

    monkeypatch.setattr(trigger_base, "STATE_READ_SECONDS", 0.05)
    trigger = Recorder("failed", state_delay=5.0)
    started = time.monotonic()
    asyncio.run(trigger.on_kill())
    assert not trigger.killed and time.monotonic() - started < 1
    told = capfd.readouterr().out  # Airflow's structlog writes the trigger's task log to stdout here
    assert "Not deleting RayJob ray/rj: its task instance's state was not read within 0 s" in told


async def first_event(trigger):
    async for event in trigger.run():
        return event


def test_nothing_is_deleted_once_the_event_was_handed_over(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", "0")
    trigger = Recorder("failed")
    trigger.event = trigger.fire({"status": "success"})
    asyncio.run(first_event(trigger))
    asyncio.run(trigger.on_kill())
    assert not trigger.killed


@pytest.mark.parametrize("settle", ["0.6", "0"])
def test_an_event_that_resumes_on_a_worker_waits_out_the_settle_time_and_a_task_end_does_not(
    monkeypatch, settle
):
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", settle)
    for event, held in ((TaskSuccessEvent(), False), (None, float(settle) > 0)):
        trigger = Recorder("deferred")
        trigger.event = event or trigger.fire({"status": "failed"})
        started = time.monotonic()
        assert asyncio.run(first_event(trigger)) is trigger.event
        assert (time.monotonic() - started >= 0.6) is held, type(trigger.event).__name__


def test_a_trigger_run_again_long_after_its_deferral_holds_nothing(monkeypatch):
    """A restarted triggerer runs the triggers of tasks that deferred long ago: their worker reported its
    exit long ago too. The deferral time travels with the trigger from the worker."""
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", "5")
    deferred = Recorder("deferred", deferred_at=(datetime.now(UTC) - timedelta(seconds=60)).isoformat())
    carried = Recorder("deferred", deferred_at=deferred.serialize()[1]["deferred_at"])
    assert carried.deferred_at == deferred.deferred_at
    carried.event = carried.fire({"status": "failed"})
    started = time.monotonic()
    asyncio.run(first_event(carried))
    assert time.monotonic() - started < 1

    just_deferred = Recorder("deferred", deferred_at=(datetime.now(UTC) - timedelta(seconds=4)).isoformat())
    just_deferred.event = just_deferred.fire({"status": "failed"})
    started = time.monotonic()
    asyncio.run(first_event(just_deferred))
    assert 0.8 <= time.monotonic() - started < 1.5  # the 5 s count from the deferral, 4 s ago


def test_a_kill_during_the_hold_deletes_once_the_task_let_go(monkeypatch):
    """The event is not handed over yet: a user who marks the task failed meanwhile gets the object deleted,
    as before the trigger fired (the resumed worker that would have cleaned up never runs)."""
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", "5")

    async def scenario():
        trigger = Recorder("failed")
        trigger.event = trigger.fire({"status": "failed"})
        run = asyncio.ensure_future(first_event(trigger))
        await asyncio.sleep(0.2)
        run.cancel()  # what the triggerer does to a trigger whose task left the deferred state
        await trigger.on_kill()
        return trigger.killed

    assert asyncio.run(scenario()) is True


def test_a_settle_time_that_is_not_a_number_of_seconds_is_refused_naming_the_setting(monkeypatch):
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", "-1")
    with pytest.raises(ValueError, match=r"\[kueue_ray\] resume_settle_seconds: '-1'.*AIRFLOW__KUEUE_RAY__"):
        resume_settle_seconds()
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", "")
    assert resume_settle_seconds() == 10
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", "0")  # no hold
    assert resume_settle_seconds() == 0


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


def test_a_deferral_time_that_cannot_be_read_holds_the_full_settle_time_instead_of_failing():
    assert seconds_since(None) == seconds_since("not a time") == seconds_since("2026-12-05T10:00:00") == 0.0
    assert 59 < seconds_since((datetime.now(UTC) - timedelta(seconds=60)).isoformat()) < 62
