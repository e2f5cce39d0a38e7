"""Fault injection, refusals, authentication, counters and the request log, as a test or benchmark drives
them over HTTP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim.apiserver.faults import DEFAULT_USER
from kubesim.testing import run_kubesim


def test_error_rate_one_fails_every_api_request_with_a_status(api_faults, api_client):
    core = client.CoreV1Api(api_client)
    api_faults.set_faults(error_rate=1.0)
    with pytest.raises(ApiException) as failed:
        core.list_namespace()
    assert failed.value.status == 500
    assert json.loads(failed.value.body)["reason"] == "InternalError"
    assert api_faults.stats()["requests_total"] > 0  # /kubesim itself is never faulted

    api_faults.reset_faults()
    assert core.list_namespace().items


def test_partial_error_rate_fails_some_requests(api_faults, api_client):
    core = client.CoreV1Api(api_client)
    api_faults.set_faults(error_rate=0.5, seed=7)
    outcomes = []
    for _ in range(40):
        try:
            core.read_namespace("default")
            outcomes.append("ok")
        except ApiException as exc:
            outcomes.append(exc.status)
    assert set(outcomes) == {"ok", 500}


def test_latency_makes_a_short_client_timeout_expire(api_faults, api_client):
    core = client.CoreV1Api(api_client)
    api_faults.set_faults(latency_ms=500)
    with pytest.raises(urllib3.exceptions.MaxRetryError):  # read timeouts, retried, then given up
        core.read_namespace("default", _request_timeout=0.1)
    assert api_faults.set_faults()["latency_ms"] == 0  # an empty POST resets


def test_fault_settings_are_reported_and_validated(api_faults):
    shown = api_faults.set_faults(error_rate=0.25, watch_drop_after_s=3, expire_watches=2)
    assert shown == {
        "error_rate": 0.25,
        "latency_ms": 0.0,
        "watch_drop_after_s": 3.0,
        "expire_watches": 2,
        "rules": [],
        "unserved_groups": [],
        "max_page_size": None,
        "continue_ttl_s": 300.0,
        "clock_offset_s": 0.0,
        "unpullable_images": [],
    }
    with urllib.request.urlopen(api_faults.url + "/kubesim/faults") as response:
        assert json.loads(response.read()) == shown
    with pytest.raises(urllib.error.HTTPError) as not_images:
        api_faults.set_faults(unpullable_images="rayproject/ray:nope")
    assert not_images.value.code == 400

    with pytest.raises(urllib.error.HTTPError) as rejected:
        api_faults.set_faults(error_rate=2)
    assert rejected.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as unknown:
        api_faults.set_faults(explode=True)
    assert unknown.value.code == 400
    for bad_rule in (
        {"code": 418},
        {"code": 403, "verbs": "watch"},
        {"code": 429, "count": 0},
        {"code": 403, "x": 1},
    ):
        with pytest.raises(urllib.error.HTTPError) as rejected_rule:
            api_faults.set_faults(rules=[bad_rule])
        assert rejected_rule.value.code == 400, bad_rule


def test_expire_watches_counts_down(api_faults, api_client):
    core = client.CoreV1Api(api_client)
    api_faults.set_faults(expire_watches=1)
    rv = core.list_namespace().metadata.resource_version
    url = f"{api_faults.url}/api/v1/namespaces?watch=true&timeoutSeconds=1&resourceVersion={rv}"
    with urllib.request.urlopen(url) as response:
        first = response.read().decode()
    with urllib.request.urlopen(url) as response:
        second = response.read().decode()
    assert '"code":410' in first
    assert "ERROR" not in second
    assert api_faults.stats()["watches_opened_total"] >= 1


def test_stats_count_requests_by_verb_and_resource(kubesim_api, api_client, unique_name):
    core = client.CoreV1Api(api_client)
    before = kubesim_api.stats()
    core.create_namespace({"metadata": {"name": unique_name}})
    core.read_namespace(unique_name)
    core.list_namespace()
    after = kubesim_api.stats()

    def delta(key):
        return after["requests"].get(key, 0) - before["requests"].get(key, 0)

    assert (delta("create namespaces"), delta("get namespaces"), delta("list namespaces")) == (1, 1, 1)
    assert after["requests_total"] - before["requests_total"] == 3
    assert after["objects"]["Namespace"] == before["objects"]["Namespace"] + 1
    core.delete_namespace(unique_name)


def test_request_log_names_what_rbac_must_grant(kubesim_api, api_client, unique_name):
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    core.create_namespace({"metadata": {"name": unique_name}})
    kubesim_api.clear_requests()

    custom.list_namespaced_custom_object("ray.io", "v1", unique_name, "rayjobs")
    with pytest.raises(ApiException):
        custom.get_namespaced_custom_object_status("ray.io", "v1", unique_name, "rayjobs", "missing")
    core.create_namespaced_config_map(unique_name, {"metadata": {"name": "named"}})
    generated = core.create_namespaced_config_map(unique_name, {"metadata": {"generateName": "gen-"}})
    with pytest.raises(ApiException):
        core.create_namespaced_config_map(unique_name, {"metadata": {"name": "named"}})

    log = kubesim_api.requests()
    # A create's path names no object: the log names what it made, as an audit log's objectRef does, so a
    # test can tell whose creations it counts.
    assert [
        (r["verb"], r["group"], r["resource"], r["subresource"], r["namespace"], r["name"], r["code"])
        for r in log
    ] == [
        ("list", "ray.io", "rayjobs", "", unique_name, "", 200),
        ("get", "ray.io", "rayjobs", "status", unique_name, "missing", 404),
        ("create", "", "configmaps", "", unique_name, "named", 201),
        ("create", "", "configmaps", "", unique_name, generated.metadata.name, 201),
        ("create", "", "configmaps", "", unique_name, "", 409),
    ]
    kubesim_api.clear_requests()
    assert kubesim_api.requests() == []
    core.delete_namespace(unique_name)


# ----- refusals: what a real API server answers when it says no -----


def _http(url: str, *, token: str | None = None):
    """(status, headers, body) of a GET, whatever the status."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def test_a_refused_watch_is_an_rbac_403_and_the_list_still_works(api_faults, api_client):
    custom = client.CustomObjectsApi(api_client)
    api_faults.refuse(403, verbs=["watch"], resources=["rayjobs.ray.io"])
    base = f"{api_faults.url}/apis/ray.io/v1/namespaces/ray/rayjobs"

    code, headers, body = _http(base + "?watch=true&timeoutSeconds=1")
    assert code == 403
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'rayjobs.ray.io is forbidden: User "system:serviceaccount:ray:airflow" cannot watch '
        'resource "rayjobs" in API group "ray.io" in the namespace "ray"',
        "reason": "Forbidden",
        "details": {"group": "ray.io", "kind": "rayjobs"},
        "code": 403,
    }
    assert custom.list_namespaced_custom_object("ray.io", "v1", "ray", "rayjobs")["items"] == []
    assert (
        _http(f"{api_faults.url}/api/v1/namespaces?watch=true&timeoutSeconds=1")[0] == 200
    )  # another resource
    [rule] = _faults(api_faults)["rules"]
    assert rule["hits"] == 1 and rule["count"] is None, "until cleared"
    assert [
        r["code"] for r in api_faults.requests() if r["verb"] == "watch" and r["resource"] == "rayjobs"
    ] == [403]


def _faults(sim) -> dict:
    with urllib.request.urlopen(sim.url + "/kubesim/faults") as response:
        return json.loads(response.read())


def test_a_counted_rule_refuses_the_next_n_matches_only(api_faults, api_client):
    core = client.CoreV1Api(api_client)
    api_faults.refuse(503, verbs=["get"], resources=["namespaces"], count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as refused:
            core.read_namespace("default")
        assert refused.value.status == 503
        assert json.loads(refused.value.body)["reason"] == "ServiceUnavailable"
    assert core.read_namespace("default").metadata.name == "default"
    assert _faults(api_faults)["rules"] == []


def test_a_timed_rule_ends_by_itself(api_faults, api_client):
    core = client.CoreV1Api(api_client)
    api_faults.refuse(500, resources=["namespaces"], seconds=0.5)
    with pytest.raises(ApiException) as refused:
        core.list_namespace()
    assert json.loads(refused.value.body)["message"] == "Internal error occurred: kubesim injected fault"
    time.sleep(0.6)
    assert core.list_namespace().items


def test_a_rule_without_a_code_serves_its_matches_late(api_faults, api_client):
    """A slow first list (a large namespace, a throttled API server): the next list is served, late; the
    request after it is not held."""
    core = client.CoreV1Api(api_client)
    api_faults.set_faults(
        rules=[{"delay_s": 1.0, "verbs": ["list"], "resources": ["namespaces"], "count": 1}]
    )
    started = time.monotonic()
    assert core.list_namespace().items, "served, not refused"
    assert time.monotonic() - started >= 1.0
    assert core.read_namespace("default").metadata.name == "default"
    assert [r["code"] for r in api_faults.requests()[-2:]] == [200, 200]
    assert _faults(api_faults)["rules"] == [], "its one match taken"
    with pytest.raises(urllib.error.HTTPError) as refused:
        api_faults.set_faults(rules=[{"verbs": ["list"]}])
    assert refused.value.code == 400 and "delay_s > 0" in refused.value.read().decode()


def test_too_many_requests_carries_retry_after(api_faults):
    api_faults.refuse(429, verbs=["list"], retry_after_s=7)
    code, headers, body = _http(f"{api_faults.url}/apis/kueue.x-k8s.io/v1beta2/namespaces/ray/workloads")
    assert (code, headers["Retry-After"]) == (429, "7")
    status = json.loads(body)
    assert (status["reason"], status["details"]) == ("TooManyRequests", {"retryAfterSeconds": 7})


def test_unauthorized_and_forbidden_on_a_named_object(api_faults):
    api_faults.set_faults(
        rules=[
            {"code": 401, "verbs": ["get"], "resources": ["pods/log"]},
            {"code": 403, "verbs": ["get"], "resources": ["clusterqueues.kueue.x-k8s.io"], "user": "alice"},
        ]
    )
    code, _, body = _http(f"{api_faults.url}/api/v1/namespaces/ray/pods/p/log")
    assert (code, json.loads(body)["message"], json.loads(body)["reason"]) == (
        401,
        "Unauthorized",
        "Unauthorized",
    )
    code, _, body = _http(f"{api_faults.url}/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq")
    assert code == 403
    assert json.loads(body)["message"] == (
        'clusterqueues.kueue.x-k8s.io "cq" is forbidden: User "alice" cannot get resource "clusterqueues" '
        'in API group "kueue.x-k8s.io" at the cluster scope'
    )
    assert json.loads(body)["details"] == {"group": "kueue.x-k8s.io", "kind": "clusterqueues", "name": "cq"}


def test_410_ends_a_watch_with_an_error_event_and_refuses_a_list(api_faults):
    api_faults.refuse(410, resources=["configmaps"], count=2)
    code, _, body = _http(
        f"{api_faults.url}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=5"
    )
    assert code == 200, "the API server sends a watch's 410 as an ERROR event"
    event = json.loads(body)
    assert (event["type"], event["object"]["code"], event["object"]["reason"]) == ("ERROR", 410, "Expired")
    assert event["object"]["message"].startswith("too old resource version: 5 (")
    code, _, body = _http(f"{api_faults.url}/api/v1/namespaces/default/configmaps")
    assert (code, json.loads(body)["reason"]) == (410, "Expired")


def test_the_visibility_api_can_be_refused_by_its_subresource(api_faults):
    api_faults.refuse(503, resources=["localqueues.visibility.kueue.x-k8s.io/pendingworkloads"])
    path = "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/ray/localqueues/q/pendingworkloads"
    code, _, body = _http(api_faults.url + path)
    assert (code, json.loads(body)["message"]) == (503, "service unavailable")


# ----- authentication: --token -----


def test_a_token_is_required_once_set_and_the_kubeconfig_carries_it(tmp_path):
    with run_kubesim(controllers=(), token="s3cret", kubeconfig_path=tmp_path / "kubeconfig") as sim:
        code, _, body = _http(f"{sim.url}/api/v1/namespaces")
        assert code == 401
        assert json.loads(body) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
        assert _http(f"{sim.url}/api/v1/namespaces", token="wrong")[0] == 401
        assert _http(f"{sim.url}/api/v1/namespaces", token="s3cret")[0] == 200
        assert _http(f"{sim.url}/readyz")[0] == 200, "health probes stay anonymous"
        assert "token: s3cret" in (tmp_path / "kubeconfig").read_text()
        api_client = config.new_client_from_config(config_file=sim.kubeconfig)
        try:
            assert client.CoreV1Api(api_client).list_namespace().items

            sim.require_token("rotated")  # the server rotates; the client still holds the old token
            with pytest.raises(ApiException) as stale:
                client.CoreV1Api(api_client).list_namespace()
            assert stale.value.status == 401
            assert [r["code"] for r in sim.requests()][-1] == 401, "refused requests are logged"
        finally:
            api_client.close()
        sim.write_kubeconfig_token("rotated")
        fresh = config.new_client_from_config(config_file=sim.kubeconfig)
        try:
            assert client.CoreV1Api(fresh).list_namespace().items
        finally:
            fresh.close()


def test_named_users_authenticate_and_the_request_log_names_them(tmp_path):
    """ServiceAccount-like tokens: accepted beside the static one, and each request attributed to its user
    (as a cluster's audit log does), so a test can tell which component's credentials made a call."""
    with run_kubesim(controllers=(), token="s3cret", kubeconfig_path=tmp_path / "kubeconfig") as sim:
        sim.add_user("worker-token", "system:serviceaccount:airflow:kueue-ray-worker")
        assert _http(f"{sim.url}/api/v1/namespaces", token="worker-token")[0] == 200
        assert _http(f"{sim.url}/api/v1/namespaces", token="s3cret")[0] == 200
        assert _http(f"{sim.url}/api/v1/namespaces", token="other")[0] == 401
        assert [(r["code"], r["user"]) for r in sim.requests()[-3:]] == [
            (200, "system:serviceaccount:airflow:kueue-ray-worker"),
            (200, DEFAULT_USER),  # the static token's
            (401, ""),
        ]


def test_the_cli_requires_its_token(tmp_path):
    with run_kubesim(mode="subprocess", token="cli-token", kubeconfig_path=tmp_path / "kubeconfig") as sim:
        assert _http(f"{sim.url}/api/v1/namespaces")[0] == 401
        assert _http(f"{sim.url}/api/v1/namespaces", token="cli-token")[0] == 200
        assert "token: cli-token" in (tmp_path / "kubeconfig").read_text()


def test_a_served_rule_acts_and_loses_only_the_answer(api_faults, api_client, unique_name):
    core = client.CoreV1Api(api_client)
    api_faults.refuse(500, verbs=["create"], resources=["namespaces"], count=1, served=True)
    with pytest.raises(ApiException) as lost:
        core.create_namespace({"metadata": {"name": unique_name}})
    assert lost.value.status == 500
    assert core.read_namespace(unique_name).metadata.name == unique_name, "the server did create it"
    core.delete_namespace(unique_name)


def test_a_410_to_a_watch_may_come_as_an_http_status(api_faults):
    api_faults.refuse(410, verbs=["watch"], resources=["configmaps"], watch_event=False)
    code, _, body = _http(
        f"{api_faults.url}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=5"
    )
    assert (code, json.loads(body)["reason"]) == (410, "Expired")


def test_the_request_log_says_when_each_request_arrived(kubesim_api, api_client):
    kubesim_api.clear_requests()
    before = time.time()
    client.CoreV1Api(api_client).list_namespace()
    [record] = kubesim_api.requests()
    assert before - 0.01 <= record["at"] <= time.time() + 0.01


def test_an_unserved_api_group_is_missing_from_discovery_and_its_paths_answer_as_an_unknown_path(
    api_faults, api_client
):
    custom = client.CustomObjectsApi(api_client)
    assert custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "ray", "localqueues")["kind"]

    api_faults.set_faults(unserved_groups=["kueue.x-k8s.io"])
    with pytest.raises(ApiException) as listed:
        custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "ray", "localqueues")
    with pytest.raises(ApiException) as discovered:
        custom.get_api_resources("kueue.x-k8s.io", "v1beta2")
    groups = {g["name"] for g in client.ApisApi(api_client).get_api_versions().to_dict()["groups"]}

    # The API server's not-found handler: plain text, no Status naming an object.
    assert (listed.value.status, listed.value.body.strip()) == (404, b"404 page not found".decode())
    assert discovered.value.status == 404
    assert "kueue.x-k8s.io" not in groups and "visibility.kueue.x-k8s.io" not in groups
    assert "ray.io" in groups
    assert custom.list_namespaced_custom_object("ray.io", "v1", "ray", "rayjobs")["kind"] == "RayJobList"

    with pytest.raises(urllib.error.HTTPError) as rejected:
        api_faults.set_faults(unserved_groups="kueue.x-k8s.io")
    assert rejected.value.code == 400
    api_faults.reset_faults()
    assert custom.get_api_resources("kueue.x-k8s.io", "v1beta2").group_version == "kueue.x-k8s.io/v1beta2"


def test_one_service_accounts_grant_is_revoked_while_the_others_keep_theirs(api_faults):
    triggerer = "system:serviceaccount:airflow:airflow-triggerer"
    path = "/apis/ray.io/v1/namespaces/ray/rayjobs"
    _post(api_faults.url + "/kubesim/auth", {"accounts": {"triggerer-token": triggerer}})
    try:
        api_faults.set_faults(rules=[{"code": 403, "verbs": ["list"], "subjects": [triggerer]}])
        revoked, _, body = _http(api_faults.url + path, token="triggerer-token")
        kept, _, _ = _http(api_faults.url + path, token=api_faults.token)
        logged = {r["user"] for r in api_faults.requests() if r["path"] == path}
    finally:
        _post(api_faults.url + "/kubesim/auth", {"accounts": {}})

    assert (revoked, kept) == (403, 200)
    assert f'User "{triggerer}" cannot list resource "rayjobs"' in json.loads(body)["message"]
    assert triggerer in logged


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _names(page) -> list[str]:
    return [item.metadata.name for item in page.items]


def test_a_small_page_limit_pages_every_list_that_asks_for_pages(api_faults, api_client, unique_name):
    """The API server may return fewer items than ``limit``: a client must follow ``continue``."""
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": unique_name}})
    for index in range(5):
        core.create_namespaced_config_map(unique_name, {"metadata": {"name": f"cm-{index}"}})
    api_faults.set_faults(max_page_size=2)

    first = core.list_namespaced_config_map(unique_name, limit=500)
    assert _names(first) == ["cm-0", "cm-1"] and first.metadata._continue
    assert first.metadata.remaining_item_count == 3
    core.create_namespaced_config_map(unique_name, {"metadata": {"name": "cm-9"}})
    second = core.list_namespaced_config_map(unique_name, limit=500, _continue=first.metadata._continue)
    assert _names(second) == ["cm-2", "cm-3"]
    assert second.metadata.resource_version == first.metadata.resource_version, "one list, one version"
    assert len(core.list_namespaced_config_map(unique_name).items) == 6, "no limit: everything, as upstream"


def test_an_old_continue_token_is_answered_410_expired(api_faults, api_client, unique_name):
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": unique_name}})
    for index in range(3):
        core.create_namespaced_config_map(unique_name, {"metadata": {"name": f"cm-{index}"}})
    api_faults.set_faults(continue_ttl_s=0.5)
    token = core.list_namespaced_config_map(unique_name, limit=1).metadata._continue
    time.sleep(1.0)
    with pytest.raises(ApiException) as expired:
        core.list_namespaced_config_map(unique_name, limit=1, _continue=token)
    assert expired.value.status == 410
    status = json.loads(expired.value.body)
    assert status["reason"] == "Expired" and "too old to display a consistent list" in status["message"]
    rest = core.list_namespaced_config_map(unique_name, limit=5, _continue=status["metadata"]["continue"])
    assert _names(rest) == ["cm-1", "cm-2"], "the inconsistent token still reads the rest"


def test_a_clock_offset_shifts_object_timestamps_and_the_date_header(api_faults, api_client, unique_name):
    """A control plane whose clock is an hour behind the machine running Airflow."""
    from datetime import UTC, datetime, timedelta

    core = client.CoreV1Api(api_client)
    api_faults.set_faults(clock_offset_s=-3600)
    namespace, _, headers = core.create_namespace_with_http_info({"metadata": {"name": unique_name}})
    behind = datetime.now(UTC) - timedelta(hours=1)
    assert abs((namespace.metadata.creation_timestamp - behind).total_seconds()) < 5
    from email.utils import parsedate_to_datetime

    assert abs((parsedate_to_datetime(headers["Date"]) - behind).total_seconds()) < 5
    api_faults.reset_faults()
    _, _, headers = core.read_namespace_with_http_info(unique_name)
    assert abs((parsedate_to_datetime(headers["Date"]) - datetime.now(UTC)).total_seconds()) < 5
