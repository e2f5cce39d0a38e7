"""An outage costs requests per resource, not per waiting task: triggers that start while the API server
fails, refuses or lists slowly wait on the scope's one list/watch loop per resource instead of each
reading their RayJob and Workload on their own (``kueue_ray.hub.reads``).

kubesim's fault rules make the conditions (503 for the namespace's next requests, a 403 that stays, a
first list that takes seconds); the counts come from its request log. Nothing of the clients is patched.
"""

from __future__ import annotations

import asyncio

import pytest
from kueue_ray.hub import HUB, HubSettings
from kueue_ray.trigger import RayJobTrigger

from tests.integration.kueue_ray.test_hub import (
    first_event,
    namespace_requests,
    queued_behind_a_blocker,
    trigger_log,
)

WAITING = 30
"""Triggers per test: more than the requests the shared loops may make, so a read per task shows."""
WATCHED = ["rayjobs.ray.io", "workloads.kueue.x-k8s.io"]


@pytest.fixture(autouse=True)
def hub_settings(monkeypatch):
    """Production backs off up to 30 s; the same logic runs here with short delays (the first-list budget
    keeps its default: it is what decides whether a slow list is waited for)."""
    settings = HubSettings(backoff_initial=0.05, backoff_max=0.5, refusal_timeout=3.0)
    monkeypatch.setattr(HUB, "settings", settings)
    return settings


@pytest.fixture
def faults(kubesim):
    kubesim.reset_faults()
    yield kubesim
    kubesim.reset_faults()


@pytest.fixture
def waiting(faults, queues, rayjob_body, task_context, eventually, capfd) -> list[RayJobTrigger]:
    kwargs = queued_behind_a_blocker(queues, rayjob_body, task_context, eventually, WAITING)
    capfd.readouterr()
    faults.clear_requests()  # the submitting tasks' own requests are not the hub's
    return [RayJobTrigger(**k) for k in kwargs]


def until_all_queued(triggers, capfd) -> list[dict]:
    """Run the triggers until each has written its QUEUED line (its first read answered), then stop them."""
    lines: list[str] = []

    async def scenario():
        tasks = [asyncio.create_task(first_event(t)) for t in triggers]
        while sum(": QUEUED " in line for line in lines) < len(triggers):
            await asyncio.sleep(0.2)
            lines.extend(trigger_log(capfd))
            assert not any(task.done() for task in tasks), [t.result() for t in tasks if t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())
    return lines


def reads_per_task(requests: list[dict]) -> list[dict]:
    """GETs of RayJobs or Workloads: what a trigger reading on its own sends (the loops only list/watch)."""
    return [r for r in requests if r["verb"] == "get" and r["resource"] in ("rayjobs", "workloads")]


def lists(requests: list[dict], resource: str) -> list[dict]:
    return [r for r in requests if r["verb"] == "list" and r["resource"] == resource]


def test_triggers_started_into_an_outage_wait_on_the_loops_retries(faults, queues, waiting, capfd):
    refused = 24  # the namespace's next 24 requests, whoever sends them, answered 503
    faults.set_faults(rules=[{"code": 503, "namespace": queues.namespace, "count": refused}])

    until_all_queued(waiting, capfd)

    requests = namespace_requests(faults, queues)
    assert sum(r["code"] == 503 for r in requests) == refused
    assert reads_per_task(requests) == [], "no trigger read its RayJob itself"
    for resource in ("rayjobs", "workloads"):
        assert len([r for r in lists(requests, resource) if r["code"] == 200]) == 1, resource
    # The refused requests, one list and one watch per resource, the shared queue-position reads.
    assert len(requests) <= refused + 4 + 3 < refused + WAITING, [
        (r["verb"], r["resource"]) for r in requests
    ]


def test_a_slow_first_list_is_waited_for_by_every_trigger(faults, queues, waiting, capfd):
    # A triggerer starting against a slow API server: its first list of each resource takes 3 s.
    slow = {
        "delay_s": 3.0,
        "verbs": ["list"],
        "resources": WATCHED,
        "namespace": queues.namespace,
        "count": 2,
    }
    faults.set_faults(rules=[slow])

    until_all_queued(waiting, capfd)

    requests = namespace_requests(faults, queues)
    assert reads_per_task(requests) == []
    assert len(lists(requests, "rayjobs")) == 1
    assert len(lists(requests, "workloads")) == 1, "no per-task Workload lookup: the list said 'none yet'"
    assert len(requests) <= 4 + 3, [(r["verb"], r["resource"]) for r in requests]


def test_triggers_started_into_a_refusal_fail_each_with_its_message_after_the_loops_window(
    faults, queues, waiting
):
    revoked = {"code": 403, "verbs": ["get", "list", "watch"], "resources": WATCHED}
    faults.set_faults(rules=[{**revoked, "namespace": queues.namespace}])

    async def scenario():
        return await asyncio.gather(*(first_event(t) for t in waiting))

    events = asyncio.run(scenario())

    assert [e["status"] for e in events] == ["refused"] * WAITING
    for event in events:
        assert f"in namespace {queues.namespace}" in event["message"]
        assert "kubectl auth can-i " in event["message"]
    requests = namespace_requests(faults, queues)
    assert reads_per_task(requests) == []
    # Per resource, paced by the loops' backoff (0.05 s doubling to 0.5 s) up to the window's end: fewer
    # than one per waiting task, where each task reading for itself would send several.
    assert len([r for r in requests if r["code"] == 403]) < WAITING
