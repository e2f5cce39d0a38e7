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
        local_queue=queues.local_queue,
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


def running_steadily(queues, uid: str) -> bool:
    """Its Ray job runs: KubeRay writes no more status (hence no new resourceVersion) until it ends, so a
    decision the janitor makes now stays current unless the test itself changes the RayJob."""
    job = next((r for r in queues.rayjobs() if r["metadata"]["uid"] == uid), None)
    status = (job or {}).get("status") or {}
    return status.get("jobDeploymentStatus") == "Running" and status.get("jobStatus") == "RUNNING"


def test_an_orphan_is_deleted_and_the_job_queued_behind_it_is_admitted(queues, rayjob_body, task_context):
    # The first RayJob runs and holds the whole ClusterQueue; its submitting task then failed for good.
    orphan = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")
    wait_for(lambda: running_steadily(queues, orphan["uid"]))
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


class RacingAirflowStates(AirflowStates):
    """Airflow answers slowly the first time; meanwhile ``race()`` changes the RayJob in the cluster (and
    what Airflow would answer now)."""

    def __init__(self, runs, race):
        super().__init__(runs)
        self.race = race

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict:
        answer = super().get_task_states(dag_id, run_ids)  # as of when Airflow was asked
        if self.race is not None:
            race, self.race = self.race, None
            race(self)
        return answer


def deletes_of(kubesim, name: str) -> list[int]:
    return [r["code"] for r in kubesim.requests() if r["verb"] == "delete" and r["name"] == name]


def test_an_orphan_whose_status_changes_before_its_deletion_is_judged_again_and_deleted(
    kubesim, queues, rayjob_body, task_context
):
    # The orphan waits behind a blocker; while the janitor asks Airflow, the blocker ends, Kueue admits
    # the orphan and KubeRay starts it: the version the janitor judged is no longer the RayJob's.
    blocker = submit(queues, rayjob_body(duration="inf"), task_context("blocker", run_id="r0"), "blocker")
    wait_for(lambda: phase_of(queues, blocker["uid"]) == "Running")
    orphan = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")
    judged = next(j for j in queues.rayjobs() if j["metadata"]["uid"] == orphan["uid"])

    def status_changes(_states) -> None:
        queues.custom.delete_namespaced_custom_object(
            "ray.io", "v1", queues.namespace, "rayjobs", blocker["name"]
        )
        # Until KubeRay's last status write of the start (the Ray job RUNNING): a write landing between the
        # re-judgement and the retried delete would make a second 409, right but not what is tested here.
        wait_for(lambda: running_steadily(queues, orphan["uid"]))
        current = next(j for j in queues.rayjobs() if j["metadata"]["uid"] == orphan["uid"])
        assert current["metadata"]["resourceVersion"] != judged["metadata"]["resourceVersion"]

    states = RacingAirflowStates(
        {"r0": {"blocker": "success", "wait": "deferred"}, "r1": {"submit": "failed"}}, status_changes
    )
    kubesim.clear_requests()

    found = janitor(queues, states)

    assert [(f["name"], f["result"]) for f in found] == [(orphan["name"], "deleted")]
    assert deletes_of(kubesim, orphan["name"]) == [409, 200], "refused on the old version, then re-judged"
    wait_for(lambda: phase_of(queues, orphan["uid"]) == "gone")


def test_an_orphan_adopted_before_its_deletion_is_left_to_the_task_that_adopted_it(
    kubesim, queues, rayjob_body, task_context
):
    orphan = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")

    def a_retry_adopts_it(states: AirflowStates) -> None:
        # What SubmitRayJobOperator.submit does for try 2: re-annotate the RayJob as its own.
        from kueue_ray.hook import RayJobHook
        from kueue_ray.submitting import task_identity

        rayjob = next(j for j in queues.rayjobs() if j["metadata"]["uid"] == orphan["uid"])
        retry = task_context("submit", run_id="r1", try_number=2)
        RayJobHook().claim_rayjob(rayjob, task_identity(retry))
        states.runs["r1"] = {"submit": "running"}

    states = RacingAirflowStates({"r1": {"submit": "failed"}}, a_retry_adopts_it)
    kubesim.clear_requests()

    [record] = janitor(queues, states)

    assert record["result"].startswith("not deleted: it changed since it was read and a task may wait")
    assert deletes_of(kubesim, orphan["name"]) == [409]
    [rayjob] = queues.rayjobs()
    assert not rayjob["metadata"].get("deletionTimestamp")


def test_a_deletion_whose_answer_was_lost_is_reported_done(kubesim, queues, rayjob_body, task_context):
    orphan = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")
    wait_for(lambda: running_steadily(queues, orphan["uid"]))
    # Another controller's finalizer keeps the deleted RayJob around, so the retry finds it terminating.
    [rayjob] = queues.rayjobs()
    held = [*rayjob["metadata"].get("finalizers", []), "example.com/hold"]
    patch = {"metadata": {"finalizers": held}}
    queues.custom.patch_namespaced_custom_object(
        "ray.io", "v1", queues.namespace, "rayjobs", orphan["name"], patch
    )
    kubesim.refuse(
        500, verbs=["delete"], resources=["rayjobs.ray.io"], namespace=queues.namespace, count=1, served=True
    )
    kubesim.clear_requests()
    try:
        found = janitor(queues, AirflowStates({"r1": {"submit": "failed"}}))
    finally:
        kubesim.reset_faults()

    assert [(f["name"], f["result"]) for f in found] == [(orphan["name"], "deleted")]
    # The retry met the deletion the lost answer had started: the version it judged was gone.
    assert deletes_of(kubesim, orphan["name"]) == [500, 409]
    [terminating] = queues.rayjobs()
    assert terminating["metadata"]["deletionTimestamp"]
    release = {
        "metadata": {
            "finalizers": [f for f in terminating["metadata"]["finalizers"] if f != "example.com/hold"]
        }
    }
    queues.custom.patch_namespaced_custom_object(
        "ray.io", "v1", queues.namespace, "rayjobs", orphan["name"], release
    )
    wait_for(lambda: phase_of(queues, orphan["uid"]) == "gone")


def test_another_deployments_rayjobs_are_never_judged_even_while_they_run(
    queues, rayjob_body, task_context, monkeypatch
):
    """Staging and prod share the namespace and the queues; staging's run does not exist in prod's
    metadata database, which must not make its RayJob an orphan for prod's janitor."""
    import kueue_ray.deployment

    with monkeypatch.context() as staging_env:
        staging_env.setenv("AIRFLOW__KUEUE_RAY__DEPLOYMENT", "staging")
        kueue_ray.deployment.current.cache_clear()
        staging = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="r1"), "submit")
    kueue_ray.deployment.current.cache_clear()
    wait_for(lambda: running_steadily(queues, staging["uid"]))
    ours = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="gone"), "submit")

    found = janitor(queues, AirflowStates({}))  # this deployment has no DAG run at all

    assert [(f["name"], f["result"]) for f in found] == [(ours["name"], "deleted")]
    assert phase_of(queues, staging["uid"]) == "Running"
