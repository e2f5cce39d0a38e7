"""What a subscriber's read costs: answered from the scope's cache, waited for on its loop, or one request
shared by everyone who asks for the same object meanwhile (``kueue_ray.hub.reads``)."""

import asyncio
from types import SimpleNamespace

import pytest
from kueue_ray.hub import HubSettings
from kueue_ray.hub.reads import ANSWER, READ, WAIT, LoopState, plan_read, shared_read, wait_for
from kueue_ray.hub.resources import RAYJOBS
from kueue_ray.hub.scope import _WatchLoop
from kueue_ray.kube.refusals import Refused

BUDGET = 120.0


def plan(loop, *, cached=False, reread=False, absent_is_answer=False):
    return plan_read(
        loop, cached=cached, reread=reread, absent_is_answer=absent_is_answer, first_list_budget=BUDGET
    )


HEALTHY = LoopState(listed=True, failing=False, waited_s=0.0)
FIRST_LIST = LoopState(listed=False, failing=False, waited_s=12.0)
STUCK = LoopState(listed=False, failing=False, waited_s=BUDGET)
OUTAGE = LoopState(listed=False, failing=True, waited_s=1000.0)
OUTAGE_AFTER_LIST = LoopState(listed=True, failing=True, waited_s=0.0)


def test_a_cached_object_is_answered_whatever_the_loop_does():
    for loop in (HEALTHY, FIRST_LIST, OUTAGE, OUTAGE_AFTER_LIST, None):
        assert plan(loop, cached=True) == ANSWER


def test_a_slow_first_list_is_waited_for_longer_than_its_own_request_timeout_then_read_around():
    from kueue_ray.kube.watch_target import LIST_REQUEST_TIMEOUT_SECONDS

    assert HubSettings().first_list_budget_seconds > LIST_REQUEST_TIMEOUT_SECONDS
    assert plan(FIRST_LIST) == WAIT
    assert plan(FIRST_LIST, absent_is_answer=True) == WAIT, "no Workload yet: the list will say"
    assert plan(STUCK) == READ, "a loop that never answers does not hold the wait for ever"


def test_while_the_loop_fails_nothing_is_read_not_even_a_reread_past_any_budget():
    for loop in (OUTAGE, OUTAGE_AFTER_LIST):
        assert plan(loop) == WAIT
        assert plan(loop, reread=True, cached=True) == WAIT
        assert plan(loop, absent_is_answer=True) == WAIT


def test_after_the_list_a_missing_workload_does_not_exist_yet_and_a_missing_rayjob_is_read():
    assert plan(HEALTHY, absent_is_answer=True) == ANSWER
    assert plan(HEALTHY) == READ, "just created, or outside the watch's selector"
    assert plan(HEALTHY, absent_is_answer=True, reread=True) == READ
    assert plan(HEALTHY, cached=True, reread=True) == READ
    assert plan(None) == READ, "no loop to share"


def test_reads_go_out_only_once_nothing_is_waited_for():
    assert wait_for({"rayjob": READ, "workload": WAIT}) == "workload"
    assert wait_for({"rayjob": READ, "workload": ANSWER}) is None


def test_one_read_per_object_is_in_flight_shared_by_every_caller():
    calls = []

    async def scenario():
        reads: dict = {}
        gate = asyncio.Event()

        async def read(key):
            calls.append(key)
            await gate.wait()

        callers = [
            asyncio.ensure_future(shared_read(reads, ("rayjob", name), lambda name=name: read(name)))
            for name in ["a"] * 500 + ["b"] * 3
        ]
        await asyncio.sleep(0)
        assert sorted(reads) == [("rayjob", "a"), ("rayjob", "b")]
        gate.set()
        await asyncio.gather(*callers)
        assert reads == {}, "a finished read is not an answer for later callers"
        await shared_read(reads, ("rayjob", "a"), lambda: read("a"))

    asyncio.run(scenario())
    assert calls == ["a", "b", "a"]


def test_a_shared_reads_failure_reaches_every_caller_and_one_caller_cancelled_cancels_no_other():
    async def scenario():
        reads: dict = {}
        gate = asyncio.Event()

        async def read():
            await gate.wait()
            raise Refused("get", 503, "ServiceUnavailable", "service unavailable")

        first, second, third = (
            asyncio.ensure_future(shared_read(reads, ("rayjob", "a"), read)) for _ in range(3)
        )
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        gate.set()
        results = await asyncio.gather(first, second, third, return_exceptions=True)
        return [type(r).__name__ for r in results]

    assert asyncio.run(scenario()) == ["CancelledError", "Refused", "Refused"]


def loop_of_scope() -> _WatchLoop:
    hub = SimpleNamespace(
        settings=HubSettings(refusal_timeout=60.0), watch_refusals={}, notify=lambda *a: None
    )
    client = SimpleNamespace(identity=lambda: "system:serviceaccount:airflow:triggerer")
    scope = SimpleNamespace(key=("kubernetes_default", "ray", ""), client=client)
    return _WatchLoop(hub, scope, RAYJOBS)


@pytest.mark.parametrize("outcome", ["failed", "succeeded"])
def test_readers_waiting_on_a_loop_wake_at_its_next_outcome_and_see_whether_it_fails(outcome):
    async def scenario():
        loop = loop_of_scope()
        waiters = [asyncio.ensure_future(loop.outcome().wait()) for _ in range(200)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiters)
        if outcome == "failed":
            loop.failed(Refused("list", 503, "ServiceUnavailable", "service unavailable"))
        else:
            loop.succeeded()
        await asyncio.gather(*waiters)
        return loop.failing, loop.outcome().is_set()

    failing, next_set = asyncio.run(scenario())
    assert failing == (outcome == "failed")
    assert not next_set, "a new wait waits for the outcome after this one"


def test_a_refusal_seen_by_the_loop_is_what_ends_the_waits_on_it():
    loop = loop_of_scope()
    refused = Refused("list", 403, "Forbidden", 'workloads is forbidden: User "x" cannot list')
    loop.failed(refused)
    assert loop.failing and loop.window.last is not None and not loop.window.expired()
    loop.window.refused(loop.window.last, loop.window.since + 60.0)
    assert loop.window.expired()
    loop.succeeded()
    assert not loop.failing and loop.window.last is None
