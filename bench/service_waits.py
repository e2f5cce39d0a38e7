"""Deferred RayService waits: what N ``RayServiceTrigger``s of one triggerer cost the API server while
their services queue, and when the queue moves.

One kubesim subprocess (time-scale 1, Kueue's shipped configuration: a RayService is admitted as one
Workload), the trigger benchmark's queue (``bench.trigger_scale``): a 1-CPU ClusterQueue held by a
``blocker`` RayJob that runs forever. Then:

1. N RayServices of 1 CPU (one head, one Serve application with one deployment, ready 2 simulated
   seconds after their pods start) are created with the deploy operator's labels; Kueue suspends each
   and queues its Workload behind the blocker.
2. ``bench.trigger_worker`` starts N ``RayServiceTrigger``s on one loop (what N deferred
   ``DeployRayServiceOperator`` tasks are in a triggerer). Startup lasts until its watch streams are open
   and kubesim was quiet for 3 s; then a window counts kubesim's requests while everything waits, by verb
   and resource, and the watch streams the worker holds open.
3. Serving: the quota is raised so every service is admitted at once; each trigger fires once its
   application is RUNNING with every deployment HEALTHY. The window counts the requests until every
   trigger fired (the triggers read nothing per change: every change arrives on the two shared watches).

Nothing here holds an Airflow worker slot: a deferred task is a trigger in the triggerer, which is this
worker process. The comparison is a per-task poll of the RayService every 10 s (the cncf provider's
triggers' interval), N × 6 requests a minute.

Run: ``.venv/bin/python -m bench.service_waits --n 200 --window 60 --out bench/results/service-waits.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path

import aiohttp

from bench.kube import KUEUE, RAY, Api
from bench.trigger_scale import (
    CLUSTER_QUEUE,
    DEFAULT_RESYNC_S,
    LIVE_WORKERS,
    LOG_DIR,
    MANAGED,
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
    _settled,
    rayjob,
    setup_queue,
    wait_until,
)
from kubesim.testing import run_kubesim

SERVE_CONFIG = (
    "applications:\n  - name: forecast\n    import_path: serve_model:app\n"
    "    deployments:\n      - name: Forecaster\n"
)


def rayservice(name: str) -> dict:
    """A RayService of one 1-CPU / 1Gi head, labelled as the deploy operator labels its services."""
    resources = {"cpu": "1", "memory": "1Gi"}
    head = {"name": "ray-head", "image": "rayproject/ray:2.46.0", "resources": {"requests": resources}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name, "labels": dict(MANAGED), "annotations": {"kubesim.dev/startup": "2"}},
        "spec": {
            "serveConfigV2": SERVE_CONFIG,
            "rayClusterConfig": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}}
            },
        },
    }


async def setup_services(api: Api, n: int, phases: Phases, parallel: int = 16) -> list[dict]:
    """The blocker running, then N RayServices queued behind it (every Workload created)."""
    await setup_queue(api)
    await api.create(
        f"{RAY}/namespaces/{NAMESPACE}/rayjobs", rayjob("blocker", managed=False, duration="inf")
    )

    async def blocker_runs() -> bool:
        found = await api.get(f"{RAY}/namespaces/{NAMESPACE}/rayjobs/blocker")
        return (found.get("status") or {}).get("jobDeploymentStatus") == "Running"

    await wait_until(blocker_runs, timeout_s=120)
    phases.mark("setup")
    gate = asyncio.Semaphore(parallel)

    async def one(i: int) -> dict:
        async with gate:
            created = await api.create(
                f"{RAY}/namespaces/{NAMESPACE}/rayservices", rayservice(f"svc-{i:05d}")
            )
        meta = created["metadata"]
        return {"name": meta["name"], "uid": meta["uid"], "generation": meta.get("generation")}

    services = list(await asyncio.gather(*(one(i) for i in range(n))))
    phases.mark("create")

    async def all_workloads() -> bool:
        return (await api.stats())["objects"].get("Workload", 0) >= n + 1

    await wait_until(all_workloads, timeout_s=600)
    await api.quiet()
    phases.mark("queue")
    return services


async def measure(url: str, kubeconfig: str, n: int, *, window_s: float, workdir: Path) -> dict:
    env = {
        **os.environ,
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
        ),
        "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}",
    }
    phases = Phases()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:
        api = Api(url, session)
        services = await setup_services(api, n, phases)
        spec = workdir / f"services-{n}.json"
        spec.write_text(
            json.dumps(
                {
                    "kind": "rayservice",
                    "namespace": NAMESPACE,
                    "queue": QUEUE,
                    "resync_interval": DEFAULT_RESYNC_S,
                    "jobs": services,
                }
            )
        )
        before = await api.stats()
        log = workdir / "trigger.log"
        worker = Worker("bench.trigger_worker", spec, env, log)
        await worker.start()
        started = await _settled(api, streams=before["watches_open"] + 2)
        start_usage = await worker.usage()
        phases.mark("trigger_startup")
        await asyncio.sleep(window_s)
        waited = await api.stats()
        wait_usage = await worker.usage()
        phases.mark("waiting")

        await api.patch(f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}", _cluster_queue_quota(1 + n))

        async def all_fired() -> bool:
            return len(worker.fired) >= n

        await wait_until(all_fired, timeout_s=1800)
        served = await api.stats()
        phases.mark("serving")
        final = await worker.stop()
        phases.mark("stop")

    statuses: dict[str, int] = {}
    for _, status in worker.fired.values():
        statuses[status] = statuses.get(status, 0) + 1
    waiting = _delta(waited, started, api)
    durations = phases.durations()
    return {
        "n": n,
        "workdir": str(workdir),
        "phases": durations,
        "startup_requests": _delta(started, before, api),
        "startup_by_verb": _by_verb(started, before),
        "window_s": window_s,
        "waiting_requests": waiting,
        "waiting_requests_per_min": round(waiting * 60 / window_s, 1),
        "waiting_by_verb": _by_verb(waited, started),
        "watch_streams_open_while_waiting": waited["watches_open"] - before["watches_open"],
        "polling_nominal_per_min": round(n * 60 / POLL_INTERVAL_S),
        "serving_s": durations["serving"]["s"],
        "serving_requests": _delta(served, waited, api),
        "serving_by_verb": _by_verb(served, waited),
        "events": statuses,
        "cpu_s": {
            "startup": start_usage["usage"]["cpu_s"],
            "after_waiting": wait_usage["usage"]["cpu_s"],
            "end": final["final"]["cpu_s"],
        },
        "peak_rss_mib": final["final"]["peak_rss_mib"],
        "log": str(log),
        "log_warnings": _log_warnings(log, limit=5),
    }


def run(n: int = 200, window_s: float = 60.0, log_dir: Path = LOG_DIR) -> dict:
    workdir = Path(log_dir) / f"services-n{n}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    started = time.monotonic()
    try:
        with run_kubesim(mode="subprocess", time_scale=1.0) as sim:
            row = asyncio.run(measure(sim.url, sim.kubeconfig, n, window_s=window_s, workdir=workdir))
    finally:
        while LIVE_WORKERS:
            LIVE_WORKERS.pop().kill()
    row["run_s"] = round(time.monotonic() - started, 1)
    return row


def render(row: dict) -> str:
    waiting = ", ".join(f"{k} {v}" for k, v in row["waiting_by_verb"].items()) or "none"
    serving = ", ".join(f"{k} {v}" for k, v in row["serving_by_verb"].items()) or "none"
    return "\n".join(
        [
            f"| N deferred RayService waits | {row['n']} |",
            "|---|---|",
            f"| watch streams held while waiting | {row['watch_streams_open_while_waiting']} |",
            f"| startup requests (every trigger's first read) | {row['startup_requests']} |",
            f"| requests in {row['window_s']:g} s of waiting | {row['waiting_requests']} ({waiting}) |",
            f"| a 10 s poll per task, nominal | {row['polling_nominal_per_min']} / min |",
            f"| quota for all → every trigger fired SERVING | {row['serving_s']} s, "
            f"{row['serving_requests']} requests ({serving}); events {row['events']} |",
            f"| trigger process CPU s (startup / +waiting / end), peak RSS | "
            f"{row['cpu_s']['startup']} / {row['cpu_s']['after_waiting']} / {row['cpu_s']['end']}, "
            f"{row['peak_rss_mib']} MiB |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    row = run(args.n, args.window)
    if args.out:
        args.out.write_text(json.dumps(row, indent=2) + "\n")
    print(render(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
