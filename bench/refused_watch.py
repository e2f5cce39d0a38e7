"""Waiting under a permanent 403 on watch: what N RayJobTriggers of one triggerer cost when the API server
lets them list but not watch (a Role without ``watch``), next to the polling peer.

One kubesim subprocess (time-scale 1), the trigger benchmark's setup (``bench.harness.cluster.setup_jobs``): N RayJobs
of 1 CPU queued behind a blocker in a 1-CPU ClusterQueue. Then:

1. Polling baseline (optional, ``bench.harness.polling``): N GETs per 10 s through
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
import time
from pathlib import Path

from bench.harness.accounting import by_verb, delta
from bench.harness.cluster import NAMESPACE, WATCHED, set_faults
from bench.harness.phases import Phases, wait_until
from bench.harness.polling import POLL_INTERVAL_S
from bench.harness.triggers import cpu_s, detection, queued_jobs, start_triggers, wait_window, waves
from bench.harness.workers import LOG_DIR, fresh_workdir, in_kubesim, log_warnings, worker_env
from bench.kube import Api, connect

DEGRADED_LIST_INTERVAL_S = 10.0
"""kueue_ray.hub.HubSettings.degraded_list_interval, the default the worker runs with."""


def refuse_watches() -> list[dict]:
    return [{"code": 403, "verbs": ["watch"], "resources": WATCHED, "namespace": NAMESPACE}]


async def refused_hits(api: Api) -> int:
    rules = (await api.get("/kubesim/faults"))["rules"]
    return sum(rule["hits"] for rule in rules)


async def measure(
    url: str, kubeconfig: str, n: int, *, window_s: float, poll_window_s: float | None, workdir: Path
) -> dict:
    env = worker_env(kubeconfig)
    phases = Phases()
    async with connect(url) as api:
        _, spec, polling = await queued_jobs(
            api, n, phases, workdir, env, poll_window=poll_window_s, poll_interval=POLL_INTERVAL_S
        )

        await set_faults(api, refuse_watches())

        async def refused_then_listing() -> dict:
            async def both_refused() -> bool:
                return await refused_hits(api) >= len(WATCHED)

            await wait_until(both_refused, timeout_s=300, interval_s=0.2)
            await asyncio.sleep(DEGRADED_LIST_INTERVAL_S)
            return await api.stats()

        trigger_log = workdir / "trigger.log"
        startup = await start_triggers(api, spec, env, trigger_log, phases, ready=refused_then_listing)
        trigger = startup.worker
        waited = await wait_window(api, startup, phases, window_s)

        seen, done = await waves(
            api, url, [trigger], phases, cpu=1 + max(1, n // 4), fire=n, all_namespaces=True
        )
        final = await trigger.stop()
        phases.mark("stop")
        rules = (await api.get("/kubesim/faults"))["rules"]

    durations = phases.durations()
    waves_s = durations["waves"]["s"]
    wave_requests = delta(done, waited.stats, api) - 1  # minus the observer's initial list
    return {
        "n": n,
        "workdir": str(workdir),
        "phases": durations,
        "polling": polling,
        "polling_nominal_per_min": round(n * 60 / POLL_INTERVAL_S),
        "degraded_list_interval_s": DEGRADED_LIST_INTERVAL_S,
        "trigger": {
            **waited.figures,
            "refused_watches": sum(rule["hits"] for rule in rules),
            "wave_requests": wave_requests,
            "wave_requests_per_min": round(wave_requests * 60 / waves_s, 1) if waves_s else None,
            "waves_by_verb": by_verb(done, waited.stats),
            "waves_s": waves_s,
            **detection(trigger, seen),
            "cpu_s": cpu_s(startup.usage, waited.usage, final),
            "peak_rss_mib": final["final"]["peak_rss_mib"],
            "log": str(trigger_log),
            "log_warnings": log_warnings(trigger_log, limit=5),
        },
    }


def run_one(
    n: int, *, window_s: float = 60.0, poll_window_s: float | None = 30.0, log_dir: Path = LOG_DIR
) -> dict:
    workdir = fresh_workdir(log_dir, f"refused-n{n}")

    async def one(url: str, kubeconfig: str) -> dict:
        return await measure(
            url, kubeconfig, n, window_s=window_s, poll_window_s=poll_window_s, workdir=workdir
        )

    return in_kubesim(one)


def run(n: int = 1000, window_s: float = 60.0, poll_window_s: float | None = 30.0) -> dict:
    started = time.monotonic()
    try:
        row = run_one(n, window_s=window_s, poll_window_s=poll_window_s)
    except Exception as exc:  # noqa: BLE001 - reported in the results
        return {"error": f"{type(exc).__name__}: {exc}"}
    row["run_s"] = round(time.monotonic() - started, 1)
    return row
