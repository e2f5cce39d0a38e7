"""`GET /kubesim/stats` → ``fanout``: kubesim times each write from commit to the last watch stream's
transport.write, counts only live events (not a watch's initial list), and `DELETE /kubesim/stats/fanout`
starts a fresh window."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig
from kubernetes_asyncio import watch as awatch

from kubesim.testing import run_kubesim

NAMESPACE = "fanout-stats"


@pytest.fixture(scope="module")
def sim():
    """A bare kubesim of its own: no other test's watch streams may receive these writes."""
    with run_kubesim(controllers=()) as running:
        running.call(running.cluster.store.create, "namespaces", {"metadata": {"name": NAMESPACE}})
        yield running


def _reset(sim) -> dict:
    request = urllib.request.Request(sim.url + "/kubesim/stats/fanout", method="DELETE")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


async def _watch(core, resource_version: str | None, wanted: int, **selectors) -> list[str]:
    """Read ``wanted`` events from one watch stream; their types."""
    seen: list[str] = []
    watcher = awatch.Watch()
    async with watcher.stream(
        core.list_namespaced_config_map, NAMESPACE, resource_version=resource_version, **selectors
    ) as events:
        async for event in events:
            seen.append(event["type"])
            if len(seen) == wanted:
                break
    return seen


async def _watches_open(sim, wanted: int, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (now_open := sim.stats()["watches_open"]) != wanted:
        if loop.time() > deadline:
            raise TimeoutError(
                f"kubesim holds {now_open} watch streams open, not {wanted}, after {timeout:g}s"
            )
        await asyncio.sleep(0.02)


async def _open_watches(sim, coroutines) -> list[asyncio.Task]:
    """Start the watch tasks and wait until kubesim holds every stream open (writes before that would be
    seen by only some of them). First until the streams of an earlier test have closed on kubesim's side
    too: this module's kubesim has no other client, and a stream counted open when the count was taken
    and closed afterwards had left the wait one short for ever (a CI run under load)."""
    await _watches_open(sim, 0)
    tasks = [asyncio.create_task(c) for c in coroutines]
    await _watches_open(sim, len(tasks))
    return tasks


def test_each_write_is_timed_to_the_last_of_its_watch_streams(sim):
    async def scenario():
        api = await aconfig.new_client_from_config(config_file=sim.kubeconfig)
        async with api:
            core = aclient.CoreV1Api(api)
            start = (await core.list_namespaced_config_map(NAMESPACE)).metadata.resource_version
            assert _reset(sim)["events"] == 0
            tasks = await _open_watches(
                sim,
                [_watch(core, start, 3) for _ in range(3)]
                + [_watch(core, start, 2, label_selector="team=a")],
            )
            await core.create_namespaced_config_map(
                NAMESPACE, {"metadata": {"name": "a", "labels": {"team": "a"}}}
            )
            await core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": "b"}})
            await core.patch_namespaced_config_map("a", NAMESPACE, {"data": {"k": "v"}})
            return await asyncio.wait_for(asyncio.gather(*tasks), 30)

    seen = asyncio.run(scenario())
    assert seen == [["ADDED", "ADDED", "MODIFIED"]] * 3 + [["ADDED", "MODIFIED"]]

    fanout = sim.stats()["fanout"]
    assert fanout["events"] == 3  # three writes, each timed once however many streams it reached
    assert fanout["deliveries"] == 3 * 3 + 2  # the team=a watcher got two of them
    assert fanout["max_deliveries"] == 4
    assert 0 <= fanout["p50_ms"] <= fanout["p99_ms"] <= fanout["max_ms"]
    assert fanout["max_ms"] < 30_000  # milliseconds of a commit-to-write interval, not a raw clock reading
    assert fanout["process_cpu_s"] >= 0


def test_a_watch_initial_list_is_not_fan_out_and_reset_starts_a_fresh_window(sim):
    async def scenario():
        api = await aconfig.new_client_from_config(config_file=sim.kubeconfig)
        async with api:
            core = aclient.CoreV1Api(api)
            await core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": "listed"}})
            existing = len((await core.list_namespaced_config_map(NAMESPACE)).items)
            _reset(sim)
            # No resourceVersion: the stream starts with ADDED for every existing object, then the write.
            (task,) = await _open_watches(sim, [_watch(core, None, existing + 1)])
            await core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": "live"}})
            return await asyncio.wait_for(task, 30)

    seen = asyncio.run(scenario())
    assert len(seen) > 1

    fanout = sim.stats()["fanout"]
    assert (fanout["events"], fanout["deliveries"], fanout["max_deliveries"]) == (1, 1, 1)

    cleared = _reset(sim)
    assert (cleared["events"], cleared["deliveries"], cleared["p99_ms"]) == (0, 0, None)
    assert sim.stats()["fanout"]["events"] == 0
