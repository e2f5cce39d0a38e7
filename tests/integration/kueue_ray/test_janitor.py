"""DeleteOrphanedRayJobsOperator against kubesim: orphans are deleted and free their quota; RayJobs a
task may still wait for, fire-and-forget submissions and RayJobs of other tools are left alone.

Airflow's side (DAG run existence and task states, normally the execution API of the janitor's own task)
is given by ``AirflowStates``; the cluster side is kubesim over HTTP with the real clients. The same path
through a real Airflow is tests/e2e/test_09_janitor.py.
"""

from __future__ import annotations

from kueue_ray.janitor import DeleteOrphanedRayJobsOperator
from kueue_ray.operators import SubmitRayJobOperator

from tests.integration.kueue_ray.conftest import wait_for


class AirflowStates:
    """What the janitor asks Airflow: ``get_dr_count`` and ``get_task_states`` of RuntimeTaskInstance."""

    def __init__(self, runs: dict[str, dict[str, str | None]]):
        self.runs = runs
        self.asked: list[str] = []

    def get_dr_count(self, dag_id: str, run_ids: list[str]) -> int:
        return sum(run_id in self.runs for run_id in run_ids)

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict:
        self.asked.extend(run_ids)
        return {run_id: self.runs[run_id] for run_id in run_ids if run_id in self.runs}


def submit(queues, body, context, task_id) -> dict:
    return SubmitRayJobOperator(
        task_id=task_id,
        template=body,
        queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(context)


def janitor(queues, states: AirflowStates, **kwargs) -> list[dict]:
    op = DeleteOrphanedRayJobsOperator(task_id="delete_orphans", namespaces=[queues.namespace], **kwargs)
    return op.execute({"ti": states})


def phase_of(queues, uid: str) -> str:
    job = next((r for r in queues.rayjobs() if r["metadata"]["uid"] == uid), None)
    return "gone" if job is None else (job.get("status") or {}).get("jobDeploymentStatus") or "queued"


def test_an_orphan_is_deleted_and_the_job_queued_behind_it_is_admitted(queues, rayjob_body, task_context):
    # The first RayJob runs and holds the whole ClusterQueue; its submitting task then failed for good.
    orphan = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")
    wait_for(lambda: phase_of(queues, orphan["uid"]) == "Running")
    waiting = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r2"), "submit")
    states = AirflowStates({"r1": {"submit": "failed"}, "r2": {"submit": "success", "wait": "deferred"}})

    found = janitor(queues, states)

    assert [(f["name"], f["result"]) for f in found] == [(orphan["name"], "deleted")]
    assert found[0]["reason"] == "the task that submitted it, submit, ended failed and no task waits for it"
    wait_for(lambda: phase_of(queues, orphan["uid"]) == "gone")
    wait_for(lambda: phase_of(queues, waiting["uid"]) == "Running")
    assert sorted(states.asked) == ["r1", "r2"], "Airflow is asked once per DAG run"


def test_what_a_task_may_still_wait_for_is_never_deleted(queues, rayjob_body, task_context):
    retrying = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")
    handed_on = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r2"), "submit")
    states = AirflowStates({"r1": {"submit": "up_for_retry"}, "r2": {"submit": "success"}})

    assert janitor(queues, states) == []
    assert {phase_of(queues, r["uid"]) for r in (retrying, handed_on)} != {"gone"}
    assert len(queues.rayjobs()) == 2


def test_a_dry_run_reports_without_deleting(queues, rayjob_body, task_context):
    orphan = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")
    found = janitor(queues, AirflowStates({}), dry_run=True)
    assert [(f["name"], f["reason"], f["result"]) for f in found] == [
        (orphan["name"], "its DAG run ml_pipeline / r1 no longer exists", "not deleted (dry run)")
    ]
    assert [r["metadata"]["uid"] for r in queues.rayjobs()] == [orphan["uid"]]


def test_rayjobs_not_created_by_airflow_are_never_looked_at(queues, rayjob_body):
    body = rayjob_body(duration="inf")
    body["metadata"].update(name="by-hand", labels={"kueue.x-k8s.io/queue-name": queues.local_queue})
    body["spec"]["shutdownAfterJobFinishes"] = True
    queues.custom.create_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayjobs", body)
    states = AirflowStates({})
    assert janitor(queues, states) == []
    assert states.asked == []
    assert [r["metadata"]["name"] for r in queues.rayjobs()] == ["by-hand"]
