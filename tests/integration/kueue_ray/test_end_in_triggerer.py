"""A successful RayJob ends its task in the triggerer against kubesim: Airflow's TaskSuccessEvent carries the
XComs the worker would have pushed, and the task log gets the driver log tail read asynchronously; a
failure still resumes on a worker, so its exception (and Airflow's retries) apply."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from airflow.triggers.base import TaskSuccessEvent, TriggerEvent
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.sensors import RayJobSensor
from kueue_ray.trigger import RayJobTrigger

EVENT_TIMEOUT = 60
SUBMITTED = "submitted successfully"
"""What the K8sJobMode submitter prints (``ray job submit``), so its log tail is recognisable."""


def operator(queues, body, **kwargs) -> SubmitRayJobOperator:
    return SubmitRayJobOperator(
        task_id="train",
        template=body,
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        **kwargs,
    )


class SupervisorChannel:
    """The triggerer's channel to its supervisor, which Airflow's XCom class writes through (what a worker's
    ``xcom_push`` uses too): records each XCom sent."""

    def __init__(self):
        self.sent = []

    async def asend(self, message):
        self.sent.append(message)

    def xcoms(self) -> dict:
        from airflow.sdk.execution_time.comms import SetXCom

        return {message.key: message.value for message in self.sent if isinstance(message, SetXCom)}


@pytest.fixture
def channel(monkeypatch) -> SupervisorChannel:
    channel = SupervisorChannel()
    monkeypatch.setattr("airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS", channel, raising=False)
    return channel


def from_the_database(trigger: RayJobTrigger, context: dict) -> RayJobTrigger:
    """What the triggerer runs: the trigger rebuilt from its serialized kwargs, with the task instance the
    triggerer gives every trigger it runs."""
    rebuilt = RayJobTrigger(**trigger.serialize()[1])
    rebuilt.task_instance = context["ti"]
    return rebuilt


async def the_event(trigger: RayJobTrigger) -> TriggerEvent:
    events = trigger.run()
    try:
        return await asyncio.wait_for(events.__anext__(), EVENT_TIMEOUT)
    finally:
        await events.aclose()


def defer(task, context) -> RayJobTrigger:
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context)
    return from_the_database(deferred.value.trigger, context)


def test_a_success_ends_in_the_triggerer_with_the_workers_xcoms_and_the_log_tail(
    queues, rayjob_body, task_context, capfd, channel
):
    body = rayjob_body(cpu="1", memory="4G", duration="2", submission_mode="K8sJobMode")
    context = task_context("train")
    op = operator(queues, body, log_tail_lines=20)
    event = asyncio.run(the_event(defer(op, context)))

    assert isinstance(event, TaskSuccessEvent)
    xcoms = channel.xcoms()
    assert xcoms["timeline"]["final_phase"] == "SUCCEEDED"
    assert xcoms["timeline"]["admissions"][0]["cluster_queue"] == queues.cluster_queue
    rayjob = xcoms["rayjob"]
    assert rayjob["job_id"] and rayjob["ray_cluster"] and rayjob["workload_name"]
    assert (rayjob["queue"], rayjob["priority"], rayjob["cluster_queue"]) == (
        queues.local_queue,
        queues.low,
        queues.cluster_queue,
    )
    assert xcoms["return_value"] == {
        "name": rayjob["name"],
        "namespace": queues.namespace,
        "uid": rayjob["uid"],
    }
    assert xcoms["_link_RayDashboardLink"] == "http://localhost:8265/#/jobs"
    told = capfd.readouterr().out  # the trigger's task log (Airflow's structlog writes it to stdout here)
    assert "ended SUCCEEDED after" in told
    assert "Last 20 lines of the Ray driver (submitter) log" in told and SUBMITTED in told

    # The worker path on the same finished RayJob (a later try that memoizes takes it and ends at once, on
    # the worker) leaves the same rayjob XCom and return value.
    worker_context = task_context("train", try_number=2)
    worker = operator(queues, body, log_tail_lines=20, end_in_triggerer=False, reuse_succeeded=True)
    assert worker.execute(worker_context) == xcoms["return_value"]
    assert worker_context["ti"].xcom["rayjob"] == rayjob


def test_a_failure_resumes_on_a_worker_and_raises_there(queues, rayjob_body, task_context):
    context = task_context("train")
    op = operator(queues, rayjob_body(duration="1", outcome="AppFailed"), log_tail_lines=0)
    trigger = defer(op, context)
    assert trigger.end_in_triggerer is not None  # it would have ended a success in the triggerer

    event = asyncio.run(the_event(trigger))

    assert not isinstance(event, TaskSuccessEvent)
    assert event.payload["status"] == "failed"
    with pytest.raises(AirflowException, match="did not succeed"):
        op.execute_complete(context, event=event.payload)


def test_a_sensor_ends_a_success_in_the_triggerer_too(queues, rayjob_body, task_context, channel):
    context = task_context("train")
    reference = operator(queues, rayjob_body(duration="2"), wait_for_completion=False).execute(context)
    sensor = RayJobSensor(task_id="wait", submit_task_id="train", log_tail_lines=0)

    event = asyncio.run(the_event(defer(sensor, context)))

    assert isinstance(event, TaskSuccessEvent)
    xcoms = channel.xcoms()
    assert xcoms["return_value"] == reference
    assert xcoms["rayjob"]["uid"] == reference["uid"] and "queue" not in xcoms["rayjob"]
    assert xcoms["timeline"]["final_phase"] == "SUCCEEDED"
