"""The waits survive an API server that says no, as a real cluster does in its first hour: a Role that
grants ``list`` but not ``watch`` (403), an expired token (401), API Priority and Fairness (429 with
Retry-After), a control-plane upgrade (503), an expired resourceVersion (410) and a failing visibility API.

kubesim answers these with the API server's own Status bodies (``POST /kubesim/faults`` rules); nothing of
the clients is patched. Each test bounds what the refusal may cost in requests, because the way such a
refusal goes wrong is a client that asks again at once, thousands of times a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import threading
import time
from dataclasses import replace

import pytest
from kubernetes import client, config
from kueue_ray.hub import HUB, HubSettings
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.sensors import RayJobSensor
from kueue_ray.timeline import to_epoch
from kueue_ray.trigger import RayJobTrigger

from tests.integration.kueue_ray.test_hub import (
    first_event,
    namespace_requests,
    quota_reserved,
    submit_many,
    trigger_log,
    until_listed,
)

POLL_INTERVAL = 0.5
WATCH_RETRY_EVERY = 4
VISIBILITY = "localqueues.visibility.kueue.x-k8s.io/pendingworkloads"


@pytest.fixture(autouse=True)
def hub_settings(monkeypatch):
    """Production backs off up to 30 s and polls every 10 s; here the same logic runs with short delays."""
    settings = HubSettings(
        backoff_initial=0.05,
        backoff_max=0.5,
        first_list_budget_seconds=2,
        degraded_list_interval=POLL_INTERVAL,
        degraded_watch_retry_every=WATCH_RETRY_EVERY,
    )
    monkeypatch.setattr(HUB, "settings", settings)
    return settings


@pytest.fixture
def faults(kubesim):
    kubesim.reset_faults()
    yield kubesim
    kubesim.reset_faults()


def by(requests: list[dict], verb: str, resource: str) -> list[dict]:
    return [r for r in requests if r["verb"] == verb and r["resource"] == resource]


async def gather(triggers) -> list[dict]:
    return list(await asyncio.gather(*(first_event(t) for t in triggers)))


def test_a_watch_refused_for_good_turns_into_one_list_per_interval_and_every_task_succeeds(
    faults, queues, rayjob_body, task_context, capfd
):
    triggers = submit_many(queues, rayjob_body, task_context, count=6, duration="40")
    faults.refuse(
        403,
        verbs=["watch"],
        resources=["rayjobs.ray.io", "workloads.kueue.x-k8s.io"],
        namespace=queues.namespace,
    )
    faults.clear_requests()
    capfd.readouterr()

    started = time.monotonic()
    events = asyncio.run(gather(triggers))
    elapsed = time.monotonic() - started

    assert [e["status"] for e in events] == ["success"] * 6
    assert all(e["timeline"]["admissions"] for e in events), "every transition was still seen"
    mine = namespace_requests(faults, queues)
    intervals = elapsed / POLL_INTERVAL
    for resource in ("rayjobs", "workloads"):
        # Per resource, not per task: one watch to learn it is refused, then a request per interval, of
        # which every WATCH_RETRY_EVERY-th tries the watch again.
        watches, lists = by(mine, "watch", resource), by(mine, "list", resource)
        assert {r["code"] for r in watches} == {403}
        assert len(watches) <= 2 + intervals / WATCH_RETRY_EVERY, (resource, len(watches), elapsed)
        assert len(watches) + len(lists) <= 3 + intervals, (resource, len(watches) + len(lists), elapsed)
    told = [line for line in trigger_log(capfd) if "refuses to watch rayjobs" in line]
    assert len(told) == 6, "each waiting task's log says so"
    assert f"kubectl auth can-i watch rayjobs.ray.io -n {queues.namespace}" in told[0]
    assert "listing every 0.5s instead" in told[0]


def test_waits_that_come_after_the_last_one_ended_list_without_asking_to_watch_again(
    faults, queues, rayjob_body, task_context, hub_settings, monkeypatch
):
    """The namespace's loops stop with its last waiting task; the next task's loops remember the 403
    instead of meeting it again (a triggerer with tasks coming and going would ask once per restart).

    Each wait is on a RayJob of its own that runs ~2 s, so every wait's loops are running when they would
    ask; the degraded loops' own retry of the watch is set beyond the test, so each ask is a new loop's."""
    monkeypatch.setattr(HUB, "settings", replace(hub_settings, degraded_watch_retry_every=10_000))
    faults.refuse(
        403,
        verbs=["watch"],
        resources=["rayjobs.ray.io", "workloads.kueue.x-k8s.io"],
        namespace=queues.namespace,
    )
    faults.clear_requests()
    for wait in range(3):  # one after the other: each starts the namespace's loops anew
        [trigger] = submit_many(
            queues, rayjob_body, task_context, count=1, duration="40", prefix=f"wait{wait}"
        )
        [event] = asyncio.run(gather([trigger]))
        assert event["status"] == "success"

    mine = namespace_requests(faults, queues)
    for resource in ("rayjobs", "workloads"):
        assert len(by(mine, "watch", resource)) == 1, (resource, by(mine, "watch", resource))
        assert len(by(mine, "list", resource)) >= 3, "each wait's loops listed"


def test_a_watch_allowed_again_ends_the_polling(faults, queues, rayjob_body, task_context, capfd):
    [trigger] = submit_many(queues, rayjob_body, task_context, count=1, duration="inf")
    faults.refuse(403, verbs=["watch"], resources=["rayjobs.ray.io"], namespace=queues.namespace)
    capfd.readouterr()

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        await asyncio.sleep(POLL_INTERVAL * 2)
        streams = (await asyncio.to_thread(faults.stats))["watches_open"]  # the Workload watch only
        await asyncio.to_thread(faults.reset_faults)  # the Role is fixed
        while (await asyncio.to_thread(faults.stats))["watches_open"] <= streams:
            await asyncio.sleep(0.05)  # the next retry of the watch is let through
        await asyncio.to_thread(
            queues.custom.delete_namespaced_custom_object,
            "ray.io",
            "v1",
            queues.namespace,
            "rayjobs",
            trigger.name,
        )
        return await waiting

    started = time.monotonic()
    assert asyncio.run(scenario())["status"] == "deleted"
    assert time.monotonic() - started < POLL_INTERVAL * (WATCH_RETRY_EVERY + 4)
    story = [line for line in trigger_log(capfd) if "watch rayjobs" in line]
    assert "refuses to watch rayjobs" in story[0]
    assert (
        f"lets connection kubernetes_default watch rayjobs in namespace {queues.namespace} again" in story[1]
    )


def test_credentials_refused_on_the_watch_are_loaded_again_and_waiting_resumes(
    kubesim, queues, rayjob_body, task_context, eventually
):
    # A token rotated under a running triggerer: the server accepts only the new one before the
    # kubeconfig (the connection's credentials) carries it.
    [blocker] = submit_many(queues, rayjob_body, task_context, 1, "inf", whole_queue=True, prefix="blocker")
    eventually(lambda: quota_reserved(queues.workload(blocker.uid)) == "True")
    [trigger] = submit_many(queues, rayjob_body, task_context, 1, "2", whole_queue=True, prefix="queued")
    kubesim.set_faults(watch_drop_after_s=0.3)  # watches end often, so a new one is asked for soon
    kubesim.clear_requests()
    try:

        async def scenario():
            waiting = asyncio.create_task(first_event(trigger))
            await until_listed(kubesim, queues)
            await asyncio.to_thread(kubesim.require_token, "rotated")

            async def refused_twice() -> bool:
                codes = [r["code"] for r in await asyncio.to_thread(namespace_requests, kubesim, queues)]
                return codes.count(401) >= 2

            while not await refused_twice():
                await asyncio.sleep(0.05)
            await asyncio.to_thread(kubesim.write_kubeconfig_token, "rotated")
            await asyncio.to_thread(_delete_with_fresh_credentials, kubesim, queues, blocker)
            return await waiting

        event = asyncio.run(scenario())
    finally:
        kubesim.reset_faults()
        kubesim.require_token(None)
        kubesim.write_kubeconfig_token(None)
    assert event["status"] == "success", event
    refused = [r for r in namespace_requests(kubesim, queues) if r["code"] == 401]
    # Loaded again at once once, then with backoff: a handful of refusals, not a flood.
    assert 2 <= len(refused) <= 12, len(refused)


def _delete_with_fresh_credentials(kubesim, queues, trigger: RayJobTrigger) -> None:
    api_client = config.new_client_from_config(config_file=kubesim.kubeconfig)
    try:
        client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
            "ray.io", "v1", queues.namespace, "rayjobs", trigger.name
        )
    finally:
        api_client.close()


def test_too_many_requests_waits_at_least_retry_after(faults, queues, rayjob_body, task_context, eventually):
    [trigger] = submit_many(queues, rayjob_body, task_context, count=1, duration="60")
    faults.refuse(
        429,
        verbs=["watch"],
        resources=["rayjobs.ray.io"],
        namespace=queues.namespace,
        count=1,
        retry_after_s=2,
    )
    faults.clear_requests()

    [event] = asyncio.run(gather([trigger]))

    assert event["status"] == "success"
    # kubesim logs a watch when its stream ends, which for a departed client is when its sweep notices.
    watches = eventually(lambda: (w := by(namespace_requests(faults, queues), "watch", "rayjobs"))[1:] and w)
    first, second = sorted(watches, key=lambda r: r["at"])[:2]
    assert first["code"] == 429
    assert second["at"] - first["at"] >= 2.0, "the next watch came before Retry-After"


def test_a_control_plane_unavailable_for_20_seconds_delays_the_tasks_without_a_flood_or_a_duplicate(
    faults, queues, rayjob_body, task_context
):
    triggers = submit_many(queues, rayjob_body, task_context, count=4, duration="100")
    created = sorted(j["metadata"]["uid"] for j in queues.rayjobs())
    faults.clear_requests()

    async def scenario():
        waiting = asyncio.gather(*(first_event(t) for t in triggers))
        await until_listed(faults, queues)
        # The control plane goes down (its open watches end with it) and answers 503 for 20 s.
        rule = {"code": 503, "namespace": queues.namespace, "seconds": 20}
        await asyncio.to_thread(faults.set_faults, rules=[rule], drop_watches=True)
        outage = time.monotonic()
        events = await waiting
        return events, time.monotonic() - outage

    events, waited = asyncio.run(scenario())
    assert [e["status"] for e in events] == ["success"] * 4
    assert waited >= 20, "the RayJobs finished during the outage: nobody could know before it ended"
    assert sorted(j["metadata"]["uid"] for j in queues.rayjobs()) == created, "nothing created twice"
    unavailable = [r for r in namespace_requests(faults, queues) if r["code"] == 503]
    # Two loops backing off (0.05 s doubling to 0.5 s, jittered) for 20 s: about 100 requests, not 100,000.
    assert 10 <= len(unavailable) <= 200, len(unavailable)


@pytest.mark.parametrize("as_event", [True, False], ids=["error-event", "http-status"])
def test_an_expired_watch_relists_once_and_misses_no_transition(
    faults, queues, rayjob_body, task_context, capfd, as_event
):
    [trigger] = submit_many(queues, rayjob_body, task_context, count=1, duration="40")
    faults.refuse(
        410,
        verbs=["watch"],
        resources=["rayjobs.ray.io"],
        namespace=queues.namespace,
        count=1,
        watch_event=as_event,
    )
    faults.clear_requests()
    capfd.readouterr()

    [event] = asyncio.run(gather([trigger]))

    assert event["status"] == "success"
    assert len(event["timeline"]["admissions"]) == 1
    mine = namespace_requests(faults, queues)
    assert len(by(mine, "list", "rayjobs")) == 2, "the first list, and one relist after the 410"
    story = [line for line in trigger_log(capfd) if f"RayJob {queues.namespace}/" in line]
    assert any(": RUNNING " in line for line in story) and ": SUCCEEDED " in story[-1]


# --- the visibility API: only the queue position is lost -------------------------------------------------


@pytest.fixture
def queued(queues, rayjob_body, task_context, eventually):
    """A RayJob queued behind a blocker that finishes by itself a few seconds later: (queues, its name)."""
    blocker = task_context("blocker")
    SubmitRayJobOperator(
        task_id="blocker",
        template=rayjob_body(duration="60"),
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(blocker)
    eventually(
        lambda: any(quota_reserved(queues.workload(j["metadata"]["uid"])) == "True" for j in queues.rayjobs())
    )
    return queues


def test_a_failing_visibility_api_only_loses_the_position_of_a_worker_wait(
    faults, queued, rayjob_body, task_context, capfd
):
    faults.refuse(500, resources=[VISIBILITY], namespace=queued.namespace)
    context = task_context("train")
    op = SubmitRayJobOperator(
        task_id="train",
        template=rayjob_body(duration="2"),
        local_queue=queued.local_queue,
        priority=queued.low,
        namespace=queued.namespace,
        deferrable=False,
        poll_interval=0.2,
        log_tail_lines=0,
    )
    capfd.readouterr()
    result = op.execute(context)
    assert result["name"]
    assert context["ti"].xcom["timeline"]["final_phase"] == "SUCCEEDED"
    asked = [r for r in namespace_requests(faults, queued) if r["subresource"] == "pendingworkloads"]
    assert asked and {r["code"] for r in asked} == {500}, "the position was asked for, and refused"
    queued_lines = [line for line in capfd.readouterr().out.splitlines() if ": QUEUED " in line]
    assert queued_lines and not any("position" in line for line in queued_lines), queued_lines


def test_a_timing_out_visibility_api_only_loses_the_position_of_a_poking_sensor(
    faults, queued, rayjob_body, task_context
):
    faults.refuse(504, resources=[VISIBILITY], namespace=queued.namespace)
    context = task_context("train")
    SubmitRayJobOperator(
        task_id="train",
        template=rayjob_body(duration="2"),
        local_queue=queued.local_queue,
        priority=queued.low,
        namespace=queued.namespace,
        wait_for_completion=False,
    ).execute(context)
    sensor = RayJobSensor(
        task_id="wait",
        submit_task_id="train",
        deferrable=False,
        mode="poke",
        poke_interval=0.2,
        timeout=120,
        log_tail_lines=0,
    )
    outcome: dict = {}

    def poke() -> None:
        with contextlib.suppress(Exception):
            outcome["result"] = sensor.execute(context)

    thread = threading.Thread(target=poke)
    thread.start()
    thread.join(timeout=120)
    assert outcome.get("result", {}).get("name"), "the sensor succeeded"
    asked = [r for r in namespace_requests(faults, queued) if r["subresource"] == "pendingworkloads"]
    assert asked and {r["code"] for r in asked} == {504}


def test_a_rayservice_wait_is_told_when_watching_is_refused_and_still_sees_it_serve(faults, queues, capfd):
    """The RayService watch degrades to listing like the RayJob one, and the deploy task's log says so."""
    from tests.integration.kueue_ray.serve_support import defer, deploy_op, run_context, service_body
    from tests.integration.kueue_ray.serve_support import first_event as service_event

    trigger = defer(deploy_op(queues, service_body()), run_context("manual__1"))
    faults.refuse(
        403,
        verbs=["watch"],
        resources=["rayservices.ray.io", "workloads.kueue.x-k8s.io"],
        namespace=queues.namespace,
    )
    capfd.readouterr()

    event = asyncio.run(service_event(trigger))

    assert event["status"] == "success", event
    # The notice each waiting task gets (the hub's own warning goes to the triggerer's log, worded apart).
    told = [line for line in capfd.readouterr().out.splitlines() if "Following them by listing" in line]
    assert any("refuses to watch rayservices" in line for line in told), told
    assert f"kubectl auth can-i watch rayservices.ray.io -n {queues.namespace}" in "\n".join(told)


def hub_state(namespace: str) -> str:
    """What the hub's loops of ``namespace`` hold and do: for a failure message."""
    lines = []
    for (_, scope_namespace, _), scope in HUB._scopes.items():
        if scope_namespace != namespace:
            continue
        for kind, loop in scope.loops.items():
            held = {key: (obj.get("status") or {}).get("jobStatus") for key, obj in loop.objects.items()}
            lines.append(
                f"{kind}: listed={loop.listed.is_set()} failing={loop.failing} "
                f"polling={loop.polling_because} objects={held}"
            )
        lines.append(f"pending reads {list(scope.pending_reads)}, reads {list(scope.reads)}")
    return "\n".join(lines) or "no scope"


def test_a_clock_that_runs_out_on_a_stale_cache_is_checked_with_the_api_server_first(
    faults, hub_settings, queues, rayjob_body, task_context, capfd
):
    """While watches are refused the hub's cache can be a polling interval behind. A RayJob preempted
    within that interval is queued again, not running: its run_timeout must not end the wait on the cache's
    word. The trigger reads the RayJob and its Workload again before it gives up, and waits on."""
    from tests.integration.kueue_ray.test_deferred import defer, submit, until

    # Long enough for admission -> running -> the trigger's first list -> a prod submission -> preemption on
    # a loaded machine (20 s was missed once in CI), short of the 120 s polling interval.
    run_timeout = 40.0
    hub_settings.degraded_list_interval = 120.0  # no list between the preemption and the run clock's end
    context = task_context("train")
    trigger = defer(submit(queues, rayjob_body(duration="inf"), context, run_timeout=run_timeout), context)
    faults.refuse(
        403,
        verbs=["watch"],
        resources=["rayjobs.ray.io", "workloads.kueue.x-k8s.io"],
        namespace=queues.namespace,
    )
    capfd.readouterr()

    def workload_condition(kind: str) -> dict:
        conditions = ((queues.workload(trigger.uid) or {}).get("status") or {}).get("conditions") or ()
        return next((c for c in conditions if c["type"] == kind), {})

    captured: list[str] = []

    def trigger_lines() -> str:
        return "\n".join(
            line for line in "".join(captured).splitlines() if "kueue_ray.trigger.RayJobTrigger" in line
        )

    def ray_runs_the_job() -> bool:
        # Both: the RayJob deployed and Ray running its job. Deployed alone, the job may still be PENDING
        # (under load it was): the trigger's one list before the 120 s interval then says ADMITTED
        # (Starting), never RUNNING.
        status = queues.rayjobs()[0].get("status") or {}
        return status.get("jobDeploymentStatus") == "Running" and status.get("jobStatus") == "RUNNING"

    async def scenario():
        await until(ray_runs_the_job)
        admitted_at = to_epoch(workload_condition("Admitted")["lastTransitionTime"])
        waiting = asyncio.create_task(first_event(trigger))  # its first list: RUNNING
        started = datetime.datetime.now(datetime.UTC)
        # Captured output read so far, kept whole: a line may be half written when it is read. Read on the
        # event loop's thread, the one the trigger writes from: capfd's file is not safe to read while
        # another thread writes to it (a line written between its read and its truncate is lost).
        try:
            async with asyncio.timeout(30):
                while not (captured.append(capfd.readouterr().out) or "RUNNING" in trigger_lines()):
                    await asyncio.sleep(0.05)
        except TimeoutError:  # say what the trigger and the hub did say, and where they are, so a miss
            # explains itself (seen three times in CI under extra load, never alone)
            stack = io.StringIO()
            waiting.print_stack(file=stack)
            raise AssertionError(
                f"no RUNNING line from {started:%H:%M:%S.%f} to "
                f"{datetime.datetime.now(datetime.UTC):%H:%M:%S.%f}; captured:\n{''.join(captured)[-6000:]}\n"
                f"hub: {hub_state(queues.namespace)}\ntrigger task: {stack.getvalue()}"
            ) from None
        urgent_context = task_context("urgent")
        urgent = submit(
            queues,
            rayjob_body(duration="inf"),
            urgent_context,
            task_id="urgent",
            priority=queues.high,
            wait_for_completion=False,
        )
        await asyncio.to_thread(urgent.execute, urgent_context)
        await until(lambda: workload_condition("QuotaReserved").get("status") == "False")
        deadline = admitted_at + run_timeout
        assert time.time() < deadline - 1, "preempted only after the run clock ran out: nothing to show"
        done, _ = await asyncio.wait({waiting}, timeout=deadline + 5 - time.time())
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return [task.result() for task in done]

    fired = asyncio.run(scenario())
    assert fired == [], f"gave up on the cache's word that it still runs: {fired}"
    captured.append(capfd.readouterr().out)
    story = trigger_lines()
    assert ": PREEMPTED " in story or ": QUEUED " in story, story


def test_a_rayservice_clock_that_runs_out_on_a_stale_cache_is_checked_with_the_api_server_first(
    faults, hub_settings, queues, rayjob_body, task_context
):
    """The RayService wait confirms its clocks too: queued behind a RayJob when the polling cache last
    looked, then admitted and serving before queue_timeout ran out, it succeeds instead of timing out."""
    from kueue_ray.phases import ServicePhase
    from kueue_ray.rayservice.status import observe_service

    from tests.integration.kueue_ray.serve_support import (
        defer,
        deploy_op,
        rayservices,
        run_context,
        service_body,
        workloads,
    )
    from tests.integration.kueue_ray.serve_support import first_event as service_event
    from tests.integration.kueue_ray.test_deferred import until

    queue_timeout = 20.0
    hub_settings.degraded_list_interval = 120.0  # no list between the admission and the queue clock's end
    holder = SubmitRayJobOperator(
        task_id="blocker",
        template=rayjob_body(duration="inf"),
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
        log_tail_lines=0,
    ).execute(task_context("blocker"))
    faults.refuse(
        403,
        verbs=["watch"],
        resources=["rayservices.ray.io", "workloads.kueue.x-k8s.io"],
        namespace=queues.namespace,
    )
    deployed_at = time.time()
    trigger = defer(
        deploy_op(queues, service_body(cpu="2"), queue_timeout=queue_timeout), run_context("manual__1")
    )

    def serving() -> bool:
        [service] = rayservices(queues)
        return observe_service(service, workloads(queues)).phase is ServicePhase.SERVING

    async def scenario():
        waiting = asyncio.create_task(service_event(trigger, timeout=queue_timeout + 30))
        # The trigger's first list (the service queued behind the RayJob), then no other until 120 s.
        await until(lambda: by(namespace_requests(faults, queues), "list", "rayservices"))
        await asyncio.to_thread(
            queues.custom.delete_namespaced_custom_object,
            "ray.io", "v1", queues.namespace, "rayjobs", holder["name"],
        )  # fmt: skip
        await until(serving)
        assert time.time() < deployed_at + queue_timeout - 1, "served only after the queue clock ran out"
        return await waiting

    event = asyncio.run(scenario())
    assert event["status"] == "success", event
