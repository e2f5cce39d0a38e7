"""The deferred path against kubesim: operator -> TaskDeferred -> RayJobTrigger (shared watch hub) ->
TriggerEvent -> execute_complete, through queueing, preemption and user kills. Here every task resumes on
a worker (``end_in_triggerer=False``); test_end_in_triggerer.py covers a success ending in the triggerer."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.trigger import RayJobTrigger

EVENT_TIMEOUT = 60


def submit(queues, body, context, *, priority=None, task_id="train", **kwargs) -> SubmitRayJobOperator:
    return SubmitRayJobOperator(
        task_id=task_id,
        template=body,
        local_queue=queues.local_queue,
        priority=priority or queues.low,
        namespace=queues.namespace,
        log_tail_lines=0,
        **{"end_in_triggerer": False, **kwargs},
    )


def defer(op, context) -> RayJobTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert deferred.value.method_name == "execute_complete"
    return deferred.value.trigger


async def first_event(trigger: RayJobTrigger) -> dict:
    events = trigger.run()
    try:
        event = await asyncio.wait_for(events.__anext__(), EVENT_TIMEOUT)
    finally:
        await events.aclose()
    return event.payload


async def until(predicate, timeout=30.0):
    async def poll():
        while not await asyncio.to_thread(predicate):
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)


def trigger_log(capfd) -> list[str]:
    """The trigger's task-log lines (Airflow's structlog writes them to stdout here)."""
    return [line for line in capfd.readouterr().out.splitlines() if "kueue_ray.trigger.RayJobTrigger" in line]


def condition(workload, kind):
    for c in ((workload or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return c
    return {}


def test_queued_then_admitted_running_succeeded(queues, rayjob_body, task_context, capfd):
    blocker_context = task_context("blocker")
    blocker = submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    )
    blocker_ref = blocker.execute(blocker_context)

    context = task_context("train")
    # 20 simulated seconds: a real KubeRay reads a running job's status every few seconds, and a job that
    # ends between two reads is never seen RUNNING.
    op = submit(queues, rayjob_body(duration="20"), context)
    trigger = defer(op, context)
    # The trigger is what the triggerer re-creates from the database: only JSON-ish kwargs.
    classpath, kwargs = trigger.serialize()
    assert classpath == "kueue_ray.trigger.RayJobTrigger"
    trigger = RayJobTrigger(**kwargs)

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        ours = await asyncio.to_thread(lambda: queues.workload(trigger.uid))
        # Until Kueue has evaluated it: real Kueue may first say "Waiting for the Kueue scheduler.".
        await until(
            lambda: (
                "insufficient unused quota"
                in condition(queues.workload(trigger.uid), "QuotaReserved").get("message", "")
            )
        )
        await asyncio.sleep(0.3)  # let the trigger log the queued state
        assert not waiting.done(), "queued must not end the wait"
        assert ours is None or ours["metadata"]["name"]
        await asyncio.to_thread(
            queues.custom.delete_namespaced_custom_object,
            "ray.io",
            "v1",
            queues.namespace,
            "rayjobs",
            blocker_ref["name"],
        )
        return await waiting

    event = asyncio.run(scenario())
    assert event["status"] == "success", event
    assert event["phase"] == "SUCCEEDED"
    story = trigger_log(capfd)
    phases = [
        next((p for p in ("QUEUED", "ADMITTED", "RUNNING", "SUCCEEDED") if f": {p} " in line), None)
        for line in story
    ]
    phases = [p for p in phases if p]
    assert phases[0] == "QUEUED" and phases[-1] == "SUCCEEDED" and "RUNNING" in phases
    queued_line = next(line for line in story if ": QUEUED " in line and "insufficient unused quota" in line)
    assert "position 1 in the ClusterQueue (1 of 1 pending in its LocalQueue)" in queued_line

    result = op.execute_complete(context, event=event)
    assert result == {"name": trigger.name, "namespace": queues.namespace, "uid": trigger.uid}
    timeline = context["ti"].xcom["timeline"]
    assert timeline["final_phase"] == "SUCCEEDED"
    assert timeline["queued_seconds"] > 0
    assert len(timeline["admissions"]) == 1


def test_preempted_mid_run_then_requeued_and_succeeds(queues, rayjob_body, task_context, capfd):
    context = task_context("train")
    op = submit(queues, rayjob_body(duration="40"), context)
    trigger = defer(op, context)

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        await until(lambda: (queues.rayjobs()[0].get("status") or {}).get("jobDeploymentStatus") == "Running")
        urgent_context = task_context("urgent")
        urgent = submit(
            queues,
            rayjob_body(duration="2"),
            urgent_context,
            task_id="urgent",
            priority=queues.high,
            wait_for_completion=False,
        )
        await asyncio.to_thread(urgent.execute, urgent_context)
        return await waiting

    event = asyncio.run(scenario())
    assert event["status"] == "success", event
    assert event["preemptions"] == 1
    timeline = event["timeline"]
    assert len(timeline["preemptions"]) == 1
    assert "Preempted to accommodate a workload" in timeline["preemptions"][0]["message"]
    assert len(timeline["admissions"]) == 2
    story = "\n".join(trigger_log(capfd))
    assert ": PREEMPTED " in story
    assert story.index(": PREEMPTED ") < story.rindex(": QUEUED ") < story.rindex(": RUNNING ")


def test_max_preemptions_ends_the_wait(queues, rayjob_body, task_context):
    context = task_context("train")
    op = submit(queues, rayjob_body(duration="inf"), context, max_preemptions=0)
    trigger = defer(op, context)

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        await until(lambda: (queues.rayjobs()[0].get("status") or {}).get("jobDeploymentStatus") == "Running")
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
        return await waiting

    event = asyncio.run(scenario())
    assert event["status"] == "too_many_preemptions"
    with pytest.raises(Exception, match="max_preemptions=0"):
        op.execute_complete(context, event=event)
    # Nobody waits for it any more: it must not be admitted again later.
    remaining = [r["metadata"]["uid"] for r in queues.rayjobs() if not r["metadata"].get("deletionTimestamp")]
    assert trigger.uid not in remaining


def test_on_kill_deletes_only_what_this_try_owns(user_kill, queues, rayjob_body, task_context):
    first_try = task_context("train", try_number=1)
    trigger = defer(submit(queues, rayjob_body(duration="inf"), first_try), first_try)

    # The task is cleared: try 2 adopts the running RayJob before try 1's trigger is killed.
    second_try = task_context("train", try_number=2)
    second = defer(submit(queues, rayjob_body(duration="inf"), second_try), second_try)
    assert second.uid == trigger.uid

    user_kill(trigger)
    [rayjob] = queues.rayjobs()
    assert rayjob["metadata"]["uid"] == trigger.uid
    assert rayjob["metadata"]["annotations"]["airflow.apache.org/try-number"] == "2"

    user_kill(second)
    user_kill(second)  # idempotent
    assert queues.rayjobs() == [] or all(r["metadata"].get("deletionTimestamp") for r in queues.rayjobs())


def test_inadmissible_after_the_grace_period_withdraws_the_rayjob(queues, rayjob_body, task_context):
    context = task_context("train")
    op = submit(queues, rayjob_body(duration="inf"), context, inadmissible_grace=0.5)
    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    trigger = defer(op, context)
    # The queue disappears while our RayJob waits in it.
    queues.custom.delete_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", queues.namespace, "localqueues", queues.local_queue
    )
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "inadmissible", event
    assert f"LocalQueue {queues.local_queue} doesn't exist" in event["message"]
    with pytest.raises(Exception, match="doesn't exist"):
        op.execute_complete(context, event=event)
    remaining = [r["metadata"]["uid"] for r in queues.rayjobs() if not r["metadata"].get("deletionTimestamp")]
    assert trigger.uid not in remaining


def test_queue_timeout_ends_a_wait_that_never_gets_admitted(queues, rayjob_body, task_context):
    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    context = task_context("train")
    trigger = defer(submit(queues, rayjob_body(), context, queue_timeout=1.0), context)
    event = asyncio.run(first_event(trigger))
    assert event["status"] == "queue_timeout"
    assert "not admitted within queue_timeout=1s" in event["message"]
    assert "insufficient unused quota" in event["message"]
    # What held the quota at the end: the blocker, at the same priority, so no preemption could help.
    [blocker] = [r for r in queues.rayjobs() if r["metadata"]["uid"] != trigger.uid]
    holder = queues.workload(blocker["metadata"]["uid"])["metadata"]["name"]
    assert f"ClusterQueue {queues.cluster_queue} at the end: " in event["message"]
    assert "nvidia.com/gpu 1 of 1" in event["message"]
    assert f"admitted: {holder} ({queues.low} " in event["message"]
    assert "not preemptible by this task's priority" in event["message"]


def test_the_log_says_why_it_is_still_queued_and_who_holds_the_quota(
    queues, rayjob_body, task_context, capfd
):
    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    context = task_context("train")
    # The timeout only ends the wait: long enough for the explanation on a loaded machine.
    trigger = defer(submit(queues, rayjob_body(), context, queue_timeout=6.0), context)
    assert asyncio.run(first_event(trigger))["status"] == "queue_timeout"
    [blocker] = [r for r in queues.rayjobs() if r["metadata"]["uid"] != trigger.uid]
    holder = queues.workload(blocker["metadata"]["uid"])["metadata"]["name"]
    told = "\n".join(trigger_log(capfd))
    assert f"RayJob {queues.namespace}/{trigger.name}: why still queued: Can be admitted by waiting" in told
    # The blocker ends by itself and, at the same priority, may not be preempted: both said, with its task.
    assert f"{holder} (RayJob {blocker['metadata']['name']}, DAG " in told
    assert "ends by itself; its priority may not preempt it" in told


def test_a_wait_in_a_worker_says_why_it_is_still_queued_too(queues, rayjob_body, task_context, capfd):
    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    context = task_context("train")
    op = submit(queues, rayjob_body(), context, queue_timeout=4.0, deferrable=False, poll_interval=0.2)
    with pytest.raises(Exception, match="queue_timeout=4s"):
        op.execute(context)
    told = capfd.readouterr().out
    assert (
        "why still queued: Can be admitted by waiting: for 1 workload(s) holding its quota that end by"
        in told
    )
    assert "(RayJob ml-pipeline-blocker-" in told and "task blocker)" in told


def test_a_queue_timeout_in_a_worker_says_what_held_the_quota_too(queues, rayjob_body, task_context):
    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    context = task_context("train")
    op = submit(queues, rayjob_body(), context, queue_timeout=1.0, deferrable=False, poll_interval=0.2)
    with pytest.raises(
        Exception, match=f"queue_timeout=1s.*ClusterQueue {queues.cluster_queue} at the end: .*admitted: "
    ):
        op.execute(context)


def test_execution_timeout_holds_while_deferred(queues, rayjob_body, task_context, capfd):
    """Airflow 3.3 does not enforce execution_timeout on a deferred task: the deadline travels with the
    trigger, which ends the wait when it passes; the resumed task deletes its RayJob and fails."""
    from datetime import timedelta

    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    context = task_context("train")
    op = submit(queues, rayjob_body(), context, execution_timeout=timedelta(seconds=2))
    _, kwargs = defer(op, context).serialize()
    trigger = RayJobTrigger(**kwargs)  # as a triggerer re-creates it: the deadline is in its kwargs
    assert kwargs["policy"]["deadline"]

    event = asyncio.run(first_event(trigger))

    assert event["status"] == "execution_timeout", event
    assert event["message"].startswith(f"execution_timeout passed at {kwargs['policy']['deadline']}")
    assert any(
        "Limits: queue_timeout 24 h (default), run_timeout 72 h (default); execution_timeout at" in line
        for line in trigger_log(capfd)
    )
    with pytest.raises(Exception, match="did not succeed \\(execution_timeout"):
        op.execute_complete(context, event=event)
    remaining = [r["metadata"]["uid"] for r in queues.rayjobs() if not r["metadata"].get("deletionTimestamp")]
    assert trigger.uid not in remaining


@pytest.fixture
def skewed_cluster(kubesim):
    """Set the cluster's clock off from this process's (``skewed_cluster(seconds)``), reset afterwards."""
    from kueue_ray.kube.server_clock import server_clock

    yield lambda seconds: kubesim.set_faults(clock_offset_s=seconds)
    kubesim.reset_faults()
    server_clock("kubernetes_default").offset_s = 0.0  # the next answer would correct it too


@pytest.mark.parametrize("skew", [-3600, 3600], ids=["server-an-hour-behind", "server-an-hour-ahead"])
@pytest.mark.parametrize("deferrable", [True, False], ids=["triggerer", "worker"])
def test_a_queue_timeout_is_measured_on_the_api_server_s_clock(
    queues, rayjob_body, task_context, skewed_cluster, skew, deferrable
):
    """Kueue's timestamps are on the control plane's clock: with the triggerer's own clock an hour off, a
    4 s queue timeout would fire at once (server behind) or an hour late (server ahead)."""
    import time

    skewed_cluster(skew)
    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    context = task_context("train")
    op = submit(queues, rayjob_body(), context, queue_timeout=4, deferrable=deferrable, poll_interval=0.2)
    started = time.monotonic()
    if deferrable:
        event = asyncio.run(first_event(defer(op, context)))
        assert event["status"] == "queue_timeout", event
    else:
        with pytest.raises(Exception, match="queue_timeout=4s"):
            op.execute(context)
    waited = time.monotonic() - started
    # Whole-second timestamps and the Date header's whole seconds: within about a second of 4 s.
    assert 2.5 <= waited <= 10, waited
