"""Pod logs: the kubelet's read options, and follow=true streaming until the container ends."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig


@pytest.fixture
def pod(kubesim_api, api_client, unique_name):
    core = client.CoreV1Api(api_client)
    spec = {"containers": [{"name": "main", "image": "ray"}, {"name": "sidecar", "image": "fluentbit"}]}
    core.create_namespaced_pod("default", {"metadata": {"name": unique_name}, "spec": spec})
    yield unique_name
    core.delete_namespaced_pod(unique_name, "default")


def _append(sim, pod: str, container: str, text: str) -> None:
    sim.call(sim.cluster.logs.append, "default", pod, container, text)


def _read(api_client, pod: str, **options) -> str:
    response = client.CoreV1Api(api_client).read_namespaced_pod_log(
        pod, "default", _preload_content=False, **options
    )
    return response.data.decode()


def test_read_selects_container_and_tail(kubesim_api, api_client, pod):
    _append(kubesim_api, pod, "main", "one\ntwo\nthree")
    _append(kubesim_api, pod, "sidecar", "noise")

    assert _read(api_client, pod, container="main") == "one\ntwo\nthree\n"
    assert _read(api_client, pod, container="main", tail_lines=2) == "two\nthree\n"
    stamped = _read(api_client, pod, container="sidecar", timestamps=True)
    assert stamped.endswith("Z noise\n")


def test_a_pod_with_several_containers_needs_a_container_name(api_client, pod):
    with pytest.raises(ApiException) as ambiguous:
        _read(api_client, pod)
    assert ambiguous.value.status == 400
    assert "a container name must be specified" in ambiguous.value.body


def test_unknown_container_and_missing_pod_are_errors(api_client, pod):
    with pytest.raises(ApiException) as bad:
        _read(api_client, pod, container="nope")
    assert bad.value.status == 400
    with pytest.raises(ApiException) as missing:
        _read(api_client, "no-such-pod", container="main")
    assert missing.value.status == 404


def test_follow_streams_new_lines_until_the_container_ends(kubesim_api, pod):
    _append(kubesim_api, pod, "main", "booting")

    async def scenario():
        api = await aconfig.new_client_from_config(config_file=kubesim_api.kubeconfig)
        async with api:
            core = aclient.CoreV1Api(api)
            response = await core.read_namespaced_pod_log(
                pod, "default", container="main", follow=True, _preload_content=False
            )
            lines = [(await response.content.readline()).decode()]
            _append(kubesim_api, pod, "main", "step 1")
            lines.append((await response.content.readline()).decode())
            kubesim_api.call(kubesim_api.cluster.logs.close, "default", pod)
            rest = await asyncio.wait_for(response.content.read(), timeout=10)
            response.release()
            return lines, rest

    lines, rest = asyncio.run(scenario())
    assert lines == ["booting\n", "step 1\n"]
    assert rest == b""  # the stream ended by itself when the container stopped
