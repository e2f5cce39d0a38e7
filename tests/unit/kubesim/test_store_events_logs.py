"""Events as a controller's recorder writes them, and pod log buffers as the kubelet serves them."""

import asyncio
import re

import pytest

from kubesim.clock import Clock
from kubesim.errors import ApiError
from kubesim.events import record_event
from kubesim.podlogs import PodLogs, format_timestamp
from kubesim.resources import Registry
from kubesim.store import Store


@pytest.fixture
def store() -> Store:
    return Store(Registry(crds_dir=None), Clock())


def make_job(store, name="job", namespace="default"):
    return store.create("rayjobs.ray.io", {"metadata": {"name": name, "namespace": namespace}, "spec": {}})


def test_record_event_writes_a_core_v1_event(store):
    job = make_job(store)
    event = record_event(store, job, "Normal", "Created", "Created RayCluster job-raycluster", "ray-operator")
    assert re.fullmatch(r"job\.[0-9a-f]{16}", event["metadata"]["name"])
    assert event["involvedObject"] == {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "name": "job",
        "namespace": "default",
        "uid": job["metadata"]["uid"],
        "resourceVersion": job["metadata"]["resourceVersion"],
    }
    assert (event["type"], event["reason"], event["count"]) == ("Normal", "Created", 1)
    assert event["source"] == {"component": "ray-operator"} and event["reportingComponent"] == "ray-operator"
    assert event["firstTimestamp"] == event["lastTimestamp"]
    found, _ = store.list("events", field_selector=f"involvedObject.uid={job['metadata']['uid']}")
    assert [e["reason"] for e in found] == ["Created"]


def test_repeated_event_bumps_count(store):
    job = make_job(store)
    first = record_event(store, job, "Warning", "Failed", "boom", "ray-operator")
    second = record_event(store, job, "Warning", "Failed", "boom", "ray-operator")
    other = record_event(store, job, "Warning", "Failed", "different", "ray-operator")
    assert second["metadata"]["name"] == first["metadata"]["name"] and second["count"] == 2
    assert other["metadata"]["name"] != first["metadata"]["name"]
    assert len(store.list("events")[0]) == 2


def test_event_about_a_cluster_scoped_object_goes_to_default(store):
    queue = store.create("clusterqueues.kueue.x-k8s.io", {"metadata": {"name": "cq"}, "spec": {}})
    event = record_event(store, queue, "Normal", "Active", "ok", "kueue-admission")
    assert event["metadata"]["namespace"] == "default" and event["involvedObject"]["namespace"] == ""


def test_event_in_a_terminating_namespace_is_dropped(store):
    store.create("namespaces", {"metadata": {"name": "team-a"}})
    job = make_job(store, namespace="team-a")
    store.patch("rayjobs.ray.io", "job", {"metadata": {"finalizers": ["f/x"]}}, namespace="team-a")
    store.delete("namespaces", "team-a")
    assert record_event(store, job, "Normal", "Deleted", "bye", "ray-operator") is None


def test_event_recreated_after_its_predecessor_was_deleted(store):
    job = make_job(store)
    first = record_event(store, job, "Normal", "X", "m", "c")
    store.delete("events", first["metadata"]["name"], namespace="default")
    again = record_event(store, job, "Normal", "X", "m", "c")
    assert again["count"] == 1


# --- pod logs --------------------------------------------------------------------------------------


def test_read_with_tail_and_timestamps():
    logs = PodLogs()
    logs.append("ns", "pod", "ray-head", "one\ntwo")
    logs.append("ns", "pod", "ray-head", "three")
    assert logs.read("ns", "pod") == "one\ntwo\nthree\n"
    assert logs.read("ns", "pod", tail_lines=2) == "two\nthree\n"
    assert logs.read("ns", "pod", tail_lines=0) == ""
    stamped = logs.read("ns", "pod", timestamps=True).splitlines()
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z \w+", line) for line in stamped)
    assert logs.read("ns", "pod", since_seconds=60) == "one\ntwo\nthree\n"
    assert logs.read("ns", "unknown") == ""


def test_timestamp_format_trims_trailing_zeros_like_rfc3339nano():
    assert format_timestamp(1_700_000_000_120_000_000) == "2023-11-14T22:13:20.12Z"
    assert format_timestamp(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"


def test_several_containers_need_a_container_name():
    logs = PodLogs()
    logs.append("ns", "pod", "ray-head", "head")
    logs.append("ns", "pod", "sidecar", "side")
    assert logs.read("ns", "pod", "sidecar") == "side\n"
    with pytest.raises(ApiError) as err:
        logs.read("ns", "pod")
    assert err.value.code == 400 and "choose one of: [ray-head sidecar]" in err.value.message


def test_follow_streams_until_closed():
    async def scenario():
        logs = PodLogs()
        logs.append("ns", "pod", "c", "before")

        async def collect():
            return [line async for line in logs.follow("ns", "pod")]

        task = asyncio.create_task(collect())
        await asyncio.sleep(0)
        logs.append("ns", "pod", "c", "during")
        logs.close("ns", "pod")
        logs.append("ns", "other", "c", "unrelated")
        return await asyncio.wait_for(task, 1), logs.read("ns", "pod")

    followed, read = asyncio.run(scenario())
    assert followed == ["before\n", "during\n"] and "".join(followed) == read


def test_follow_of_a_finished_pod_returns_what_there_is():
    async def scenario():
        logs = PodLogs()
        logs.append("ns", "pod", "c", "a\nb\nc")
        logs.close("ns", "pod")
        return [line async for line in logs.follow("ns", "pod", tail_lines=1)]

    assert asyncio.run(scenario()) == ["c\n"]


def test_forget_ends_followers_and_drops_lines():
    async def scenario():
        logs = PodLogs()
        logs.append("ns", "pod", "c", "x")
        follower = logs.follow("ns", "pod")
        assert await follower.__anext__() == "x\n"
        logs.forget("ns", "pod")
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(follower.__anext__(), 1)
        return logs.read("ns", "pod")

    assert asyncio.run(scenario()) == ""
