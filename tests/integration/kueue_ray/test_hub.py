"""The triggerer's watch hub against kubesim: one watch per resource for many triggers, and waits that
survive expired watches (410), API errors (500) and dropped streams."""

from __future__ import annotations

import asyncio

import pytest
from kueue_ray.hub import HUB, HubSettings
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.trigger import RayJobTrigger


@pytest.fixture(autouse=True)
def quick_reconnects(monkeypatch):
    """Production backs off up to 30 s; here the same logic runs with short delays."""
    monkeypatch.setattr(
        HUB, "settings", HubSettings(backoff_initial=0.05, backoff_max=0.5, connect_wait_seconds=2)
    )


def submit_many(queues, rayjob_body, task_context, count: int, duration: str) -> list[RayJobTrigger]:
    triggers = []
    for index in range(count):
        context = task_context(f"step-{index}")
        reference = SubmitRayJobOperator(
            task_id=f"step-{index}",
            template=rayjob_body(cpu="50m", memory="100M", gpu="0", duration=duration),
            queue=queues.local_queue,
            priority=queues.low,
            namespace=queues.namespace,
            wait_for_completion=False,
        ).execute(context)
        triggers.append(RayJobTrigger(**reference, queue=queues.local_queue))
    return triggers


async def first_event(trigger: RayJobTrigger) -> dict:
    events = trigger.run()
    try:
        return (await asyncio.wait_for(events.__anext__(), 90)).payload
    finally:
        await events.aclose()


def test_many_triggers_share_one_watch_per_resource(kubesim, queues, rayjob_body, task_context):
    triggers = submit_many(queues, rayjob_body, task_context, count=30, duration="40")
    before = kubesim.stats()["watches_open"]
    kubesim.clear_requests()

    async def scenario():
        waiting = asyncio.gather(*(first_event(t) for t in triggers))
        samples = []
        while not waiting.done():  # sample the server's open watches while all 30 triggers wait
            samples.append((await asyncio.to_thread(kubesim.stats))["watches_open"])
            await asyncio.sleep(0.1)
        return samples, await waiting

    samples, events = asyncio.run(scenario())
    assert max(samples) - before == 2, "one RayJob watch and one Workload watch for all 30 triggers"
    assert [e["status"] for e in events] == ["success"] * 30
    assert HUB.watch_loops() == [], "the watches stop with the last subscription"
    mine = [r for r in kubesim.requests() if r["namespace"] == queues.namespace]
    # 30 triggers starting together cost one LIST and one WATCH per resource, not a GET each.
    assert {r["verb"] for r in mine} <= {"list", "watch"}
    assert len(mine) <= 6, mine


def test_waits_survive_expired_watches_errors_and_dropped_streams(kubesim, queues, rayjob_body, task_context):
    triggers = submit_many(queues, rayjob_body, task_context, count=4, duration="30")
    kubesim.clear_requests()
    kubesim.set_faults(expire_watches=3, error_rate=0.2, watch_drop_after_s=0.2, seed=7)
    try:
        events = asyncio.run(_gather(triggers))
    finally:
        kubesim.reset_faults()
    assert [e["status"] for e in events] == ["success"] * 4
    lists = [
        r
        for r in kubesim.requests()
        if r["verb"] == "list"
        and r["namespace"] == queues.namespace
        and r["resource"] in ("rayjobs", "workloads")
    ]
    assert len(lists) > 2, "a 410 on a watch makes the hub relist"


def test_a_rayjob_deleted_behind_the_trigger_ends_the_wait(queues, rayjob_body, task_context):
    [trigger] = submit_many(queues, rayjob_body, task_context, count=1, duration="inf")

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        await asyncio.sleep(0.5)
        await asyncio.to_thread(
            queues.custom.delete_namespaced_custom_object,
            "ray.io",
            "v1",
            queues.namespace,
            "rayjobs",
            trigger.name,
        )
        return await waiting

    event = asyncio.run(scenario())
    assert event["status"] == "deleted"
    assert "was deleted before it finished" in event["message"]


async def _gather(triggers):
    return await asyncio.gather(*(first_event(t) for t in triggers))
