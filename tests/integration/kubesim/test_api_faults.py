"""Fault injection, counters and the request log, as a test or benchmark drives them over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException


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
    assert shown == {"error_rate": 0.25, "latency_ms": 0.0, "watch_drop_after_s": 3.0, "expire_watches": 2}
    with urllib.request.urlopen(api_faults.url + "/kubesim/faults") as response:
        assert json.loads(response.read()) == shown

    with pytest.raises(urllib.error.HTTPError) as rejected:
        api_faults.set_faults(error_rate=2)
    assert rejected.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as unknown:
        api_faults.set_faults(explode=True)
    assert unknown.value.code == 400


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

    log = kubesim_api.requests()
    assert [
        (r["verb"], r["group"], r["resource"], r["subresource"], r["namespace"], r["code"]) for r in log
    ] == [
        ("list", "ray.io", "rayjobs", "", unique_name, 200),
        ("get", "ray.io", "rayjobs", "status", unique_name, 404),
    ]
    kubesim_api.clear_requests()
    assert kubesim_api.requests() == []
    core.delete_namespace(unique_name)
