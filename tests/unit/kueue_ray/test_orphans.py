"""The janitor's rule: which RayJobs no Airflow task will ever wait for again."""

import pytest
from kueue_ray.naming import WAITER_ANNOTATION, AirflowIdentity
from kueue_ray.orphans import janitor_selectors, needs_decision, orphan_reason, state_key

OWNER = AirflowIdentity(dag_id="train", task_id="submit", run_id="manual__1", try_number=1, deployment="prod")
LEGACY = AirflowIdentity(dag_id="train", task_id="submit", run_id="manual__1", try_number=1)
"""Created before RayJobs carried their deployment."""


def rayjob(*, waiter=None, deployment="Running", deleting=False, identity=OWNER):
    annotations = identity.annotations() if identity else {}
    if waiter:
        annotations[WAITER_ANNOTATION] = waiter
    metadata = {"name": "train-submit-0123456789", "namespace": "ray", "annotations": annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    return {"metadata": metadata, "status": {"jobDeploymentStatus": deployment}}


@pytest.mark.parametrize("state", ["failed", "upstream_failed", "skipped", "removed"])
def test_a_submitting_task_that_ended_without_success_and_no_waiter_leaves_an_orphan(state):
    reason = orphan_reason(rayjob(), run_exists=True, task_states={"submit": state})
    assert reason == f"the task that submitted it, submit, ended {state} and no task waits for it"


@pytest.mark.parametrize(
    "state", ["running", "deferred", "up_for_retry", "up_for_reschedule", "queued", "scheduled", None]
)
def test_a_task_that_may_still_come_back_keeps_its_rayjob(state):
    assert orphan_reason(rayjob(), run_exists=True, task_states={"submit": state}) is None
    waited = rayjob(waiter="wait/-1/1")
    assert orphan_reason(waited, run_exists=True, task_states={"submit": "success", "wait": state}) is None


def test_a_fire_and_forget_submission_is_left_alone():
    """submit(wait_for_completion=False) succeeded and no sensor registered: handed on, not orphaned."""
    assert orphan_reason(rayjob(), run_exists=True, task_states={"submit": "success"}) is None


@pytest.mark.parametrize("state", ["failed", "success", "upstream_failed"])
def test_a_registered_waiter_that_ended_leaves_an_orphan(state):
    reason = orphan_reason(
        rayjob(waiter="wait/-1/2"), run_exists=True, task_states={"submit": "success", "wait": state}
    )
    assert reason == f"the task waiting for it, wait, ended {state} without deleting it"


def test_a_deleted_dag_run_or_task_leaves_an_orphan():
    assert orphan_reason(rayjob(), run_exists=False, task_states={}) == (
        "its DAG run train / manual__1 no longer exists"
    )
    assert "submit, no longer exists in DAG run manual__1" in orphan_reason(
        rayjob(), run_exists=True, task_states={"other": "success"}
    )
    assert "wait, no longer exists" in orphan_reason(
        rayjob(waiter="wait/-1/1"), run_exists=True, task_states={"submit": "success"}
    )


def test_a_legacy_rayjob_is_an_orphan_only_on_positive_evidence_from_this_deployment():
    """It may be another deployment's: a run or task missing here says nothing about it."""
    legacy = rayjob(identity=LEGACY)
    assert orphan_reason(legacy, run_exists=False, task_states={}) is None
    assert orphan_reason(legacy, run_exists=True, task_states={"other": "success"}) is None
    assert orphan_reason(rayjob(identity=LEGACY, waiter="wait/-1/1"), run_exists=True, task_states={}) is None
    assert orphan_reason(legacy, run_exists=True, task_states={"submit": "failed"}) == (
        "the task that submitted it, submit, ended failed and no task waits for it"
    )


def test_the_janitor_looks_only_at_its_own_deployments_rayjobs_and_legacy_ones():
    assert needs_decision(rayjob(), "prod")
    assert needs_decision(rayjob(identity=LEGACY), "prod")
    staging = AirflowIdentity("train", "submit", "manual__1", -1, 1, "staging")
    assert not needs_decision(rayjob(identity=staging), "prod")
    ours, legacy = janitor_selectors("prod")
    assert (
        ours == "app.kubernetes.io/managed-by=airflow-kueue-ray,kueue-ray.airflow.apache.org/deployment=prod"
    )
    assert legacy == "app.kubernetes.io/managed-by=airflow-kueue-ray,!kueue-ray.airflow.apache.org/deployment"


def test_mapped_tasks_are_matched_by_map_index():
    mapped = AirflowIdentity(dag_id="train", task_id="submit", run_id="manual__1", map_index=3)
    job = rayjob(identity=mapped, waiter="wait/3/1")
    states = {"submit_3": "success", "wait_3": "deferred", "wait_4": "failed"}
    assert orphan_reason(job, run_exists=True, task_states=states) is None
    assert orphan_reason(job, run_exists=True, task_states={**states, "wait_3": "failed"}) is not None
    assert state_key("wait", -1) == "wait" and state_key("wait", 3) == "wait_3"


def test_only_active_rayjobs_created_by_airflow_are_judged():
    assert needs_decision(rayjob())
    assert needs_decision(rayjob(deployment=""))  # still suspended in the queue
    assert not needs_decision(rayjob(deployment="Complete"))
    assert not needs_decision(rayjob(deployment="Failed"))
    assert not needs_decision(rayjob(deleting=True))
    assert not needs_decision(rayjob(identity=None))
