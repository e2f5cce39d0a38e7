"""Refusals in a task log's words, and what a refused deletion comes to."""

from __future__ import annotations

import json
from types import SimpleNamespace

from kueue_ray.deletion import after_conflict
from kueue_ray.hook import CONFLICT, DELETED, GONE
from kueue_ray.kube.errors import api_error, can_i, describe_error, retry_after_seconds


def answer(status: int, body, headers=None) -> SimpleNamespace:
    """What both clients' ApiException carry."""
    return SimpleNamespace(status=status, reason="Forbidden", body=body, headers=headers or {})


def test_the_status_body_is_read_for_the_api_servers_own_words():
    body = json.dumps(
        {
            "kind": "Status",
            "reason": "Forbidden",
            "code": 403,
            "message": 'rayjobs.ray.io is forbidden: User "u"',
        }
    )
    exc = answer(403, body.encode())
    assert api_error(exc) == (403, "Forbidden", 'rayjobs.ray.io is forbidden: User "u"')
    assert describe_error(exc) == '403 Forbidden: rayjobs.ray.io is forbidden: User "u"'


def test_a_plain_text_refusal_and_retry_after():
    # API Priority and Fairness answers 429 with text, not a Status.
    exc = answer(429, "Too many requests, please try again later.\n", {"Retry-After": "3"})
    assert api_error(exc)[2] == "Too many requests, please try again later."
    assert retry_after_seconds(exc) == 3.0
    assert retry_after_seconds(answer(500, "")) is None
    assert describe_error(ConnectionResetError("peer reset\nmore")) == "ConnectionResetError: peer reset"


def test_can_i_names_the_check():
    assert can_i("watch", "rayjobs.ray.io", "ray") == "kubectl auth can-i watch rayjobs.ray.io -n ray"


def rayjob(uid: str, *, deleting: bool = False) -> dict:
    metadata = {"uid": uid}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata}


def test_a_deletion_refused_by_its_preconditions_is_done_when_the_rayjob_is_gone_or_going():
    assert after_conflict(None, "u1") == GONE
    assert after_conflict(rayjob("u2"), "u1") == GONE, "the name is another object's: ours is gone"
    assert after_conflict(rayjob("u1", deleting=True), "u1") == DELETED, "a retry after a lost answer"
    assert after_conflict(rayjob("u1"), "u1") == CONFLICT, "it only changed: decide again"
