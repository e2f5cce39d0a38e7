"""The trigger worker's life in a benchmark: started into the queued cluster (its startup traffic counted
until it settles), then the waves that let the queue run until enough triggers fired, with a raw watch as
the reference for the detection latency."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness.accounting import by_verb, delta, settled
from bench.harness.cluster import NAMESPACE, QUEUE, WATCHED, observe_terminal, raise_quota, setup_jobs
from bench.harness.phases import Phases, wait_until
from bench.harness.polling import baseline
from bench.harness.workers import Worker
from bench.kube import Api
from bench.stats import summary_ms

DEFAULT_RESYNC_S = 300.0
"""RayJobTrigger's default ``resync_interval`` (kueue_ray.wait_policy.DEFAULT_RESYNC_SECONDS): the hub's relist
period, which the workers run with as a triggerer would."""
STREAMS = len(WATCHED)
"""Watch streams one trigger process holds whatever its N: the hub's RayJob and Workload watches."""


def write_spec(
    path: Path, objects: list[dict], *, resync_interval: float = DEFAULT_RESYNC_S, **settings: Any
) -> Path:
    """The spec file a worker reads: what it waits on (``jobs``) in the benchmark's namespace and queue,
    the hub's ``resync_interval`` and any other setting (``poll_interval``, ``kind``). The waits deferred
    now unless ``deferred_at`` says when (as the operator passes it): a worker started again later, as a
    restarted triggerer, runs triggers that deferred long ago."""
    spec = {
        "deferred_at": datetime.now(UTC).isoformat(),
        **settings,
        "namespace": NAMESPACE,
        "queue": QUEUE,
        "resync_interval": resync_interval,
        "jobs": objects,
    }
    path.write_text(json.dumps(spec))
    return path


@dataclass
class Startup:
    worker: Worker
    reply: dict
    """The worker's first line (its ``started`` count, ``usage``, and ``imported``)."""
    before: dict
    """kubesim's stats just before the worker started."""
    started: dict
    """kubesim's stats once the worker settled."""
    usage: dict
    """The worker's CPU and RSS once it settled."""


async def start_triggers(
    api: Api,
    spec: Path,
    env: dict,
    log: Path,
    phases: Phases,
    *,
    ready: Callable[[], Awaitable[dict]] | None = None,
    phase: str = "trigger_startup",
) -> Startup:
    """Start ``bench.trigger_worker`` on ``spec`` and wait until it settled: by default its watch streams
    open, kubesim quiet for 3 s and the worker idle (``Worker.idle``) with no request since, else until
    ``ready()`` (which returns kubesim's stats then). Ends the
    phase named ``phase``."""
    before = await api.stats()
    worker = Worker("bench.trigger_worker", spec, env, log)
    reply = await worker.start()
    if ready is None:
        # Settled: its streams open, kubesim quiet, the worker idle, and still no request since.
        while True:
            started = await settled(api, streams=before["watches_open"] + STREAMS)
            idle = await worker.idle()
            if api.foreign_requests(await api.stats()) == api.foreign_requests(started):
                break
        if not idle:
            print(f"{log.name}: the worker never went idle; measured busy", flush=True)
    else:
        started = await ready()
    usage = await worker.usage()
    phases.mark(phase)
    return Startup(worker, reply, before, started, usage)


async def queued_jobs(
    api: Api,
    n: int,
    phases: Phases,
    workdir: Path,
    env: dict,
    *,
    poll_window: float | None,
    poll_interval: float,
) -> tuple[list[dict], Path, dict | None]:
    """N RayJobs queued behind the blocker, their spec file (``jobs-<N>.json``), and the polling baseline
    measured on them (None when ``poll_window`` is None)."""
    jobs = await setup_jobs(api, n, phases)
    spec = write_spec(workdir / f"jobs-{n}.json", jobs, poll_interval=poll_interval)
    polling = await baseline(api, n, spec, env, workdir, phases, poll_window, poll_interval)
    return jobs, spec, polling


@dataclass
class Waited:
    stats: dict
    """kubesim's stats at the window's end."""
    usage: dict
    """The worker's CPU and RSS then."""
    figures: dict
    """What startup and the window cost: requests, by verb and resource, and watch streams held."""


async def wait_window(api: Api, startup: Startup, phases: Phases, window_s: float) -> Waited:
    """Everything waits for ``window_s`` after startup; ends the ``waiting`` phase."""
    await asyncio.sleep(window_s)
    waited = await api.stats()
    usage = await startup.worker.usage()
    phases.mark("waiting")
    before, started = startup.before, startup.started
    waiting = delta(waited, started, api)
    figures = {
        "startup_requests": delta(started, before, api),
        "startup_by_verb": by_verb(started, before),
        "window_s": window_s,
        "waiting_requests": waiting,
        "waiting_requests_per_min": round(waiting * 60 / window_s, 1),
        "waiting_by_verb": by_verb(waited, started),
        "watch_streams_open_while_waiting": waited["watches_open"] - before["watches_open"],
    }
    return Waited(waited, usage, figures)


async def waves(
    api: Api,
    url: str,
    workers: list[Worker],
    phases: Phases,
    *,
    cpu: int,
    fire: int,
    all_namespaces: bool = False,
) -> tuple[dict[str, float], dict]:
    """Raise the quota to ``cpu`` and wait until ``fire`` triggers fired in ``workers`` together, while a
    raw watch records when each RayJob's terminal status reached a watcher. Ends the ``waves`` phase;
    returns what the watch saw (name -> wall time) and kubesim's stats once enough fired (they include the
    watch's initial list)."""
    seen: dict[str, float] = {}
    stop = asyncio.Event()
    observer = asyncio.ensure_future(observe_terminal(url, seen, stop, all_namespaces=all_namespaces))
    await asyncio.sleep(0.5)
    await raise_quota(api, cpu)

    async def all_fired() -> bool:
        return sum(len(worker.fired) for worker in workers) >= fire

    await wait_until(all_fired, timeout_s=1800)
    done = await api.stats()
    phases.mark("waves")
    stop.set()
    await observer
    return seen, done


def detection(worker: Worker, seen: dict[str, float]) -> dict:
    """The result's trigger events by status and the detection latency against what the raw watch saw."""
    latencies = worker.latencies(seen)
    return {
        "events": worker.statuses(),
        "latency_samples": len(latencies),
        "detection_latency": summary_ms(latencies),
    }


def cpu_s(started: dict, waited: dict, final: dict) -> dict:
    """The worker's CPU seconds once settled, after waiting, and at its end (its ``usage`` / ``quit``
    replies)."""
    return {
        "startup": started["usage"]["cpu_s"],
        "after_waiting": waited["usage"]["cpu_s"],
        "end": final["final"]["cpu_s"],
    }
