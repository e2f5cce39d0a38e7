"""Watches: initial state, resume from a resourceVersion, selector transitions, 410, close."""

import asyncio
import json

import pytest

from kubesim.clock import Clock
from kubesim.errors import ApiError
from kubesim.resources import Registry
from kubesim.store import Store

RAYJOBS = "rayjobs.ray.io"


def rayjob(name, namespace="default", labels=None) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}}, "spec": {}}


async def drain(watcher) -> list[tuple[str, str]]:
    events = []
    while (event := await watcher.next(timeout=0.01)) is not None:
        events.append((event.type, event.object["metadata"]["name"]))
    return events


def run(coro):
    return asyncio.run(coro)


def test_watch_without_version_starts_with_existing_objects():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        store.create(RAYJOBS, rayjob("a"))
        watcher = store.watch(RAYJOBS)
        store.create(RAYJOBS, rayjob("b"))
        store.patch(RAYJOBS, "a", {"spec": {"suspend": True}}, namespace="default")
        store.delete(RAYJOBS, "b", namespace="default")
        return await drain(watcher)

    assert run(scenario()) == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_resumes_from_a_resource_version():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        store.create(RAYJOBS, rayjob("a"))
        _, rv = store.list(RAYJOBS)
        store.create(RAYJOBS, rayjob("b"))
        store.create("configmaps", {"metadata": {"name": "other-kind", "namespace": "default"}})
        watcher = store.watch(RAYJOBS, resource_version=rv)
        store.create(RAYJOBS, rayjob("c"))
        return await drain(watcher)

    assert run(scenario()) == [("ADDED", "b"), ("ADDED", "c")]


def test_watch_scoped_to_a_namespace():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        store.create("namespaces", {"metadata": {"name": "team-a"}})
        watcher = store.watch(RAYJOBS, namespace="team-a")
        store.create(RAYJOBS, rayjob("elsewhere"))
        store.create(RAYJOBS, rayjob("here", namespace="team-a"))
        return await drain(watcher)

    assert run(scenario()) == [("ADDED", "here")]


def test_label_selector_transitions_become_added_and_deleted():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        store.create(RAYJOBS, rayjob("a", labels={"queue": "q1"}))
        watcher = store.watch(RAYJOBS, label_selector="queue=q1", resource_version=store.resource_version())
        store.patch(RAYJOBS, "a", {"metadata": {"labels": {"queue": "q2"}}}, namespace="default")
        store.patch(RAYJOBS, "a", {"spec": {"suspend": True}}, namespace="default")
        store.patch(RAYJOBS, "a", {"metadata": {"labels": {"queue": "q1"}}}, namespace="default")
        store.patch(RAYJOBS, "a", {"spec": {"suspend": False}}, namespace="default")
        events = []
        while (event := await watcher.next(timeout=0.01)) is not None:
            events.append(
                (
                    event.type,
                    event.object["metadata"]["labels"]["queue"],
                    event.object["metadata"]["resourceVersion"],
                )
            )
        return events, store

    events, store = run(scenario())
    assert [(t, q) for t, q, _ in events] == [("DELETED", "q1"), ("ADDED", "q1"), ("MODIFIED", "q1")]
    # The synthetic DELETED shows the last matching content stamped with the version that ended the match.
    assert int(events[0][2]) < int(events[1][2]) < int(events[2][2]) == int(store.resource_version())


def test_field_selector_watch_on_one_object():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        watcher = store.watch(RAYJOBS, field_selector="metadata.name=b")
        store.create(RAYJOBS, rayjob("a"))
        store.create(RAYJOBS, rayjob("b"))
        return await drain(watcher)

    assert run(scenario()) == [("ADDED", "b")]


def test_too_old_resource_version_is_410():
    store = Store(Registry(crds_dir=None), Clock(), history=5)
    old = store.resource_version()
    for i in range(10):
        store.create(RAYJOBS, rayjob(f"j{i}"))
    with pytest.raises(ApiError) as err:
        store.watch(RAYJOBS, resource_version=old)
    assert (err.value.code, err.value.reason) == (410, "Expired")
    assert err.value.message.startswith(f"too old resource version: {old} (")
    recent = str(int(store.resource_version()) - 2)
    assert store.watch(RAYJOBS, resource_version=recent).pending() == 2


def test_watch_events_are_private_copies_by_default():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        first, second = store.watch(RAYJOBS), store.watch(RAYJOBS)
        store.create(RAYJOBS, rayjob("a"))
        (await first.next(0.01)).object["spec"]["mutated"] = True
        return (await second.next(0.01)).object, store.get(RAYJOBS, "a", namespace="default")

    seen_by_second, stored = run(scenario())
    assert "mutated" not in seen_by_second["spec"] and "mutated" not in stored["spec"]


def test_close_ends_iteration_and_stops_delivery():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        watcher = store.watch(RAYJOBS)
        received = []

        async def consume():
            async for event in watcher:
                received.append(event.type)

        task = asyncio.create_task(consume())
        store.create(RAYJOBS, rayjob("a"))
        await asyncio.sleep(0)
        watcher.close()
        await asyncio.wait_for(task, 1)
        store.create(RAYJOBS, rayjob("b"))
        return received, watcher.pending()

    received, pending = run(scenario())
    assert received == ["ADDED"] and pending == 0


def test_gc_deletions_reach_watchers():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        job = store.create(RAYJOBS, rayjob("job"))
        ref = {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "job", "uid": job["metadata"]["uid"]}
        store.create("pods", {"metadata": {"name": "head", "namespace": "default", "ownerReferences": [ref]}})
        watcher = store.watch("pods", resource_version=store.resource_version())
        store.delete(RAYJOBS, "job", namespace="default")
        return await drain(watcher)

    assert run(scenario()) == [("DELETED", "head")]


def test_watchers_sharing_a_selector_each_get_every_event():
    async def scenario():
        store = Store(Registry(crds_dir=None), Clock())
        first = store.watch(RAYJOBS, label_selector="team=a")
        second = store.watch(RAYJOBS, label_selector="team = a")  # same selector, spelled differently
        store.create(RAYJOBS, rayjob("x", labels={"team": "a"}))
        first.close()
        store.create(RAYJOBS, rayjob("y", labels={"team": "a"}))
        store.create(RAYJOBS, rayjob("z", labels={"team": "b"}))
        return await drain(first), await drain(second)

    closed, open_ = run(scenario())
    assert closed == [] and open_ == [("ADDED", "x"), ("ADDED", "y")]


def test_subscribers_seeing_a_change_alike_share_one_encoded_line():
    store = Store(Registry(crds_dir=None), Clock())
    seen: list = []
    store.subscribe(RAYJOBS, seen.append)
    store.subscribe(RAYJOBS, seen.append, label_selector="team=a")
    store.create(RAYJOBS, rayjob("x", labels={"team": "a"}))
    first, second = seen
    assert first is second
    assert json.loads(first.line()) == {
        "type": "ADDED",
        "object": store.get(RAYJOBS, "x", namespace="default"),
    }


def test_indexed_selectors_still_see_label_transitions():
    """Watches selecting one label value each: a relabel is DELETED for the old value's watcher and
    ADDED for the new one's, and no other watcher hears of it."""
    store = Store(Registry(crds_dir=None), Clock())
    seen: dict[str, list] = {}
    for shard in ("0", "1", "2"):
        store.subscribe(
            RAYJOBS, lambda d, s=shard: seen.setdefault(s, []).append(d.type), label_selector=f"shard={shard}"
        )
    store.subscribe(
        RAYJOBS, lambda d: seen.setdefault("in", []).append(d.type), label_selector="shard in (1,2)"
    )
    store.create(RAYJOBS, rayjob("x", labels={"shard": "1"}))
    store.patch(RAYJOBS, "x", {"metadata": {"labels": {"shard": "2"}}}, namespace="default")
    assert seen == {"1": ["ADDED", "DELETED"], "2": ["ADDED"], "in": ["ADDED", "MODIFIED"]}


def test_closed_subscription_hears_nothing_more():
    store = Store(Registry(crds_dir=None), Clock())
    seen: list = []
    subscription = store.subscribe(RAYJOBS, seen.append, label_selector="team=a")
    subscription.close()
    store.create(RAYJOBS, rayjob("x", labels={"team": "a"}))
    assert seen == []
