"""The triggerer's watch hub against kubesim: one watch per resource for many triggers, waits that survive
expired watches (410), API errors (500) and dropped streams, and waiting costs that do not grow with the
number of triggers (shared queue positions, per-namespace relists, starts from the cache)."""

from __future__ import annotations

import asyncio

import pytest
from kueue_ray.hub import HUB, HubSettings
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.sensors import RayJobSensor
from kueue_ray.trigger import RayJobTrigger


@pytest.fixture(autouse=True)
def quick_reconnects(monkeypatch):
    """Production backs off up to 30 s; here the same logic runs with short delays."""
    monkeypatch.setattr(
        HUB, "settings", HubSettings(backoff_initial=0.05, backoff_max=0.5, first_list_budget_seconds=2)
    )


def submit_many(
    queues, rayjob_body, task_context, count: int, duration: str, *, whole_queue: bool = False, prefix="step"
) -> list[RayJobTrigger]:
    """``count`` RayJobs and their triggers; small ones run side by side, ``whole_queue`` ones one at a time."""
    size = {} if whole_queue else {"cpu": "50m", "memory": "100M", "gpu": "0"}
    triggers = []
    for index in range(count):
        context = task_context(f"{prefix}-{index}")
        reference = SubmitRayJobOperator(
            task_id=f"{prefix}-{index}",
            template=rayjob_body(duration=duration, **size),
            local_queue=queues.local_queue,
            priority=queues.low,
            namespace=queues.namespace,
            wait_for_completion=False,
        ).execute(context)
        triggers.append(RayJobTrigger(**reference, queue=queues.local_queue))
    return triggers


def queued_behind_a_blocker(queues, rayjob_body, task_context, eventually, count: int) -> list[dict]:
    """A RayJob holding the whole ClusterQueue for ever, then ``count`` RayJobs pending behind it: the
    serialized kwargs of their triggers, once each has its Workload and Kueue has said why the head of the
    queue waits. (The others have its shape: Kueue parks them with it unevaluated, without a QuotaReserved
    condition until an event requeues them; kubesim.kueue.equivalence.)"""
    [blocker] = submit_many(queues, rayjob_body, task_context, 1, "inf", whole_queue=True, prefix="blocker")
    eventually(lambda: quota_reserved(queues.workload(blocker.uid)) == "True")
    queued = submit_many(queues, rayjob_body, task_context, count, "inf", whole_queue=True, prefix="queued")
    for trigger in queued:
        eventually(lambda uid=trigger.uid: queues.workload(uid) is not None)
    # Created within a second of each other, they have no defined order: any of them may be the head.
    eventually(lambda: any(quota_reserved(queues.workload(t.uid)) == "False" for t in queued))
    return [trigger.serialize()[1] for trigger in queued]


def quota_reserved(workload: dict | None) -> str | None:
    for condition in ((workload or {}).get("status") or {}).get("conditions") or ():
        if condition["type"] == "QuotaReserved":
            return condition["status"]
    return None


def namespace_requests(kubesim, queues) -> list[dict]:
    return [r for r in kubesim.requests() if r["namespace"] == queues.namespace]


def trigger_log(capfd) -> list[str]:
    """The trigger's task-log lines (Airflow's structlog writes them to stdout here)."""
    return [line for line in capfd.readouterr().out.splitlines() if "kueue_ray.trigger.RayJobTrigger" in line]


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


def test_triggers_and_sensor_pokes_succeed_through_a_faulty_api_server(
    kubesim, queues, rayjob_body, task_context
):
    # What the e2e suite saw kill triggers ("Session is closed") and fail a sensor's first GET: a fifth of
    # all requests answered 500, every request a second late, watches dropped every 5 s and forced 410s.
    triggers = submit_many(queues, rayjob_body, task_context, count=4, duration="8")
    [poked] = submit_many(queues, rayjob_body, task_context, count=1, duration="8", prefix="poked")
    sensor = RayJobSensor(
        task_id="wait",
        rayjob_name=poked.name,
        namespace=queues.namespace,
        deferrable=False,
        mode="poke",
        poke_interval=0.2,
        timeout=300,
        log_tail_lines=5,
    )
    kubesim.clear_requests()
    # The 500s are drawn at random (a fifth of requests), so whether one hit this short scenario is not
    # asserted; the latency, watch drops and forced 410s always apply.
    kubesim.set_faults(error_rate=0.2, latency_ms=1000, watch_drop_after_s=5, expire_watches=3)
    try:

        async def scenario():
            return await asyncio.gather(
                _gather(triggers), asyncio.to_thread(sensor.execute, task_context("wait"))
            )

        events, poked_result = asyncio.run(scenario())
    finally:
        kubesim.reset_faults()
    assert [e["status"] for e in events] == ["success"] * 4
    assert poked_result["uid"] == poked.uid


def test_a_rayjob_deleted_behind_the_trigger_ends_the_wait(queues, rayjob_body, task_context):
    # On real Kueue the Workload is often finished (reason OwnerNotFound) before the RayJob's own deletion
    # reaches the hub: that, too, is the RayJob deleted, not a failure.
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


def test_queued_triggers_share_one_queue_position_read_per_local_queue(
    kubesim, queues, rayjob_body, task_context, eventually, capfd, monkeypatch
):
    # Positions may be a minute old here, so the count below does not depend on how fast this machine is.
    monkeypatch.setattr(HUB.settings, "pending_workloads_ttl_seconds", 60.0)
    count = 12
    kwargs = queued_behind_a_blocker(queues, rayjob_body, task_context, eventually, count)
    triggers = [RayJobTrigger(**{**k, "policy": {**k["policy"], "queue_timeout": 0.5}}) for k in kwargs]
    capfd.readouterr()
    kubesim.clear_requests()

    events = asyncio.run(_gather(triggers))

    assert [e["status"] for e in events] == ["queue_timeout"] * count
    positions = [r for r in namespace_requests(kubesim, queues) if r["path"].endswith("/pendingworkloads")]
    assert len(positions) == 1, "one visibility read for the whole LocalQueue, not one per trigger"
    queued_lines = [line for line in trigger_log(capfd) if ": QUEUED " in line]
    assert len(queued_lines) == count
    # Every trigger still tells its own place in the queue.
    told = sorted(int(line.split("position ")[1].split(" in the ClusterQueue")[0]) for line in queued_lines)
    assert told == list(range(1, count + 1))
    assert all(f"of {count} pending in its LocalQueue" in line for line in queued_lines)


def test_the_safety_net_relists_per_namespace_instead_of_reading_per_trigger(
    kubesim, queues, rayjob_body, task_context, eventually
):
    count = 12
    kwargs = queued_behind_a_blocker(queues, rayjob_body, task_context, eventually, count)
    triggers = [RayJobTrigger(**{**k, "policy": {**k["policy"], "resync_interval": 1.0}}) for k in kwargs]
    kubesim.clear_requests()

    async def scenario():
        waiting = [asyncio.create_task(first_event(t)) for t in triggers]
        await asyncio.sleep(4)  # about four relists of each resource
        still_waiting = not any(task.done() for task in waiting)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return still_waiting

    assert asyncio.run(scenario()), "queued RayJobs keep their triggers waiting"
    mine = namespace_requests(kubesim, queues)
    assert [r for r in mine if r["verb"] == "get" and r["resource"] in ("rayjobs", "workloads")] == []
    for resource in ("rayjobs", "workloads"):
        lists = [r for r in mine if r["verb"] == "list" and r["resource"] == resource]
        # The first list plus the relists: the safety net ran, once per namespace rather than per trigger.
        assert 2 <= len(lists) < count, (resource, len(lists))


def test_a_trigger_joining_a_watched_namespace_starts_from_the_cache(
    kubesim, queues, rayjob_body, task_context, eventually
):
    first, second = queued_behind_a_blocker(queues, rayjob_body, task_context, eventually, 2)
    waiting_long, joining = (
        RayJobTrigger(**first),
        RayJobTrigger(**{**second, "policy": {**second["policy"], "queue_timeout": 0.5}}),
    )

    kubesim.clear_requests()  # the submitting tasks' own lists are not the hub's

    async def scenario():
        waiting = asyncio.create_task(first_event(waiting_long))
        await until_listed(kubesim, queues)
        await asyncio.to_thread(kubesim.clear_requests)
        event = await first_event(joining)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        return event

    assert asyncio.run(scenario())["status"] == "queue_timeout"
    reads = sorted(
        (r["verb"], r["resource"])
        for r in namespace_requests(kubesim, queues)
        if r["verb"] in ("get", "list") and r["resource"] in ("rayjobs", "workloads")
    )
    # The hub had listed both: joining costs no request. The queue_timeout a clock gave is confirmed on
    # the API server before it is fired: one read of the RayJob and one of its Workload; then one list of
    # the namespace's Workloads says what held the quota (kueue_ray.quota_holders). Nothing else.
    assert reads == [("get", "rayjobs"), ("list", "workloads"), ("list", "workloads")], reads


async def until_listed(kubesim, queues) -> None:
    """Until the hub has listed the test namespace's RayJobs and Workloads."""
    while True:
        requests = await asyncio.to_thread(namespace_requests, kubesim, queues)
        if {"rayjobs", "workloads"} <= {r["resource"] for r in requests if r["verb"] == "list"}:
            return
        await asyncio.sleep(0.05)
