"""kubesim watch fan-out at scale (issue 2 §6): 5,000 RayJobs stored, 1,000 HTTP watch streams open.

kubesim runs as a subprocess (`python -m kubesim serve`, with the real CRDs), so its CPU is its own; the
5,000 RayJobs are created over HTTP first. They name MultiKueue in ``spec.managedBy`` and carry no queue
label, so neither KubeRay nor Kueue acts on them: the store simply holds them. This process then opens 1,000 plain
HTTP watch streams on the RayJobs of the namespace (from the current resourceVersion, as an informer
resumes) and, at a steady pace, merge-patches an annotation onto one RayJob after another. In the
``broadcast`` shape every write is seen by all 1,000 watchers: the worst case for fan-out.

Latency of one delivery = the wall time a watcher reads the event line minus the wall time just before the
PATCH request was sent (``time.time()`` in the annotation itself, so each line carries its own start).
This over-counts by the PATCH's own round trip and by this client's CPU, which competes with kubesim for
the same 2 cores, so the figures are an upper bound on kubesim's fan-out time. A write's fan-out time is
its slowest delivery: the moment the last of the 1,000 watchers had it.

A second shape, ``selective``, gives each watcher its own label selector (one shard of the objects), so
each write is delivered to one watcher while the store still evaluates all 1,000 selectors.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import aiohttp

from bench.stats import summary_ms
from kubesim.testing import run_kubesim

NAMESPACE = "fanout"
STAMP = "bench.kubesim.dev/written-at"
SHARD = "bench.kubesim.dev/shard"
_STAMP_RE = re.compile(rb'"bench\.kubesim\.dev/written-at":"([0-9.]+)"')
CRDS_DIR = Path(__file__).resolve().parents[2] / "shared" / "crds"


def rayjob(index: int, shards: int) -> dict:
    """A small valid RayJob that no controller touches: stored only.

    ``spec.managedBy`` names MultiKueue, so KubeRay leaves it alone as upstream does (kubesim's KubeRay
    otherwise takes each suspended RayJob through Initializing -> Suspending -> Suspended, which for
    5,000 at once takes minutes), and without a queue label Kueue ignores it.

    Its ``bench.kubesim.dev/shard`` label (index modulo ``shards``) lets a watcher select one shard.
    """
    container = {
        "name": "ray-head",
        "image": "rayproject/ray:2.52.0",
        "resources": {"requests": {"cpu": "1"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": f"job-{index:05d}",
            "namespace": NAMESPACE,
            "labels": {SHARD: str(index % shards)},
        },
        "spec": {
            "entrypoint": "python train.py",
            "suspend": True,
            "managedBy": "kueue.x-k8s.io/multikueue",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container]}}}
            },
        },
    }


async def load(session, url: str, objects: int, shards: int, parallel: int = 16) -> None:
    """Create the namespace and ``objects`` RayJobs over HTTP, ``parallel`` requests at a time.

    (``--apply`` would do it in-process, but parses YAML in pure Python: minutes for 5,000 documents.)
    """
    async with session.post(f"{url}/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}}) as response:
        response.raise_for_status()
    gate = asyncio.Semaphore(parallel)

    async def one(index: int) -> None:
        async with gate:
            path = f"{url}/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
            async with session.post(path, json=rayjob(index, shards)) as response:
                response.raise_for_status()

    await asyncio.gather(*(one(i) for i in range(objects)))


async def _watch(session, url: str, latencies: list[float], per_write: dict[str, float]) -> None:
    """Read one watch stream; record each stamped event's delivery latency, and the slowest per write."""
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as response:
        seen: set[bytes] = set()
        async for line in response.content:
            received = time.time()
            match = _STAMP_RE.search(line)
            if match is None or match.group(1) in seen:
                continue  # a later write to the same object still carries an old stamp
            seen.add(match.group(1))
            written = match.group(1).decode()
            latency = received - float(written)
            latencies.append(latency)
            previous = per_write.get(written, 0.0)
            if latency > previous:
                per_write[written] = latency


async def _quiet_resource_version(session, base: str, quiet_s: float = 2.0) -> str:
    """The global resourceVersion once nothing has been written for ``quiet_s``.

    KubeRay takes each suspended RayJob through Initializing -> Suspending -> Suspended right after start;
    watching before that settles would measure a backlog of 15,000 controller writes, not fan-out.
    """
    last, since = None, time.monotonic()
    while True:
        async with session.get(base, params={"limit": "1"}) as response:
            current = (await response.json())["metadata"]["resourceVersion"]
        if current != last:
            last, since = current, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return current
        await asyncio.sleep(0.25)


async def _measure(
    url: str, objects: int, watchers: int, writes: int, rate_hz: float, selective: bool
) -> dict:
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        base = f"{url}/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
        started = time.monotonic()
        await load(session, url, objects, watchers)
        load_s = time.monotonic() - started
        resource_version = await _quiet_resource_version(session, base)
        latencies: list[float] = []
        per_write: dict[str, float] = {}
        watch_url = f"{base}?watch=true&resourceVersion={resource_version}"
        tasks = [
            asyncio.create_task(
                _watch(
                    session,
                    f"{watch_url}&labelSelector={SHARD}%3D{i}" if selective else watch_url,
                    latencies,
                    per_write,
                )
            )
            for i in range(watchers)
        ]
        deadline = time.monotonic() + 60
        stats = {}
        while time.monotonic() < deadline:
            async with session.get(f"{url}/kubesim/stats") as response:
                stats = await response.json()
            if stats.get("watches_open", 0) >= watchers:
                break
            await asyncio.sleep(0.2)
        watches_open = stats.get("watches_open")
        headers = {"Content-Type": "application/merge-patch+json"}
        interval = 1.0 / rate_hz
        next_at = time.monotonic()
        for i in range(writes):
            next_at += interval
            name = f"job-{(i * 7919) % objects:05d}"
            body = json.dumps({"metadata": {"annotations": {STAMP: f"{time.time():.6f}"}}})
            async with session.patch(f"{base}/{name}", data=body, headers=headers) as response:
                response.raise_for_status()
                await response.read()
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        expected = writes if selective else writes * watchers
        settle = time.monotonic() + 30
        while len(latencies) < expected and time.monotonic() < settle:
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "mode": "selective" if selective else "broadcast",
        "load_s": round(load_s, 1),
        "objects_stored": stats.get("objects", {}),
        "watches_open": watches_open,
        "writes": writes,
        "write_rate_hz": rate_hz,
        "deliveries": len(latencies),
        "deliveries_expected": expected,
        "per_delivery": summary_ms(latencies),
        "per_write_all_watchers": summary_ms(list(per_write.values())),
    }


def run_mode(objects: int, watchers: int, writes: int, rate_hz: float, *, selective: bool) -> dict:
    """Start kubesim with ``objects`` RayJobs, open ``watchers`` streams, time ``writes`` fan-outs."""
    with run_kubesim(mode="subprocess", crds_dir=CRDS_DIR) as sim:
        result = asyncio.run(_measure(sim.url, objects, watchers, writes, rate_hz, selective))
    result["target_p99_ms"] = 50
    return result


def run(objects: int = 5000, watchers: int = 1000, writes: int = 40, rate_hz: float = 2.0) -> dict:
    """Both shapes: every watcher sees every write (broadcast), and each write matches one watcher's
    label selector while the store still checks all 1,000 (selective: many informers, one object each)."""
    return {
        "broadcast": run_mode(objects, watchers, writes, rate_hz, selective=False),
        "selective": run_mode(objects, watchers, writes, rate_hz, selective=True),
    }
