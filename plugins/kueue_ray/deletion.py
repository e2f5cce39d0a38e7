"""Deciding whether a RayJob or RayService may be deleted, and what a deletion came to.

Pure: no I/O. The synchronous hook (operators, sensors in poke mode, the janitor) and the asynchronous
hook (triggers) read and delete through different clients, but decide alike; the decisions live here so
that both follow the same rules:

* a deletion always carries the uid, and the resourceVersion it was decided on, as preconditions;
* a 409 on it is judged from the object as it is now (``after_conflict``);
* a rule (``DeleteRule``) says when the object read must be left alone, and what to answer when it keeps
  changing between the read and the delete.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from kueue_ray.naming import AirflowIdentity, Waiter

DELETE_DECISIONS = 5
"""How often a delete-if-still-ours reads and decides again after its delete met a change (409)."""


class DeleteResult(StrEnum):
    """What one deletion came to; its value is what logs and the janitor's XCom show."""

    DELETED = "deleted"
    """Deleted now, or already being deleted."""
    GONE = "gone"
    """Not there (404), or the name belongs to another object now: ours is gone."""
    CONFLICT = "conflict"
    """It changed since the caller read it: read it and decide again."""
    NOT_DELETED = "not deleted"
    """Left alone on purpose; ``DeleteOutcome.why`` says why."""


def refused_delete(status: int | None) -> DeleteResult | None:
    """What a delete the API server refused with HTTP ``status`` came to, for both hooks' clients: GONE
    (404), CONFLICT (409), or None when the refusal is an error to raise.

    >>> refused_delete(404), refused_delete(409), refused_delete(403)
    (<DeleteResult.GONE: 'gone'>, <DeleteResult.CONFLICT: 'conflict'>, None)
    """
    if status is None:
        return None
    return {404: DeleteResult.GONE, 409: DeleteResult.CONFLICT}.get(status)


@dataclass(frozen=True)
class DeleteOutcome:
    """A ``DeleteResult`` with the reason it was left alone, if it was. ``str()`` is the text logs and
    the janitor's XCom show: "deleted", "gone", "conflict" or "not deleted: <why>"."""

    result: DeleteResult
    why: str | None = None

    def __str__(self) -> str:
        return str(self.result) if self.why is None else f"{self.result}: {self.why}"

    @classmethod
    def not_deleted(cls, why: str) -> DeleteOutcome:
        return cls(DeleteResult.NOT_DELETED, why)


KEPT_CHANGING = DeleteOutcome.not_deleted("it kept changing while deciding")


def delete_options(uid: str, resource_version: str | None) -> dict:
    """The DeleteOptions body: exactly this object (uid), at this version when given; dependents
    (RayCluster, submitter Job) follow by garbage collection in the background."""
    preconditions = {"uid": uid}
    if resource_version is not None:
        preconditions["resourceVersion"] = resource_version
    return {"preconditions": preconditions, "propagationPolicy": "Background"}


def after_conflict(current: dict | None, uid: str) -> DeleteResult:
    """What a deletion answered 409 (its preconditions no longer hold) comes to, from the object as it is
    now: GONE when it no longer exists or the name is another object's, DELETED when it is already being
    deleted (by us: a retry after a lost answer, or by someone else), CONFLICT when it only changed."""
    if current is None or current["metadata"].get("uid") != uid:
        return DeleteResult.GONE
    if current["metadata"].get("deletionTimestamp"):
        return DeleteResult.DELETED
    return DeleteResult.CONFLICT


def foreign_run(rayjob: dict, waiter: AirflowIdentity) -> str | None:
    """Why the sensor try ``waiter`` must never delete ``rayjob`` (another DAG run, or not created by
    Airflow at all); None when it belongs to the sensor's own DAG run and map index."""
    submitter = AirflowIdentity.from_annotations(rayjob["metadata"].get("annotations"))
    if submitter is None:
        return "it was not created by an Airflow task"
    if submitter.deployment != waiter.deployment and submitter.deployment:
        return f"it belongs to another Airflow deployment, {submitter.deployment}"
    if (submitter.dag_id, submitter.run_id, submitter.map_index) != (
        waiter.dag_id,
        waiter.run_id,
        waiter.map_index,
    ):
        return (
            f"it belongs to DAG {submitter.dag_id} run {submitter.run_id} (map index {submitter.map_index})"
        )
    return None


def not_waiting_reason(rayjob: dict, waiter: AirflowIdentity) -> str | None:
    """Why a killed sensor try leaves ``rayjob`` alone; None when it may delete it: same DAG run, and the
    RayJob still names this very try as its waiter (a Clear's newer try re-registers before the old try's
    on_kill runs)."""
    foreign = foreign_run(rayjob, waiter)
    if foreign is not None:
        return foreign
    registered, this_try = Waiter.from_annotations(rayjob["metadata"].get("annotations")), Waiter.of(waiter)
    if registered != this_try:
        return f"its waiter is now {registered.stamp() if registered else 'nobody'}, not {this_try.stamp()}"
    return None


@dataclass(frozen=True)
class Decision:
    """Either settled without deleting (``outcome``), or: delete at ``resource_version``."""

    outcome: DeleteOutcome | None = None
    resource_version: str | None = None


@dataclass(frozen=True)
class DeleteRule:
    """When a delete-if-still-ours leaves the object alone (``refuse``: the outcome to answer, or None to
    delete it), and what it answers when the object kept changing between read and delete."""

    refuse: Callable[[dict], DeleteOutcome | None]
    exhausted: DeleteOutcome

    def decide(self, current: dict | None, uid: str) -> Decision:
        """The decision on the object as just read (None: not there)."""
        if current is None or current["metadata"].get("uid") != uid:
            return Decision(DeleteOutcome(DeleteResult.GONE))
        refused = self.refuse(current)
        if refused is not None:
            return Decision(refused)
        return Decision(resource_version=current["metadata"].get("resourceVersion"))

    @staticmethod
    def settled(result: DeleteResult) -> DeleteOutcome | None:
        """The outcome of a deletion made on a decision; None on CONFLICT: read it and decide again."""
        return None if result is DeleteResult.CONFLICT else DeleteOutcome(result)


def while_owned(owner: AirflowIdentity) -> DeleteRule:
    """Delete only while ``owner`` (one task try) still owns it: a newer try that adopted the object
    re-annotated it, and its job must not be killed. CONFLICT when it is no longer ``owner``'s."""

    def refuse(current: dict) -> DeleteOutcome | None:
        holder = AirflowIdentity.from_annotations(current["metadata"].get("annotations"))
        return None if holder == owner else DeleteOutcome(DeleteResult.CONFLICT)

    return DeleteRule(refuse, exhausted=DeleteOutcome(DeleteResult.CONFLICT))


def while_waiting(waiter: AirflowIdentity) -> DeleteRule:
    """Delete for a killed sensor try only while it is that try's to delete (``not_waiting_reason``)."""

    def refuse(current: dict) -> DeleteOutcome | None:
        reason = not_waiting_reason(current, waiter)
        return None if reason is None else DeleteOutcome.not_deleted(reason)

    return DeleteRule(refuse, exhausted=KEPT_CHANGING)


DEFERRED = "deferred"


def still_deferred(task_state: str | None) -> str | None:
    """Why a trigger told it was cancelled by a user action must still not delete; None when its task has
    let go (failed, success, cleared to a new try that is not deferred, gone).

    Airflow 3.3's triggerer cancels, with that same "user action" message, every trigger the database no
    longer assigns to it. A triggerer that stalled past ``[triggerer] triggerer_health_check_threshold``
    and recovered therefore "kills" the triggers another triggerer has meanwhile taken over: their task
    instances are still deferred, and a healthy triggerer waits for their RayJobs.
    """
    if task_state == DEFERRED:
        return (
            "its task instance is still deferred, so another triggerer now waits for it (this triggerer "
            "lost the trigger after missing its heartbeat); a user's kill, mark-failed or clear ends the "
            "deferral first"
        )
    return None
