"""Watch semantics through both official clients: ordering, resume, 410, bookmarks, timeouts, drops."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from aiohttp.test_utils import TestServer
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig
from kubernetes_asyncio import watch as awatch

from kubesim.apiserver.app import make_app
from kubesim.cluster import Cluster


@pytest.fixture
def namespace(api_client, unique_name):
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": unique_name}})
    yield unique_name
    core.delete_namespace(unique_name)


def _config_map(name: str, **labels) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def test_async_watch_sees_every_change_in_order(kubesim_api, namespace):
    async def scenario():
        api = await aconfig.new_client_from_config(config_file=kubesim_api.kubeconfig)
        async with api:
            core = aclient.CoreV1Api(api)
            start = (await core.list_namespaced_config_map(namespace)).metadata.resource_version
            await core.create_namespaced_config_map(namespace, _config_map("cm"))
            await core.patch_namespaced_config_map("cm", namespace, {"data": {"k": "v"}})
            await core.delete_namespaced_config_map("cm", namespace)
            seen = []
            async with awatch.Watch().stream(
                core.list_namespaced_config_map, namespace, resource_version=start, timeout_seconds=5
            ) as stream:
                async for event in stream:
                    seen.append((event["type"], int(event["object"].metadata.resource_version)))
                    if len(seen) == 3:
                        break
            return seen

    seen = asyncio.run(scenario())
    assert [kind for kind, _rv in seen] == ["ADDED", "MODIFIED", "DELETED"]
    assert [rv for _kind, rv in seen] == sorted(rv for _kind, rv in seen)


def test_watch_without_resource_version_starts_with_existing_objects(api_client, namespace):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(namespace, _config_map("a"))
    core.create_namespaced_config_map(namespace, _config_map("b"))

    events = list(watch.Watch().stream(core.list_namespaced_config_map, namespace, timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_resumes_from_a_resource_version(api_client, namespace):
    core = client.CoreV1Api(api_client)
    first = core.create_namespaced_config_map(namespace, _config_map("first"))
    core.create_namespaced_config_map(namespace, _config_map("second"))
    core.delete_namespaced_config_map("first", namespace)

    stream = watch.Watch().stream(
        core.list_namespaced_config_map,
        namespace,
        resource_version=first.metadata.resource_version,
        timeout_seconds=1,
    )
    assert [(e["type"], e["object"].metadata.name) for e in stream] == [
        ("ADDED", "second"),
        ("DELETED", "first"),
    ]


def test_watch_filters_by_label_selector(api_client, namespace):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(namespace, _config_map("mine", owner="us"))
    core.create_namespaced_config_map(namespace, _config_map("theirs", owner="them"))

    stream = watch.Watch().stream(
        core.list_namespaced_config_map, namespace, label_selector="owner=us", timeout_seconds=1
    )
    assert [e["object"].metadata.name for e in stream] == ["mine"]


def test_expired_watch_gets_410_and_a_relist_recovers(api_faults, api_client, namespace):
    core = client.CoreV1Api(api_client)
    listed = core.list_namespaced_config_map(namespace)
    api_faults.set_faults(expire_watches=1)

    with pytest.raises(ApiException) as gone:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map,
                namespace,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=1,
            )
        )
    assert gone.value.status == 410

    relisted = core.list_namespaced_config_map(namespace)
    core.create_namespaced_config_map(namespace, _config_map("after"))
    stream = watch.Watch().stream(
        core.list_namespaced_config_map,
        namespace,
        resource_version=relisted.metadata.resource_version,
        timeout_seconds=1,
    )
    assert [e["object"].metadata.name for e in stream] == ["after"]


def test_410_is_one_error_event_with_an_expired_status(api_faults, namespace):
    api_faults.set_faults(expire_watches=True)
    url = f"{api_faults.url}/api/v1/namespaces/{namespace}/configmaps?watch=true&resourceVersion=1"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        lines = response.read().decode().splitlines()
    event = json.loads(lines[0])
    assert len(lines) == 1
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_legacy_watch_path_streams_events(kubesim_api, api_client, namespace):
    client.CoreV1Api(api_client).create_namespaced_config_map(namespace, _config_map("legacy"))
    url = f"{kubesim_api.url}/api/v1/watch/namespaces/{namespace}/configmaps?timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=10) as response:
        events = [json.loads(line) for line in response.read().decode().splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "legacy")]


def test_open_watches_are_counted_and_released(kubesim_api, api_client, namespace):
    core = client.CoreV1Api(api_client)
    opened_before = kubesim_api.stats()["watches_opened_total"]
    response = core.list_namespaced_config_map(
        namespace, watch=True, timeout_seconds=30, _preload_content=False
    )
    try:
        stats = kubesim_api.stats()
        assert stats["watches_opened_total"] == opened_before + 1
        assert stats["watches_open"] >= 1
    finally:
        response.close()
        response.release_conn()

    events = list(watch.Watch().stream(core.list_namespaced_config_map, namespace, timeout_seconds=1))
    assert events == []
    assert kubesim_api.stats()["watches_opened_total"] == opened_before + 2


def test_dropped_watches_resume_without_losing_events(api_faults, namespace):
    """A watch that the server keeps closing is reopened by kubernetes_asyncio from its last
    resourceVersion; every object created across the drops still arrives exactly once."""

    async def scenario():
        api = await aconfig.new_client_from_config(config_file=api_faults.kubeconfig)
        async with api:
            core = aclient.CoreV1Api(api)
            start = (await core.list_namespaced_config_map(namespace)).metadata.resource_version
            names = []
            async with awatch.Watch().stream(
                core.list_namespaced_config_map, namespace, resource_version=start
            ) as stream:
                for index in range(3):
                    await core.create_namespaced_config_map(namespace, _config_map(f"cm-{index}"))
                    event = await asyncio.wait_for(stream.__anext__(), timeout=10)
                    names.append(event["object"].metadata.name)
                    await asyncio.sleep(0.4)  # longer than watch_drop_after_s: the stream is cut meanwhile
            return names

    opened_before = api_faults.stats()["watches_opened_total"]
    api_faults.set_faults(watch_drop_after_s=0.2)
    assert asyncio.run(scenario()) == ["cm-0", "cm-1", "cm-2"]
    assert api_faults.stats()["watches_opened_total"] >= opened_before + 3


def test_bookmarks_carry_the_current_resource_version():
    async def scenario():
        cluster = Cluster(controllers=())
        server = TestServer(make_app(cluster, bookmark_interval=0.1))
        await server.start_server()
        try:
            configuration = aclient.Configuration(host=str(server.make_url("")).rstrip("/"))
            async with aclient.ApiClient(configuration) as api:
                core = aclient.CoreV1Api(api)
                await core.create_namespaced_config_map("default", _config_map("cm"))
                current = cluster.store.resource_version()
                async with awatch.Watch().stream(
                    core.list_namespaced_config_map,
                    "default",
                    resource_version=current,
                    allow_watch_bookmarks=True,
                    timeout_seconds=5,
                ) as stream:
                    event = await stream.__anext__()
                return event["type"], event["raw_object"], current
        finally:
            await server.close()

    kind, obj, current = asyncio.run(scenario())
    assert kind == "BOOKMARK"
    assert obj["kind"] == "ConfigMap"
    assert obj["metadata"]["resourceVersion"] == current


def test_one_write_reaches_every_open_watch_stream_once():
    async def scenario():
        import aiohttp

        cluster = Cluster(controllers=())
        server = TestServer(make_app(cluster))
        await server.start_server()
        base = str(server.make_url("/api/v1/namespaces/default/configmaps")).rstrip("/")
        try:
            async with aiohttp.ClientSession() as session:
                rv = cluster.store.resource_version()
                streams = [
                    await session.get(f"{base}?watch=true&resourceVersion={rv}&timeoutSeconds=5")
                    for _ in range(50)
                ]
                async with session.post(base, json=_config_map("shared")) as response:
                    assert response.status == 201
                lines = [json.loads(await asyncio.wait_for(s.content.readline(), 5)) for s in streams]
                for stream in streams:
                    stream.close()
            return lines
        finally:
            await server.close()

    lines = asyncio.run(scenario())
    assert len(lines) == 50
    assert {(line["type"], line["object"]["metadata"]["name"]) for line in lines} == {("ADDED", "shared")}


def test_drop_watches_ends_every_open_stream_at_once(api_faults, namespace):
    async def scenario():
        api = await aconfig.new_client_from_config(config_file=api_faults.kubeconfig)
        try:
            stream = await aclient.CoreV1Api(api).list_namespaced_config_map(
                namespace, watch=True, timeout_seconds=30, _preload_content=False
            )
            await asyncio.to_thread(api_faults.set_faults, drop_watches=True)
            started = asyncio.get_running_loop().time()
            while await stream.content.readline():
                pass
            stream.release()
            return asyncio.get_running_loop().time() - started
        finally:
            await api.close()

    assert asyncio.run(scenario()) < 5, "the stream ended when told, not at its 30 s timeout"
    assert api_faults.stats()["watches_open"] == 0
