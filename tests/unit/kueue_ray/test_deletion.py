"""Delete decisions shared by the synchronous and the asynchronous hook, and how their outcomes read."""

import json

from kueue_ray.deletion import (
    KEPT_CHANGING,
    DeleteOutcome,
    DeleteResult,
    while_owned,
    while_waiting,
)
from kueue_ray.naming import AirflowIdentity, Waiter

OWNER = AirflowIdentity(dag_id="d", task_id="t", run_id="r", try_number=1, map_index=-1)


def rayjob(uid: str, annotations: dict | None = None) -> dict:
    return {"metadata": {"uid": uid, "resourceVersion": "7", "annotations": annotations or {}}}


def test_outcomes_read_as_the_plain_words_logs_and_the_janitor_xcom_show():
    assert [str(DeleteOutcome(r)) for r in DeleteResult if r is not DeleteResult.NOT_DELETED] == [
        "deleted",
        "gone",
        "conflict",
    ]
    assert str(DeleteOutcome.not_deleted("it finished")) == "not deleted: it finished"
    assert str(KEPT_CHANGING) == "not deleted: it kept changing while deciding"
    assert DeleteResult.GONE == "gone" and json.dumps(DeleteResult.GONE) == '"gone"'


def test_while_owned_deletes_the_read_version_only_while_the_try_owns_it():
    rule = while_owned(OWNER)
    assert rule.decide(None, "u1").outcome == DeleteOutcome(DeleteResult.GONE)
    assert rule.decide(rayjob("u2", OWNER.annotations()), "u1").outcome == DeleteOutcome(DeleteResult.GONE)
    newer = AirflowIdentity(**{**vars(OWNER), "try_number": 2})
    assert rule.decide(rayjob("u1", newer.annotations()), "u1").outcome == DeleteOutcome(
        DeleteResult.CONFLICT
    )
    go = rule.decide(rayjob("u1", OWNER.annotations()), "u1")
    assert (go.outcome, go.resource_version) == (None, "7")
    assert rule.settled(DeleteResult.CONFLICT) is None, "a conflict is read and decided again"
    assert rule.settled(DeleteResult.DELETED) == DeleteOutcome(DeleteResult.DELETED)
    assert rule.exhausted == DeleteOutcome(DeleteResult.CONFLICT)


def test_while_waiting_says_why_it_leaves_a_rayjob_alone():
    rule = while_waiting(OWNER)
    waited = {**OWNER.annotations(), **_waiter_annotations(OWNER)}
    assert rule.decide(rayjob("u1", waited), "u1").resource_version == "7"
    foreign = rule.decide(rayjob("u1"), "u1").outcome
    assert str(foreign) == "not deleted: it was not created by an Airflow task"
    assert rule.exhausted is KEPT_CHANGING


def _waiter_annotations(identity: AirflowIdentity) -> dict[str, str]:
    from kueue_ray.naming import WAITER_ANNOTATION

    return {WAITER_ANNOTATION: Waiter.of(identity).stamp()}
