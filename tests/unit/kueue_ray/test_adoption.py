"""What a try does with the RayJobs earlier tries of its task instance left: adopt the unfinished, never
run a finished one again, memoize only when asked."""

import logging

from kueue_ray.adoption import Choice, Earlier, plan
from kueue_ray.naming import AirflowIdentity
from kueue_ray.phases import Phase
from kueue_ray.status import Observation

THIS_TRY = AirflowIdentity("train", "submit", "manual__1", -1, 3, "prod")


def earlier(try_number: int, phase: Phase, *, deployment="prod", deleting=False, name=None) -> Earlier:
    holder = AirflowIdentity("train", "submit", "manual__1", -1, try_number, deployment)
    metadata = {"name": name or f"train-submit-{try_number}", "namespace": "ray", "uid": f"uid-{try_number}"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    terminal = phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.DEACTIVATED)
    return Earlier({"metadata": metadata}, holder, Observation(phase, terminal, "", "it is what it is"))


def test_an_unfinished_rayjob_of_an_earlier_try_is_adopted():
    decided = plan(THIS_TRY, [earlier(1, Phase.FAILED), earlier(2, Phase.RUNNING)])
    assert decided.choice is Choice.ADOPT and decided.chosen.holder.try_number == 2
    assert "Adopting RayJob ray/train-submit-2 (uid uid-2), submitted by try 2" in decided.lines[0][1]


def test_finished_rayjobs_are_never_run_again_and_the_log_says_a_new_one_is_submitted():
    decided = plan(THIS_TRY, [earlier(1, Phase.SUCCEEDED), earlier(2, Phase.FAILED)])
    assert decided.choice is Choice.SUBMIT and decided.chosen is None
    assert [level for level, _ in decided.lines] == [logging.INFO, logging.INFO]
    assert decided.lines[0][1].startswith(
        "RayJob ray/train-submit-1 of try 1 already ended SUCCEEDED; this try 3 submits a new RayJob"
    )
    assert "reuse_succeeded=True would skip the work" in decided.lines[0][1]
    assert "reuse_succeeded" not in decided.lines[1][1]


def test_memoization_takes_the_latest_success_with_a_warning():
    decided = plan(THIS_TRY, [earlier(1, Phase.SUCCEEDED), earlier(2, Phase.FAILED)], reuse_succeeded=True)
    assert decided.choice is Choice.REUSE and decided.chosen.holder.try_number == 1
    assert decided.lines[0][0] == logging.WARNING


def test_another_deployments_and_deleted_rayjobs_are_not_this_tasks():
    decided = plan(
        THIS_TRY, [earlier(1, Phase.RUNNING, deployment="staging"), earlier(2, Phase.RUNNING, deleting=True)]
    )
    assert decided.choice is Choice.SUBMIT


def test_a_legacy_unfinished_rayjob_of_the_task_instance_is_adopted():
    decided = plan(THIS_TRY, [earlier(1, Phase.QUEUED, deployment="", name="train-submit-legacy")])
    assert (
        decided.choice is Choice.ADOPT and decided.chosen.rayjob["metadata"]["name"] == "train-submit-legacy"
    )


def test_this_trys_own_rayjob_is_taken_whatever_its_phase():
    own = earlier(3, Phase.SUCCEEDED)
    assert plan(THIS_TRY, [earlier(2, Phase.RUNNING), own]).chosen is own
