"""Deferred RayService waits: what N ``RayServiceTrigger``s of one triggerer cost the API server while
their services queue, and when the queue moves.

One kubesim subprocess (time-scale 1, Kueue's shipped configuration: a RayService is admitted as one
Workload), the benchmarks' queue (``bench.harness.cluster``): a 1-CPU ClusterQueue held by a
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
import json
import sys
import time
from pathlib import Path

from bench.harness.accounting import by_verb, delta
from bench.harness.cluster import MANAGED, NAMESPACE, block_queue, create_each, queued, raise_quota
from bench.harness.phases import Phases, wait_until
from bench.harness.polling import POLL_INTERVAL_S
from bench.harness.triggers import cpu_s, start_triggers, wait_window, write_spec
from bench.harness.workers import LOG_DIR, fresh_workdir, in_kubesim, log_warnings, worker_env
from bench.kube import RAY, Api, connect
from devtools.signals import stop_on_signals

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


async def setup_services(api: Api, n: int, phases: Phases) -> list[dict]:
    """The blocker running, then N RayServices queued behind it (every Workload created)."""
    await block_queue(api, phases)

    async def one(i: int) -> dict:
        created = await api.create(f"{RAY}/namespaces/{NAMESPACE}/rayservices", rayservice(f"svc-{i:05d}"))
        meta = created["metadata"]
        return {"name": meta["name"], "uid": meta["uid"], "generation": meta.get("generation")}

    services = await create_each(n, one)
    phases.mark("create")
    await queued(api, n, phases)
    return services


async def measure(url: str, kubeconfig: str, n: int, *, window_s: float, workdir: Path) -> dict:
    env = worker_env(kubeconfig)
    phases = Phases()
    async with connect(url) as api:
        services = await setup_services(api, n, phases)
        spec = write_spec(workdir / f"services-{n}.json", services, kind="rayservice")
        log = workdir / "trigger.log"
        startup = await start_triggers(api, spec, env, log, phases)
        worker = startup.worker
        waited = await wait_window(api, startup, phases, window_s)

        await raise_quota(api, 1 + n)

        async def all_fired() -> bool:
            return len(worker.fired) >= n

        await wait_until(all_fired, timeout_s=1800)
        served = await api.stats()
        phases.mark("serving")
        final = await worker.stop()
        phases.mark("stop")

    durations = phases.durations()
    return {
        "n": n,
        "workdir": str(workdir),
        "phases": durations,
        **waited.figures,
        "polling_nominal_per_min": round(n * 60 / POLL_INTERVAL_S),
        "serving_s": durations["serving"]["s"],
        "serving_requests": delta(served, waited.stats, api),
        "serving_by_verb": by_verb(served, waited.stats),
        "events": worker.statuses(),
        "cpu_s": cpu_s(startup.usage, waited.usage, final),
        "peak_rss_mib": final["final"]["peak_rss_mib"],
        "log": str(log),
        "log_warnings": log_warnings(log, limit=5),
    }


def run(n: int = 200, window_s: float = 60.0, log_dir: Path = LOG_DIR) -> dict:
    workdir = fresh_workdir(log_dir, f"services-n{n}")
    started = time.monotonic()

    async def one(url: str, kubeconfig: str) -> dict:
        return await measure(url, kubeconfig, n, window_s=window_s, workdir=workdir)

    row = in_kubesim(one)
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
    stop_on_signals()  # a benchmark stopped with kill stops its kubesim and Airflow
    sys.exit(main())
