"""Waiting under a permanent 403 on watch: what N RayJobTriggers of one triggerer cost when the API server
lets them list but not watch (a Role without ``watch``), next to the polling peer.

One kubesim subprocess (time-scale 1), the trigger benchmark's setup (``bench.trigger_scale``): N RayJobs
of 1 CPU queued behind a blocker in a 1-CPU ClusterQueue. Then:

1. Polling baseline (optional, as in ``trigger_scale.measure_polling``): N GETs per 10 s through
   ``AsyncKubernetesHook``, shaped like the cncf ``KubernetesJobTrigger`` (which never watches, so a 403
   on watch changes nothing for it); its requests per minute at the rate it achieved, and the nominal
   N × 6.
2. A fault rule answers every watch of ``rayjobs.ray.io`` and ``workloads.kueue.x-k8s.io`` in the
   namespace with the API server's 403 (``POST /kubesim/faults``), for the rest of the run.
3. ``bench.trigger_worker`` starts N ``RayJobTrigger``s on one loop. Startup lasts until both watch loops
   have been refused (the rule's ``hits``) and one polling interval more; then a window counts kubesim's
   requests per minute while everything waits, by verb and resource.
4. Waves: the quota is raised so N/4 run at a time until every trigger fired. A peer raw watch of all
   namespaces (the rule names the namespace, so the peer is not refused) records when each RayJob's
   Complete status reached a watcher; the detection latency is the trigger's TriggerEvent minus that, so
   it shows the polling interval.

Run it with ``python -m bench.run --only refused`` (the full profile runs N = 1,000).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from pathlib import Path

import aiohttp

from bench.kube import KUEUE, Api
from bench.stats import summary_ms
from bench.trigger_scale import (
    CLUSTER_QUEUE,
    DEFAULT_RESYNC_S,
    LIVE_WORKERS,
    LOG_DIR,
    NAMESPACE,
    POLL_INTERVAL_S,
    QUEUE,
    ROOT,
    Phases,
    Worker,
    _by_verb,
    _cluster_queue_quota,
    _delta,
    _log_warnings,
    measure_polling,
    observe_terminal,
    setup_jobs,
    wait_until,
)
from kubesim.testing import run_kubesim

WATCHED = ["rayjobs.ray.io", "workloads.kueue.x-k8s.io"]
DEGRADED_LIST_INTERVAL_S = 10.0
"""kueue_ray.hub.HubSettings.degraded_list_interval, the default the worker runs with."""


def refuse_watches() -> dict:
    return {"rules": [{"code": 403, "verbs": ["watch"], "resources": WATCHED, "namespace": NAMESPACE}]}


async def refused_hits(api: Api) -> int:
    rules = (await api.get("/kubesim/faults"))["rules"]
    return sum(rule["hits"] for rule in rules)


async def measure(
    url: str, kubeconfig: str, n: int, *, window_s: float, poll_window_s: float | None, workdir: Path
) -> dict:
    env = {
        **os.environ,
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
        ),
        "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}",
    }
    phases = Phases()
    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:
        api = Api(url, session)
        jobs = await setup_jobs(api, n, phases)
        spec = workdir / f"jobs-{n}.json"
        spec.write_text(
            json.dumps(
                {
                    "namespace": NAMESPACE,
                    "queue": QUEUE,
                    "resync_interval": DEFAULT_RESYNC_S,
                    "poll_interval": POLL_INTERVAL_S,
                    "jobs": jobs,
                }
            )
        )
        polling = None
        if poll_window_s is not None:
            polling = await measure_polling(api, n, spec, env, workdir, poll_window_s, POLL_INTERVAL_S)
            await api.quiet()
            phases.mark("polling")

        async with session.post(url + "/kubesim/faults", json=refuse_watches()) as response:
            response.raise_for_status()
        before = await api.stats()
        trigger_log = workdir / "trigger.log"
        trigger = Worker("bench.trigger_worker", spec, env, trigger_log)
        await trigger.start()

        async def both_refused() -> bool:
            return await refused_hits(api) >= len(WATCHED)

        await wait_until(both_refused, timeout_s=300, interval_s=0.2)
        await asyncio.sleep(DEGRADED_LIST_INTERVAL_S)
        started = await api.stats()
        start_usage = await trigger.usage()
        phases.mark("trigger_startup")
        await asyncio.sleep(window_s)
        waited = await api.stats()
        wait_usage = await trigger.usage()
        phases.mark("waiting")

        seen: dict[str, float] = {}
        stop = asyncio.Event()
        observer = asyncio.ensure_future(observe_terminal(url, seen, stop, all_namespaces=True))
        await asyncio.sleep(0.5)
        await api.patch(f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}", _cluster_queue_quota(1 + max(1, n // 4)))

        async def all_fired() -> bool:
            return len(trigger.fired) >= n

        await wait_until(all_fired, timeout_s=1800)
        done = await api.stats()
        phases.mark("waves")
        stop.set()
        await observer
        final = await trigger.stop()
        phases.mark("stop")
        rules = (await api.get("/kubesim/faults"))["rules"]

    latencies = [trigger.fired[name][0] - seen[name] for name in trigger.fired if name in seen]
    statuses: dict[str, int] = {}
    for _, status in trigger.fired.values():
        statuses[status] = statuses.get(status, 0) + 1
    waiting_requests = _delta(waited, started, api)
    durations = phases.durations()
    waves_s = durations["waves"]["s"]
    wave_requests = _delta(done, waited, api) - 1  # minus the observer's initial list
    return {
        "n": n,
        "workdir": str(workdir),
        "phases": durations,
        "polling": polling,
        "polling_nominal_per_min": round(n * 60 / POLL_INTERVAL_S),
        "degraded_list_interval_s": DEGRADED_LIST_INTERVAL_S,
        "trigger": {
            "startup_requests": _delta(started, before, api),
            "startup_by_verb": _by_verb(started, before),
            "window_s": window_s,
            "waiting_requests": waiting_requests,
            "waiting_requests_per_min": round(waiting_requests * 60 / window_s, 1),
            "waiting_by_verb": _by_verb(waited, started),
            "watch_streams_open_while_waiting": waited["watches_open"] - before["watches_open"],
            "refused_watches": sum(rule["hits"] for rule in rules),
            "wave_requests": wave_requests,
            "wave_requests_per_min": round(wave_requests * 60 / waves_s, 1) if waves_s else None,
            "waves_by_verb": _by_verb(done, waited),
            "waves_s": waves_s,
            "events": statuses,
            "latency_samples": len(latencies),
            "detection_latency": summary_ms(latencies),
            "cpu_s": {
                "startup": start_usage["usage"]["cpu_s"],
                "after_waiting": wait_usage["usage"]["cpu_s"],
                "end": final["final"]["cpu_s"],
            },
            "peak_rss_mib": final["final"]["peak_rss_mib"],
            "log": str(trigger_log),
            "log_warnings": _log_warnings(trigger_log, limit=5),
        },
    }


def run_one(
    n: int, *, window_s: float = 60.0, poll_window_s: float | None = 30.0, log_dir: Path = LOG_DIR
) -> dict:
    workdir = Path(log_dir) / f"refused-n{n}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    try:
        with run_kubesim(mode="subprocess", time_scale=1.0) as sim:
            return asyncio.run(
                measure(
                    sim.url,
                    sim.kubeconfig,
                    n,
                    window_s=window_s,
                    poll_window_s=poll_window_s,
                    workdir=workdir,
                )
            )
    finally:
        while LIVE_WORKERS:
            LIVE_WORKERS.pop().kill()


def run(n: int = 1000, window_s: float = 60.0, poll_window_s: float | None = 30.0) -> dict:
    started = time.monotonic()
    try:
        row = run_one(n, window_s=window_s, poll_window_s=poll_window_s)
    except Exception as exc:  # noqa: BLE001 - reported in the results
        return {"error": f"{type(exc).__name__}: {exc}"}
    row["run_s"] = round(time.monotonic() - started, 1)
    return row
