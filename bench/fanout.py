"""kubesim watch fan-out at scale (issue 2 §6): 5,000 RayJobs stored, 1,000 HTTP watch streams open.

kubesim runs as a subprocess (`python -m kubesim serve`, with the real CRDs), so its CPU is its own; the
5,000 RayJobs are created over HTTP first. They name MultiKueue in ``spec.managedBy`` and carry no queue
label, so neither KubeRay nor Kueue acts on them: the store simply holds them. Reader processes (4 × 250 by
default) then open the 1,000 plain HTTP watch streams on the RayJobs of the namespace (from the current
resourceVersion, as an informer resumes), and this process merge-patches an annotation onto one RayJob
after another at a steady pace. In the ``broadcast`` shape every write is seen by all 1,000 watchers: the
worst case for fan-out.

Two figures per write, both against the 50 ms target:

- **server-side (the kubesim figure)**: store commit → the last ``transport.write`` of the event to a
  watch stream, measured by kubesim itself (``GET /kubesim/stats`` → ``fanout``, reset just before the
  timed writes). This is what kubesim costs.
- **client-observed**: the wall time just before the PATCH was sent (``time.time()``, carried in the
  annotation itself) → the wall time the last watcher, in whichever reader process, read it. It adds the
  PATCH round trip, the kernel's delivery and the readers' own CPU, which competes with kubesim for the
  same 2 cores: an upper bound. Readers keep their share small: a raw asyncio protocol per stream that
  finds the stamp with a regex over the bytes received, no HTTP client and no JSON parsing. They run as
  ``SCHED_BATCH``: still their fair share of the cores, but a reader woken by one of kubesim's sends does
  not preempt kubesim in the middle of a fan-out (readers stand in for clients that, against a real API
  server, run on other machines). The per-delivery distribution (write → each watcher) is reported too.

A second shape, ``selective``, gives each watcher its own label selector (one shard of the objects), so
each write is delivered to one watcher while the store still evaluates all 1,000 selectors.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import re
import time
from urllib.parse import urlsplit

import aiohttp

from bench.stats import summary_ms
from kubesim.testing import run_kubesim

NAMESPACE = "fanout"
STAMP = "bench.kubesim.dev/written-at"
SHARD = "bench.kubesim.dev/shard"
_STAMP_RE = re.compile(rb'"bench\.kubesim\.dev/written-at":"([0-9.]+)"')
TARGET_P99_MS = 50
READERS = 4


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


# --- reader processes ---------------------------------------------------------------------------------


class _Deliveries:
    """What one reader process saw: each delivery's latency, and per write the last time it arrived."""

    def __init__(self, progress, slot: int) -> None:
        self.latencies: list[float] = []
        self.last_read: dict[str, float] = {}  # stamp -> latest wall time a stream of this process read it
        self._progress = progress  # shared array: the parent waits until every expected delivery is read
        self._slot = slot

    def add(self, stamp: bytes, received: float) -> None:
        written = stamp.decode()
        self.latencies.append(received - float(written))
        if received > self.last_read.get(written, 0.0):
            self.last_read[written] = received
        self._progress[self._slot] += 1


class _WatchReader(asyncio.Protocol):
    """One watch stream read as raw bytes: the stamp is found by a regex over each complete line, so
    this costs a read and a scan per delivery, not an HTTP client's chunk parsing and a JSON decode."""

    def __init__(self, request: bytes, deliveries: _Deliveries) -> None:
        self._request = request
        self._deliveries = deliveries
        self._tail = b""
        self._seen: set[bytes] = set()  # a later write to the same object would still carry an old stamp
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        received = time.time()
        buffer = self._tail + data if self._tail else data
        end = buffer.rfind(b"\n") + 1
        self._tail = buffer[end:]
        for match in _STAMP_RE.finditer(buffer, 0, end):
            stamp = match.group(1)
            if stamp not in self._seen:
                self._seen.add(stamp)
                self._deliveries.add(stamp, received)


async def _read_streams(url: str, paths: list[str], deliveries: _Deliveries, stop) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    loop = asyncio.get_running_loop()
    readers = []
    for path in paths:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json\r\n\r\n".encode()
        _, reader = await loop.create_connection(lambda r=request: _WatchReader(r, deliveries), host, port)
        readers.append(reader)
    while not stop.is_set():
        await asyncio.sleep(0.05)
    for reader in readers:
        reader.transport.close()


def _reader_main(url: str, paths: list[str], slot: int, progress, stop, results) -> None:
    """A reader process: hold ``paths`` open until ``stop``, then send back what it saw."""
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))  # see the module docstring
    deliveries = _Deliveries(progress, slot)
    asyncio.run(_read_streams(url, paths, deliveries, stop))
    results.put((deliveries.latencies, deliveries.last_read))


# --- the measurement ----------------------------------------------------------------------------------


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


async def _stats(session, url: str) -> dict:
    async with session.get(f"{url}/kubesim/stats") as response:
        return await response.json()


async def _wait_for_watches(session, url: str, watchers: int, processes, timeout_s: float = 120.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        if any(process.exitcode is not None for process in processes):
            raise RuntimeError("a reader process exited before opening its watch streams")
        open_now = (await _stats(session, url)).get("watches_open", 0)
        if open_now >= watchers or time.monotonic() > deadline:
            return open_now
        await asyncio.sleep(0.2)


async def _write(session, base: str, objects: int, writes: int, rate_hz: float) -> None:
    """Merge-patch a fresh ``time.time()`` stamp onto one RayJob after another, ``rate_hz`` per second."""
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


async def _measure(
    url: str, objects: int, watchers: int, writes: int, rate_hz: float, selective: bool, readers: int
) -> dict:
    context = multiprocessing.get_context("spawn")  # no fork of a process with a running event loop
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        path = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
        base = url + path
        started = time.monotonic()
        await load(session, url, objects, watchers)
        load_s = time.monotonic() - started
        resource_version = await _quiet_resource_version(session, base)
        watch = f"{path}?watch=true&resourceVersion={resource_version}"
        paths = [f"{watch}&labelSelector={SHARD}%3D{i}" if selective else watch for i in range(watchers)]
        progress = context.Array("q", readers, lock=False)
        stop, results = context.Event(), context.Queue()
        processes = [
            context.Process(
                target=_reader_main,
                args=(url, paths[slot::readers], slot, progress, stop, results),
                daemon=True,  # a failed run must not leave the parent waiting on its readers at exit
            )
            for slot in range(readers)
        ]
        for process in processes:
            process.start()
        try:
            watches_open = await _wait_for_watches(session, url, watchers, processes)
            async with session.delete(f"{url}/kubesim/stats/fanout") as response:
                response.raise_for_status()
            await _write(session, base, objects, writes, rate_hz)
            expected = writes if selective else writes * watchers
            settle = time.monotonic() + 30
            while sum(progress) < expected and time.monotonic() < settle:
                await asyncio.sleep(0.1)
            stats = await _stats(session, url)
        finally:
            stop.set()
        seen = [await asyncio.to_thread(results.get, True, 60) for _ in processes]
        for process in processes:
            process.join(timeout=30)
    latencies = [latency for per_process, _ in seen for latency in per_process]
    last_read: dict[str, float] = {}
    for _, per_process in seen:
        for written, received in per_process.items():
            last_read[written] = max(received, last_read.get(written, 0.0))
    return {
        "mode": "selective" if selective else "broadcast",
        "load_s": round(load_s, 1),
        "objects_stored": stats.get("objects", {}),
        "watches_open": watches_open,
        "reader_processes": readers,
        "writes": writes,
        "write_rate_hz": rate_hz,
        "server_fanout": stats["fanout"],
        "deliveries": len(latencies),
        "deliveries_expected": expected,
        "per_write_all_watchers": summary_ms([read - float(w) for w, read in last_read.items()]),
        "per_delivery": summary_ms(latencies),
        "target_p99_ms": TARGET_P99_MS,
    }


def run_mode(
    objects: int, watchers: int, writes: int, rate_hz: float, *, selective: bool, readers: int = READERS
) -> dict:
    """Start kubesim with ``objects`` RayJobs, open ``watchers`` streams from ``readers`` processes, time
    ``writes`` fan-outs."""
    with run_kubesim(mode="subprocess") as sim:
        return asyncio.run(_measure(sim.url, objects, watchers, writes, rate_hz, selective, readers))


def run(
    objects: int = 5000, watchers: int = 1000, writes: int = 40, rate_hz: float = 2.0, readers: int = READERS
) -> dict:
    """Both shapes: every watcher sees every write (broadcast), and each write matches one watcher's
    label selector while the store still checks all 1,000 (selective: many informers, one object each)."""
    return {
        "broadcast": run_mode(objects, watchers, writes, rate_hz, selective=False, readers=readers),
        "selective": run_mode(objects, watchers, writes, rate_hz, selective=True, readers=readers),
    }
