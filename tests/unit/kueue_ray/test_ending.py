"""A successful wait ends in the triggerer with exactly what the worker's execute_complete would leave:
the same XComs (timeline, rayjob, return_value, the dashboard link) and the same closing log lines."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from airflow.triggers.base import TaskSuccessEvent
from kueue_ray.links import RayDashboardLink, dashboard_url
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.results import TriggerEnding, summary_lines
from kueue_ray.sensors import RayJobSensor
from kueue_ray.status import Observation, Phase
from kueue_ray.timeline import Timeline
from kueue_ray.trigger import RayJobTrigger
from kueue_ray.verdicts import Verdict, VerdictStatus

PREEMPTOR_UID = "0f1e2d3c-preemptor"
PREEMPTED = (
    f"Preempted to accommodate a workload (UID: w-9, JobUID: {PREEMPTOR_UID}) due to prioritization in the "
    "ClusterQueue; 8000000Ki of memory"
)
EVENT = {
    "status": "success",
    "reason": "Succeeded",
    "message": "Job finished successfully.",
    "name": "pipe-train-0123456789",
    "namespace": "ml",
    "uid": "uid-1",
    "phase": "SUCCEEDED",
    "queue": "team-a",
    "priority": "prod-priority",
    "cluster_queue": "team-a-cq",
    "workload_name": "rayjob-pipe-train-0123456789-abcde",
    "job_id": "pipe-train-0123456789-x7k2q",
    "ray_cluster": "pipe-train-0123456789-raycluster-abcd",
    "dashboard_url": "pipe-train-0123456789-head-svc.ml.svc.cluster.local:8265",
    "timeline": {
        "queued_seconds": 61.0,
        "running_seconds": 30.5,
        "admissions": [{"at": "2026-12-01T12:01:01+00:00", "cluster_queue": "team-a-cq"}],
        "preemptions": [
            {"at": "2026-12-01T12:00:30+00:00", "reason": "InClusterQueue", "message": PREEMPTED}
        ],
        "evictions": [],
        "final_phase": "SUCCEEDED",
    },
}
PREEMPTOR = {
    "metadata": {
        "name": "prod-run",
        "namespace": "ml",
        "uid": PREEMPTOR_UID,
        "annotations": {
            "airflow.apache.org/dag-id": "pipe",
            "airflow.apache.org/run-id": "manual__1",
            "airflow.apache.org/task-id": "train",
        },
    }
}
TEMPLATE = "https://ray.example.com/{namespace}/{name}/{job_id}"


class TI:
    dag_id, task_id, run_id, map_index, try_number = "pipe", "train", "manual__1", -1, 1

    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def operator(**kwargs) -> SubmitRayJobOperator:
    defaults = dict(
        task_id="train", template="text-classifier", local_queue="team-a", priority="prod-priority"
    )
    return SubmitRayJobOperator(**{**defaults, **kwargs})


def worker_result(op, event: dict) -> dict:
    """What resuming on a worker leaves: execute_complete's XComs and return value, then the link
    Airflow's finalize() computes."""
    ti = TI()
    returned = op.execute_complete({"ti": ti}, event=event)
    xcoms = {**ti.xcom, "return_value": returned}
    link = RayDashboardLink()
    xcoms[link.xcom_key] = link.get_link(op, ti_key=None)
    return xcoms


@pytest.mark.parametrize("template", [None, TEMPLATE])
def test_the_operators_xcoms_from_the_triggerer_equal_the_workers(template):
    op = operator(log_tail_lines=0, ray_dashboard_url_template=template)
    ending = TriggerEnding(
        log_tail_lines=0,
        rayjob_extra={"queue": "team-a", "priority": "prod-priority"},
        links={RayDashboardLink().xcom_key: template},
    )
    assert ending.xcoms(EVENT, dashboard_url) == worker_result(op, EVENT)


def test_the_sensors_xcoms_from_the_triggerer_equal_the_workers():
    sensor = RayJobSensor(task_id="wait", submit_task_id="train", log_tail_lines=0)
    ending = TriggerEnding(log_tail_lines=0, links={RayDashboardLink().xcom_key: None})
    assert ending.xcoms(EVENT, dashboard_url) == worker_result(sensor, EVENT)


def test_no_return_value_when_the_task_pushes_none():
    ending = TriggerEnding(push_return_value=False)
    assert "return_value" not in ending.xcoms(EVENT, dashboard_url)
    assert TriggerEnding.from_dict(ending.to_dict()) == ending


class Subscription:
    """What the trigger asks of its hub subscription at the end: the preemptor, a client for the log."""

    def rayjob_by_uid(self, uid):
        return PREEMPTOR if uid == PREEMPTOR_UID else None

    def api_client(self):
        return contextlib.nullcontext()


def test_the_trigger_ends_a_success_with_the_xcoms_and_the_closing_lines(capfd, monkeypatch):
    comms = Comms()
    monkeypatch.setattr("airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS", comms, raising=False)
    trigger = RayJobTrigger(
        name=EVENT["name"],
        namespace="ml",
        uid="uid-1",
        queue="team-a",
        priority="prod-priority",
        end_in_triggerer=TriggerEnding(
            log_tail_lines=0, rayjob_extra={"queue": "team-a", "priority": "prod-priority"}
        ).to_dict(),
    )
    trigger.task_instance = TI()
    observation = Observation(
        phase=Phase.SUCCEEDED,
        terminal=True,
        reason="Succeeded",
        message="Job finished successfully.",
        cluster_queue="team-a-cq",
        job_id=EVENT["job_id"],
    )
    timeline = Timeline.from_dict(EVENT["timeline"])
    verdict = Verdict(VerdictStatus.SUCCESS, "Succeeded", "Job finished successfully.")
    event = asyncio.run(trigger._end_here(verdict, observation, timeline, Subscription()))
    assert isinstance(event, TaskSuccessEvent)
    pushed = {message.key: message.value for message in comms.sent}
    assert pushed["rayjob"]["job_id"] == EVENT["job_id"]
    assert pushed["rayjob"]["queue"] == "team-a"
    assert pushed["timeline"]["final_phase"] == "SUCCEEDED"
    assert pushed["return_value"] == {"name": EVENT["name"], "namespace": "ml", "uid": "uid-1"}
    told = capfd.readouterr().out  # Airflow's structlog writes the trigger's task log to stdout here
    assert "ended SUCCEEDED after 61.0s queued" in told
    # The preemptor is named as the worker names it, memory readable.
    assert "RayJob ml/prod-run (DAG pipe, run manual__1, task train)" in told and "7.63Gi" in told
    assert "ends here in the triggerer" in told
    # Once ended, a kill (the task is already over) deletes nothing.
    assert trigger._fired


def test_the_closing_lines_are_the_same_on_both_paths():
    lines = summary_lines(EVENT, lambda uid: PREEMPTOR if uid == PREEMPTOR_UID else None)
    assert lines[0].startswith("RayJob ml/pipe-train-0123456789 ended SUCCEEDED after 61.0s queued")
    assert "1 admission(s), 1 preemption(s), 0 eviction(s)" in lines[0]
    assert lines[1].startswith(
        "  preempted at 2026-12-01T12:00:30+00:00: Preempted to accommodate RayJob ml/"
    )


SUCCEEDED = (
    Verdict(VerdictStatus.SUCCESS, "Succeeded", ""),
    Observation(phase=Phase.SUCCEEDED, terminal=True, reason="Succeeded", message=""),
)
"""What ``_end_here`` is given for a RayJob that succeeded: the verdict and the observation."""


def ending_trigger(**ending) -> RayJobTrigger:
    """A RayJobTrigger of task pipe.train that ends its task in the triggerer (``TriggerEnding(**ending)``)."""
    trigger = RayJobTrigger(
        name=EVENT["name"], namespace="ml", uid="uid-1", end_in_triggerer=TriggerEnding(**ending).to_dict()
    )
    trigger.task_instance = TI()
    return trigger


class Comms:
    """The triggerer's channel to its supervisor, as Airflow's XCom class uses it: records what is sent."""

    def __init__(self):
        self.sent = []

    async def asend(self, message):
        self.sent.append(message)


def test_in_a_triggerer_the_xcoms_go_the_way_a_workers_xcom_push_goes(monkeypatch):
    """Through Airflow's XCom class and SetXCom, not inside TaskSuccessEvent (which 3.3.2 double-encodes)."""
    comms = Comms()
    monkeypatch.setattr("airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS", comms, raising=False)
    trigger = ending_trigger(log_tail_lines=0)
    event = asyncio.run(trigger._end_here(*SUCCEEDED, Timeline.from_dict(EVENT["timeline"]), Subscription()))
    assert isinstance(event, TaskSuccessEvent) and event.xcoms is None
    pushed = {message.key: message for message in comms.sent}
    assert set(pushed) == {"timeline", "rayjob", "return_value"}
    assert all(
        (m.dag_id, m.task_id, m.run_id, m.map_index) == ("pipe", "train", "manual__1", -1) for m in comms.sent
    )
    assert pushed["return_value"].value == {"name": EVENT["name"], "namespace": "ml", "uid": "uid-1"}
    assert pushed["timeline"].value["final_phase"] == "SUCCEEDED"


class SlowSupervisor:
    """A triggerer supervisor that answers only once three XComs are waiting for it: the XComs of a success
    must be in flight together, not one round trip after another."""

    def __init__(self):
        self.sent = []
        self.three_waiting = asyncio.Event()

    async def asend(self, message):
        self.sent.append(message)
        if len(self.sent) >= 3:
            self.three_waiting.set()
        await self.three_waiting.wait()


def test_the_xcoms_of_a_success_are_stored_together_not_one_round_trip_after_another(monkeypatch):
    supervisor = SlowSupervisor()
    monkeypatch.setattr("airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS", supervisor, raising=False)
    trigger = ending_trigger()

    async def end():
        return await asyncio.wait_for(
            trigger._end_here(*SUCCEEDED, Timeline.from_dict(EVENT["timeline"]), Subscription()), timeout=5
        )

    trigger._log_tail = lambda subscription, lines, worker=None: asyncio.sleep(0, "the driver said hello")
    assert isinstance(asyncio.run(end()), TaskSuccessEvent)
    assert {message.key for message in supervisor.sent} == {"timeline", "rayjob", "return_value"}


def test_every_closing_line_is_written_before_the_first_xcom_reaches_the_supervisor(capfd, monkeypatch):
    """Airflow 3.3.2's triggerer supervisor reads a trigger's log lines on another socket than its requests
    and closes the trigger's log file once it learns the trigger finished: a line written after the last
    request could land in the triggerer's own output instead of the task log (seen in the e2e tests: the
    driver log's tail and "ends here" missing). Lines written before a request are read by the time it is
    answered, so every closing line comes before the first XCom is sent."""
    written_before = []

    class Watching(Comms):
        async def asend(self, message):
            written_before.append(capfd.readouterr().out)
            await super().asend(message)

    monkeypatch.setattr("airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS", Watching(), raising=False)
    trigger = ending_trigger(log_tail_lines=5)

    async def tail(subscription, lines, worker=None):
        return "epoch 2/2 done"

    monkeypatch.setattr(trigger, "_log_tail", tail)
    asyncio.run(trigger._end_here(*SUCCEEDED, Timeline(), Subscription()))

    assert written_before, "no XCom was sent"
    first = written_before[0]
    assert "ended SUCCEEDED" in first
    assert "epoch 2/2 done" in first
    assert "ends here in the triggerer" in first
