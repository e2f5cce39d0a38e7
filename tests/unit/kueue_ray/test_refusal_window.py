"""The decisions behind "a permanent refusal ends the task": when a row of 401/403 has lasted long enough,
what the failure says, which 404 means a missing API, and whose token it is."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from kueue_ray.kube.errors import (
    can_i,
    may_be_missing_api,
    not_served_message,
    read_of,
    reading,
    refusal_message,
)
from kueue_ray.kube.refusals import DEFAULT_REFUSAL_TIMEOUT, Denial, RefusalWindow, Refused, refusal_timeout
from kueue_ray.tokens import encode, expiry, identity_of, lifetime_problem, subject

FORBIDDEN = Denial("list", "workloads.kueue.x-k8s.io", "ray", 403, "403 Forbidden: no")


def test_a_refusal_that_clears_within_the_window_costs_nothing():
    window = RefusalWindow(120.0)
    assert window.refused(FORBIDDEN, now=0.0) is True, "the first refusal of a row is news"
    assert window.refused(FORBIDDEN, now=60.0) is False
    window.cleared()
    assert window.refused(FORBIDDEN, now=100.0) is True, "a new row starts from scratch"

    assert not window.expired()
    assert window.remaining(130.0) == 90.0


def test_a_refusal_expires_the_window_only_when_it_is_met_again_at_its_end():
    window = RefusalWindow(120.0)
    window.refused(FORBIDDEN, now=10.0)
    window.refused(FORBIDDEN, now=70.0)
    assert not window.expired(), "nobody asked since 70 s: the grant may be back"

    window.refused(FORBIDDEN, now=130.0)
    assert window.expired()
    assert window.last == FORBIDDEN
    assert RefusalWindow(120.0).remaining(0.0) is None, "nothing refused: no deadline"


def test_retries_are_paced_to_ask_again_when_the_window_ends():
    window = RefusalWindow(20.0)
    assert window.pace(30.0, now=5.0) == 30.0, "nothing refused: the backoff as it is"
    window.refused(FORBIDDEN, now=0.0)
    assert window.pace(30.0, now=12.0) == 8.0, "a 30 s backoff must not stretch a 20 s window"
    assert window.pace(2.0, now=12.0) == 2.0
    assert window.pace(30.0, now=25.0) == 30.0, "past the end: the next answer decides anyway"


def test_only_401_and_403_are_refusals():
    def exc(status):
        return SimpleNamespace(status=status, reason="R", body=None, headers={})

    assert Denial.of("get", "rayjobs.ray.io", "ray", exc(403)).status == 403
    assert Denial.of("get", "rayjobs.ray.io", "ray", exc(401)).status == 401
    assert Denial.of("get", "rayjobs.ray.io", "ray", exc(503)) is None
    assert Denial.of("watch", "rayjobs.ray.io", "ray", Refused("watch", 403, "Forbidden", "no")).message == (
        "403 Forbidden: no"
    )


def test_the_failure_names_verb_resource_namespace_identity_and_the_check():
    message = refusal_message(
        "list",
        "workloads.kueue.x-k8s.io",
        "ray",
        status=403,
        said="403 Forbidden: denied",
        identity="system:serviceaccount:ray:airflow",
        conn_id="kubernetes_default",
        seconds=90,
    )

    assert (
        "refused to list workloads.kueue.x-k8s.io in namespace ray to system:serviceaccount:ray:airflow"
        in message
    )
    assert "for 90s in a row" in message
    assert (
        "kubectl auth can-i list workloads.kueue.x-k8s.io -n ray --as=system:serviceaccount:ray:airflow"
        in message
    )
    assert "refusal_timeout" in message


def test_a_401_says_to_renew_the_credentials_and_an_unknown_identity_is_said_so():
    message = refusal_message(
        "watch", "rayjobs.ray.io", "ray", status=401, said="401 Unauthorized", identity=None, conn_id="k"
    )
    assert "to the connection's user (connection k)" in message
    assert "renew the credentials" in message
    assert "--as" not in message
    assert can_i("get", "clusterqueues.kueue.x-k8s.io", None) == (
        "kubectl auth can-i get clusterqueues.kueue.x-k8s.io --all-namespaces"
    )


def test_not_served_names_the_api_and_what_to_install():
    assert not_served_message("kueue.x-k8s.io", "v1beta2") == (
        "Kueue API kueue.x-k8s.io/v1beta2 is not served by this cluster: install Kueue ≥ v0.19"
    )
    assert not_served_message("ray.io", "v1") == (
        "KubeRay API ray.io/v1 is not served by this cluster: install KubeRay ≥ v1.7"
    )


def test_only_a_404_that_names_no_object_may_be_a_missing_api():
    def not_found(body):
        return SimpleNamespace(status=404, reason="Not Found", body=body, headers={})

    missing_object = json.dumps(
        {"kind": "Status", "code": 404, "reason": "NotFound", "details": {"name": "rj", "kind": "rayjobs"}}
    )
    unknown_resource = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound", "message": "x"})
    assert may_be_missing_api(not_found("404 page not found\n")), "the API server's not-found handler"
    assert may_be_missing_api(not_found(unknown_resource))
    assert not may_be_missing_api(not_found(missing_object))
    assert not may_be_missing_api(SimpleNamespace(status=403, body="404 page not found"))


def test_an_error_is_marked_with_the_read_it_came_from():
    with (
        pytest.raises(KeyError) as raised,
        reading("list", "workloads.kueue.x-k8s.io", "kueue.x-k8s.io", "v1beta2"),
    ):
        raise KeyError("x")
    assert read_of(raised.value) == ("list", "workloads.kueue.x-k8s.io", "kueue.x-k8s.io", "v1beta2")


def test_a_service_account_token_names_its_user_and_expiry():
    now = datetime(2026, 12, 4, tzinfo=UTC)
    token = encode({"sub": "system:serviceaccount:airflow:airflow", "exp": int(now.timestamp()) + 600})

    assert subject(token) == "system:serviceaccount:airflow:airflow"
    assert expiry(f"Bearer {token}") == now + timedelta(seconds=600)
    assert lifetime_problem(token, now) == ("expiring", "expires in 10m (2026-12-04T00:10:00Z)")
    assert identity_of(SimpleNamespace(api_key={"BearerToken": f"Bearer {token}"})) == (
        "system:serviceaccount:airflow:airflow"
    )
    assert identity_of(SimpleNamespace(api_key={"BearerToken": "Bearer opaque"})) is None
    assert subject("a.b.c") is None


def test_the_refusal_timeout_option(monkeypatch):
    monkeypatch.delenv("AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT", raising=False)
    assert refusal_timeout() == DEFAULT_REFUSAL_TIMEOUT
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT", "20")
    assert refusal_timeout() == 20.0
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="refusal_timeout: 'soon' is not a number of seconds"):
        refusal_timeout()
    for never_positive in ("0", "-5", "nan"):  # 0 would give up on the first refusal; nan compares false
        monkeypatch.setenv("AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT", never_positive)
        with pytest.raises(
            ValueError, match=rf"refusal_timeout: '{never_positive}' is not .* > 0\. Fix: set it"
        ):
            refusal_timeout()
