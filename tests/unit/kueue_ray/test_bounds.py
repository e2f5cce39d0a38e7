"""Every wait is bounded: default timeouts, "inf" for none, bad values refused, the limits stated, and the
task's execution_timeout carried as a deadline the Watchdog enforces while the task is deferred."""

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kueue_ray.bounds import DEFAULT_QUEUE_TIMEOUT, DEFAULT_READY_TIMEOUT, DEFAULT_RUN_TIMEOUT
from kueue_ray.phases import Phase
from kueue_ray.status import Observation
from kueue_ray.verdicts import GAVE_UP, VerdictStatus
from kueue_ray.wait_policy import WaitPolicy
from kueue_ray.waiting import Watchdog

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_unset_timeouts_take_finite_defaults():
    for given in ({}, {"queue_timeout": None, "run_timeout": "", "ready_timeout": "None"}):
        policy = WaitPolicy.from_dict(given)
        assert (policy.queue_timeout, policy.run_timeout, policy.ready_timeout) == (
            DEFAULT_QUEUE_TIMEOUT,
            DEFAULT_RUN_TIMEOUT,
            DEFAULT_READY_TIMEOUT,
        )


def test_no_limit_is_asked_for_explicitly_and_survives_the_trigger_kwargs():
    policy = WaitPolicy.from_dict({"queue_timeout": "inf", "run_timeout": float("inf"), "ready_timeout": 60})
    assert (policy.queue_timeout, policy.run_timeout, policy.ready_timeout) == (None, None, 60)
    again = WaitPolicy.from_dict(json.loads(json.dumps(policy.to_dict())))
    assert again == policy, "no limit stays no limit through JSON (None would read as the default)"


@pytest.mark.parametrize("value", [0, -5, "soon", True])
def test_a_bad_timeout_is_refused_naming_the_field_and_the_fix(value):
    with pytest.raises(
        ValueError, match=r'queue_timeout: not a timeout .* Fix: give seconds > 0, "inf" for no'
    ):
        WaitPolicy.from_dict({"queue_timeout": value})


def test_the_limits_are_stated_in_words():
    assert (
        WaitPolicy().limits()
        == "queue_timeout 24 h (default), run_timeout 72 h (default); no execution_timeout"
    )
    policy = WaitPolicy.from_dict(
        {"queue_timeout": 90, "ready_timeout": "inf", "deadline": "2026-12-01T14:00:00+00:00"}
    )
    assert policy.limits("ready_timeout") == (
        'queue_timeout 90 s, ready_timeout none ("inf": waits for ever); '
        "execution_timeout at 2026-12-01T14:00:00+00:00"
    )


def test_the_execution_deadline_is_this_try_s_start_plus_execution_timeout():
    task = SimpleNamespace(execution_timeout=timedelta(hours=2), queue_timeout=None)
    context = {"ti": SimpleNamespace(start_date=T0)}
    assert WaitPolicy.of(task, context).deadline == "2026-12-01T14:00:00+00:00"
    assert WaitPolicy.of(SimpleNamespace(execution_timeout=None), context).deadline is None
    assert WaitPolicy.of(task).deadline is None, "without a context: no deadline (e.g. a policy re-read)"


def queued() -> Observation:
    return Observation(phase=Phase.QUEUED, terminal=False, reason="Pending", message="waiting for quota")


def test_a_deferred_wait_ends_when_the_execution_deadline_passes():
    policy = WaitPolicy(deadline=(T0 + timedelta(minutes=10)).isoformat())
    dog = Watchdog(policy, T0)
    assert dog.check(queued(), None, T0 + timedelta(minutes=9)) is None
    assert dog.seconds_until_next_deadline(T0 + timedelta(minutes=9)) == 60, "the trigger wakes for it"
    verdict = dog.check(queued(), None, T0 + timedelta(minutes=10))
    assert verdict.status == VerdictStatus.EXECUTION_TIMEOUT
    assert verdict.message.startswith(
        "execution_timeout passed at 2026-12-01T12:10:00+00:00 while it was QUEUED"
    )
    assert VerdictStatus.EXECUTION_TIMEOUT in GAVE_UP, "the resumed operator deletes the RayJob it owns"
