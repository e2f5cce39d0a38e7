"""RayJobSensor against kubesim: deferred (shared watch) and poke mode tell the same story."""

from __future__ import annotations

import asyncio
import time

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.sensors import RayJobSensor
from kueue_ray.timeline import to_epoch

from tests.integration.kueue_ray.conftest import wait_for


def submit(queues, body, context) -> dict:
    return SubmitRayJobOperator(
        task_id="train",
        template=body,
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(context)


async def first_event(trigger) -> dict:
    events = trigger.run()
    try:
        return (await asyncio.wait_for(events.__anext__(), 60)).payload
    finally:
        await events.aclose()


def test_deferred_sensor_follows_the_submitting_task(user_kill, queues, rayjob_body, task_context):
    context = task_context("train")
    reference = submit(queues, rayjob_body(duration="2"), context)
    sensor = RayJobSensor(task_id="wait", submit_task_id="train", log_tail_lines=0, end_in_triggerer=False)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    trigger = deferred.value.trigger
    assert (trigger.name, trigger.uid, trigger.owner) == (reference["name"], reference["uid"], None)
    # Its log names the queue and priority the RayJob was submitted with, as the operator's does.
    assert (trigger.target.queue, trigger.target.priority) == (queues.local_queue, queues.low)

    event = asyncio.run(first_event(trigger))
    assert sensor.execute_complete(context, event=event) == reference
    timeline = context["ti"].xcom["timeline"]
    assert timeline["final_phase"] == "SUCCEEDED"
    assert timeline["admissions"][0]["cluster_queue"] == queues.cluster_queue
    assert timeline["finished_at"] is not None

    # Killed after its event (the task already resumed): the trigger deletes nothing.
    user_kill(trigger)
    assert [r["metadata"]["uid"] for r in queues.rayjobs()] == [reference["uid"]]


def test_poke_mode_waits_with_the_same_rules_and_fails_with_the_ray_message(
    queues, rayjob_body, task_context
):
    context = task_context("train")
    reference = submit(queues, rayjob_body(duration="2", outcome="AppFailed"), context)
    sensor = RayJobSensor(
        task_id="wait",
        rayjob_name=reference["name"],
        namespace=queues.namespace,
        deferrable=False,
        mode="poke",
        poke_interval=0.1,
        timeout=60,
        log_tail_lines=0,
    )
    with pytest.raises(AirflowException, match=r"did not succeed \(failed, AppFailed\)"):
        sensor.execute(context)
    assert context["ti"].xcom["timeline"]["final_phase"] == "FAILED"


def test_sensor_refuses_a_rayjob_that_does_not_exist(queues, task_context):
    sensor = RayJobSensor(task_id="wait", rayjob_name="nope", namespace=queues.namespace)
    with pytest.raises(AirflowException, match=f"RayJob {queues.namespace}/nope does not exist"):
        sensor.execute(task_context("wait"))


def test_a_sensor_that_starts_after_admission_still_reports_the_queueing(queues, rayjob_body, task_context):
    """The sensor (like a trigger re-created by a restarted triggerer) first looks when the job already
    runs: its timeline takes the wait from the RayJob's creation and Kueue's QuotaReserved instant."""
    blocker = submit(queues, rayjob_body(duration="inf"), task_context("blocker"))
    context = task_context("train")
    reference = submit(queues, rayjob_body(duration="3"), context)
    wait_for(lambda: (queues.workload(reference["uid"]) or {}).get("status", {}).get("conditions"))
    time.sleep(2.5)  # queued behind the blocker, unobserved by any waiter
    queues.custom.delete_namespaced_custom_object(
        "ray.io", "v1", queues.namespace, "rayjobs", blocker["name"]
    )
    wait_for(
        lambda: (
            (
                next(r for r in queues.rayjobs() if r["metadata"]["uid"] == reference["uid"]).get("status")
                or {}
            ).get("jobDeploymentStatus")
            == "Running"
        )
    )
    reserved_at = next(
        c["lastTransitionTime"]
        for c in queues.workload(reference["uid"])["status"]["conditions"]
        if c["type"] == "QuotaReserved"
    )

    sensor = RayJobSensor(task_id="wait", submit_task_id="train", log_tail_lines=0, end_in_triggerer=False)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    sensor.execute_complete(context, event=asyncio.run(first_event(deferred.value.trigger)))
    timeline = context["ti"].xcom["timeline"]
    assert timeline["queued_seconds"] >= 1, timeline
    assert to_epoch(timeline["admissions"][0]["at"]) == to_epoch(reserved_at)


def test_a_sensor_that_starts_after_the_job_finished_reports_how_long_it_ran(
    queues, rayjob_body, task_context
):
    """A sensor retry after the RayJob is over (its first try lost to a worker problem): the timeline
    takes the running time from the Ray job's own start and end, not from the sensor's first look."""
    context = task_context("train")
    reference = submit(queues, rayjob_body(duration="30"), context)
    wait_for(
        lambda: (queues.rayjobs()[0].get("status") or {}).get("jobDeploymentStatus") == "Complete", timeout=60
    )
    sensor = RayJobSensor(task_id="wait", submit_task_id="train", log_tail_lines=0, end_in_triggerer=False)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    assert (
        sensor.execute_complete(context, event=asyncio.run(first_event(deferred.value.trigger))) == reference
    )
    timeline = context["ti"].xcom["timeline"]
    info = queues.rayjobs()[0]["status"]["rayJobInfo"]
    assert timeline["final_phase"] == "SUCCEEDED"
    assert timeline["running_seconds"] == to_epoch(info["endTime"]) - to_epoch(info["startTime"]) > 0
    assert to_epoch(timeline["finished_at"]) == to_epoch(info["endTime"])
