"""The janitor's retention rule: which finished RayJobs may be deleted, and never one whose result a task
may still collect."""

import doctest
from datetime import UTC, datetime, timedelta

import pytest
from kueue_ray import retention as retention_module
from kueue_ray.naming import WAITER_ANNOTATION, AirflowIdentity
from kueue_ray.retention import expiry_reason, needs_retention_decision, parse_retention_days, past_retention

OWNER = AirflowIdentity(dag_id="train", task_id="submit", run_id="manual__1", try_number=1, deployment="prod")
LEGACY = AirflowIdentity(dag_id="train", task_id="submit", run_id="manual__1", try_number=1)
"""Created before RayJobs carried their deployment: it may be another deployment's."""
ENDED = "2026-11-01T00:00:00Z"
WEEK = timedelta(days=7)


def rayjob(*, deployment="Complete", end=ENDED, waiter=None, deleting=False, identity=OWNER, created=None):
    annotations = identity.annotations() if identity else {}
    if waiter:
        annotations[WAITER_ANNOTATION] = waiter
    metadata = {"name": "train-submit-0123456789", "namespace": "ray", "annotations": annotations}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    if created:
        metadata["creationTimestamp"] = created
    status = {"jobDeploymentStatus": deployment}
    if end:
        status["endTime"] = end
    return {"metadata": metadata, "status": status}


def after(days: float) -> datetime:
    return datetime(2026, 11, 1, tzinfo=UTC) + timedelta(days=days)


def judge(job, *, now=None, retention=WEEK, run_state="success", states=None):
    return expiry_reason(
        job,
        now=now or after(8),
        retention=retention,
        run_state=run_state,
        task_states={"submit": "success"} if states is None else states,
    )


def test_a_finished_rayjob_older_than_the_retention_whose_task_ended_is_expired():
    assert judge(rayjob()) == (
        "finished (Complete) 8 d ago, longer than the retention of 7 d, and its task submit ended success"
    )
    assert judge(rayjob(deployment="Failed"), states={"submit": "failed"}) is not None


def test_one_finished_less_than_the_retention_ago_is_kept_whatever_airflow_says():
    assert judge(rayjob(), now=after(6.99)) is None
    assert judge(rayjob(), now=after(6.99), run_state=None) is None
    assert judge(rayjob(), now=after(7)) is not None, "exactly the retention: due"


@pytest.mark.parametrize(
    "state", ["running", "deferred", "up_for_retry", "up_for_reschedule", "queued", "scheduled", None]
)
def test_a_task_that_may_still_collect_the_result_keeps_its_rayjob(state):
    assert judge(rayjob(), states={"submit": state}) is None
    waited = rayjob(waiter="wait/-1/1")
    assert judge(waited, states={"submit": "success", "wait": state}) is None


@pytest.mark.parametrize("run_state", ["running", "queued"])
def test_a_dag_run_still_running_keeps_its_rayjobs(run_state):
    """A downstream sensor of the run may not have started (nor registered as waiter) yet."""
    assert judge(rayjob(), run_state=run_state) is None


def test_the_registered_waiter_not_the_submitter_decides():
    waited = rayjob(waiter="wait/-1/1")
    assert judge(waited, states={"submit": "success", "wait": "success"}).endswith(
        "its task wait ended success"
    )
    assert judge(waited, states={"submit": "success"}).endswith(
        "its task wait no longer exists in DAG run manual__1"
    )


def test_a_deleted_dag_run_leaves_nothing_to_collect():
    assert judge(rayjob(), run_state=None, states={}) == (
        "finished (Complete) 8 d ago, longer than the retention of 7 d, and its DAG run train / manual__1 "
        "no longer exists"
    )


def test_active_deleting_foreign_or_unmeasurable_rayjobs_are_never_judged():
    for job in (
        rayjob(deployment="Running"),
        rayjob(deployment="Suspended"),
        rayjob(deleting=True),
        rayjob(identity=None),
        rayjob(end=None),  # no endTime: the age cannot be measured
    ):
        assert judge(job) is None
        assert not needs_retention_decision(job) or not past_retention(job, now=after(8), retention=WEEK)


def test_a_validation_failure_without_end_time_ages_from_its_creation():
    job = rayjob(deployment="ValidationFailed", end=None, created=ENDED)
    assert judge(job) is not None
    assert judge(job, now=after(1)) is None


def test_units_in_the_reason_follow_the_retention():
    assert "retention of 2 s" in judge(rayjob(), retention=timedelta(seconds=2))
    assert "retention of 12 h" in judge(rayjob(), retention=timedelta(hours=12))
    assert "retention of 1.5 d" in judge(rayjob(), retention=timedelta(days=1.5))


@pytest.mark.parametrize("value,days", [(7, 7), ("0.5", 0.5), (0, 0), ("3", 3)])
def test_retention_days_accepts_numbers_and_their_text(value, days):
    assert parse_retention_days(value) == timedelta(days=days)


@pytest.mark.parametrize("value", ["-1", "a week", None, True, "nan", "inf", [7]])
def test_a_bad_retention_is_refused_naming_the_option_and_the_fix(value):
    with pytest.raises(ValueError, match=r"\[kueue_ray\] retention_days=.* a number >= 0"):
        parse_retention_days(value, source="[kueue_ray] retention_days")


def test_the_module_examples_hold():
    assert doctest.testmod(retention_module).failed == 0


def test_the_janitor_takes_its_argument_then_the_airflow_option_then_the_default(monkeypatch):
    from kueue_ray.janitor import DeleteOrphanedRayJobsOperator

    monkeypatch.delenv("AIRFLOW__KUEUE_RAY__RETENTION_DAYS", raising=False)
    assert DeleteOrphanedRayJobsOperator(task_id="j")._retention() == timedelta(days=7)
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RETENTION_DAYS", "2.5")
    assert DeleteOrphanedRayJobsOperator(task_id="j")._retention() == timedelta(days=2.5)
    assert DeleteOrphanedRayJobsOperator(task_id="j", retention_days=1)._retention() == timedelta(days=1)
    assert DeleteOrphanedRayJobsOperator(task_id="j", retention_days="None")._retention() == timedelta(
        days=2.5
    )
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__RETENTION_DAYS", "a week")
    with pytest.raises(ValueError, match=r"\[kueue_ray\] retention_days='a week' is not a retention period"):
        DeleteOrphanedRayJobsOperator(task_id="j")._retention()


def test_a_legacy_rayjob_expires_only_on_positive_evidence_from_this_deployment():
    """A run or task missing here says nothing of a RayJob that may be another deployment's."""
    legacy = rayjob(identity=LEGACY)
    assert judge(legacy, run_state=None, states={}) is None
    assert judge(legacy, states={"other": "success"}) is None
    assert judge(legacy).endswith("and its task submit ended success")
