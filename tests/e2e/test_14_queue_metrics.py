"""The queue metrics reach a real StatsD listener through Airflow's own metrics system, tagged by queue,
ClusterQueue and priority: time queued, admissions, a preemption with Kueue's reason, outcomes, and the
tasks-waiting gauge (README.md "Queue metrics").

A dev-priority run holds the walkthrough's single ClusterQueue (room for one text-classifier RayJob) while a
prod-priority run arrives: Kueue preempts the dev RayJob, runs the prod one, then the dev one again.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(420)

DAG = "e2e_rayjob"
QUEUE = {"queue": "user-queue", "namespace": "ray"}


def running(e2e, dag_id: str, run_id: str) -> bool:
    return any(
        (job.get("status") or {}).get("jobDeploymentStatus") == "Running"
        for job in e2e.rayjobs_of(dag_id, run_id, "submit")
    )


@pytest.fixture(scope="module")
def preempted(e2e, statsd):
    """A dev run preempted by a prod run; both succeed. The metrics sent meanwhile."""
    start = len(statsd.received())
    dev = e2e.start_run(DAG, {"entrypoint": "sleep 120", "priority": "dev-priority"})
    wait_until(lambda: running(e2e, DAG, dev), timeout=120, what="the dev RayJob running")
    # ... and its trigger saw it run, so the admission and the preemption are seen as they happen.
    wait_until(
        lambda: ": RUNNING (" in e2e.task_log(DAG, dev, "submit"),
        timeout=60,
        what="the dev trigger's RUNNING line",
    )
    prod = e2e.start_run(DAG, {"entrypoint": "sleep 5", "priority": "prod-priority"})
    runs = {run_id: e2e.wait_run(DAG, run_id, timeout=300)["state"] for run_id in (dev, prod)}
    assert runs == {dev: "success", prod: "success"}, {r: e2e.ti_states(DAG, r) for r in runs}
    # The gauge goes every 10 s; the last one of the run says the queue is empty again.
    wait_until(
        lambda: any(m.value == 0 for m in statsd.named("kueue_ray.tasks_waiting", **QUEUE)[-3:]),
        timeout=30,
        what="the tasks_waiting gauge back at 0",
    )
    return statsd.received()[start:]


def named(metrics, name: str, **tags):
    return [
        m for m in metrics if m.name == f"airflow.{name}" and all(m.tags.get(k) == v for k, v in tags.items())
    ]


def test_admissions_and_time_queued_per_queue_cluster_queue_and_priority(preempted):
    tags = {**QUEUE, "cluster_queue": "cluster-queue"}
    for priority, admissions in (("dev-priority", 2), ("prod-priority", 1)):
        assert len(named(preempted, "kueue_ray.admissions", priority=priority, **tags)) == admissions
        for timer in ("kueue_ray.queued_until_quota_reserved", "kueue_ray.queued_until_admitted"):
            samples = named(preempted, timer, priority=priority, **tags)
            assert len(samples) == admissions and all(m.kind == "ms" and m.value >= 0 for m in samples)
    # The dev RayJob's second wait began at its preemption and lasted the prod run: seconds, not zero.
    dev_waits = named(preempted, "kueue_ray.queued_until_admitted", priority="dev-priority", **tags)
    assert dev_waits[-1].value > 1000


def test_a_preemption_with_kueues_reason(preempted):
    [preemption] = named(preempted, "kueue_ray.preemptions", priority="dev-priority", **QUEUE)
    assert preemption.tags["reason"] == "InClusterQueue"
    assert preemption.tags["cluster_queue"] == "cluster-queue"


def test_each_wait_ends_with_an_outcome(preempted):
    outcomes = named(preempted, "kueue_ray.outcome", **QUEUE)
    assert sorted((m.tags["priority"], m.tags["outcome"]) for m in outcomes) == [
        ("dev-priority", "success"),
        ("prod-priority", "success"),
    ]


def test_the_tasks_waiting_gauge_per_queue_and_stage(preempted):
    gauges = named(preempted, "kueue_ray.tasks_waiting", **QUEUE)
    assert all(m.kind == "g" and m.tags["hostname"] for m in gauges)
    # While the prod RayJob ran, the dev one waited for admission again.
    assert any(m.tags["stage"] == "queued" and m.value >= 1 for m in gauges)
    assert any(m.tags["stage"] == "admitted" and m.value >= 1 for m in gauges)
