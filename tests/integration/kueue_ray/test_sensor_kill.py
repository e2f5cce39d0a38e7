"""Killing a deferred RayJobSensor (mark failed) deletes the RayJob it waits for, frees its quota for the
next queued RayJob, and never deletes a RayJob that is not its to delete: one of another DAG run, one not
created by Airflow, or one a newer try of the sensor (a Clear) has registered on since."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kueue_ray.naming import WAITER_ANNOTATION
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.sensors import RayJobSensor
from kueue_ray.trigger import RayJobTrigger


def submit(queues, body, context, task_id: str) -> dict:
    return SubmitRayJobOperator(
        task_id=task_id,
        template=body,
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(context)


def defer_sensor(queues, reference: dict, context) -> RayJobTrigger:
    sensor = RayJobSensor(task_id="wait", rayjob_name=reference["name"], namespace=queues.namespace)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(context)
    return deferred.value.trigger


def rayjob(queues, name: str) -> dict | None:
    return next((r for r in queues.rayjobs() if r["metadata"]["name"] == name), None)


def quota_reserved(workload: dict | None) -> str | None:
    for condition in ((workload or {}).get("status") or {}).get("conditions") or ():
        if condition["type"] == "QuotaReserved":
            return condition["status"]
    return None


def test_killing_the_deferred_sensor_deletes_its_rayjob_and_the_next_one_is_admitted(
    user_kill, queues, rayjob_body, task_context, eventually
):
    running = submit(queues, rayjob_body(duration="inf"), task_context("train"), "train")
    eventually(lambda: quota_reserved(queues.workload(running["uid"])) == "True")
    queued = submit(queues, rayjob_body(duration="inf"), task_context("train_next"), "train_next")
    eventually(lambda: quota_reserved(queues.workload(queued["uid"])) == "False")

    trigger = defer_sensor(queues, running, task_context("wait"))
    annotations = rayjob(queues, running["name"])["metadata"]["annotations"]
    assert annotations[WAITER_ANNOTATION] == "wait/-1/1"

    user_kill(trigger)  # what the triggerer does when the user marks the task failed

    eventually(lambda: rayjob(queues, running["name"]) is None)
    eventually(lambda: quota_reserved(queues.workload(queued["uid"])) == "True")


def test_a_killed_older_try_leaves_the_rayjob_to_the_newer_try(
    user_kill, queues, rayjob_body, task_context, eventually
):
    reference = submit(queues, rayjob_body(duration="inf"), task_context("train"), "train")
    old_try = defer_sensor(queues, reference, task_context("wait", try_number=1))
    # Clear: the new try defers (and registers as waiter) before the old trigger's on_kill runs.
    new_try = defer_sensor(queues, reference, task_context("wait", try_number=2))

    user_kill(old_try)
    kept = rayjob(queues, reference["name"])
    assert kept is not None and kept["metadata"]["uid"] == reference["uid"]
    assert kept["metadata"]["annotations"][WAITER_ANNOTATION] == "wait/-1/2"

    user_kill(new_try)
    eventually(lambda: rayjob(queues, reference["name"]) is None)


def test_a_sensor_never_deletes_a_rayjob_of_another_run(user_kill, queues, rayjob_body, task_context):
    reference = submit(
        queues, rayjob_body(duration="inf"), task_context("train", run_id="manual__1"), "train"
    )
    trigger = defer_sensor(queues, reference, task_context("wait", run_id="manual__2"))
    assert trigger.waiter is None, "nothing to delete on kill"
    assert WAITER_ANNOTATION not in rayjob(queues, reference["name"])["metadata"]["annotations"]

    user_kill(trigger)
    # Even a trigger acting for the other run's sensor, registered as the waiter, checks the RayJob's run.
    queues.custom.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        queues.namespace,
        "rayjobs",
        reference["name"],
        {"metadata": {"annotations": {WAITER_ANNOTATION: "wait/-1/1"}}},
    )
    stray = RayJobTrigger(
        **{
            **trigger.serialize()[1],
            "waiter": {"dag_id": "ml_pipeline", "task_id": "wait", "run_id": "manual__2", "map_index": -1},
        }
    )
    user_kill(stray)
    assert [r["metadata"]["uid"] for r in queues.rayjobs()] == [reference["uid"]]


def test_a_sensor_never_deletes_a_rayjob_created_outside_airflow(
    user_kill, queues, rayjob_body, task_context
):
    body = rayjob_body(duration="inf")
    body["metadata"]["name"] = "handmade"
    created = queues.custom.create_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayjobs", body)
    trigger = defer_sensor(queues, {"name": "handmade"}, task_context("wait"))
    assert trigger.waiter is None

    user_kill(trigger)
    assert [r["metadata"]["uid"] for r in queues.rayjobs()] == [created["metadata"]["uid"]]
