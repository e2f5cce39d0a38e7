"""Trigger scale (issue 7 §1): N RayJobTriggers waiting on N queued RayJobs, against a polling baseline.

One run, per N, against one kubesim subprocess (its CPU is not ours), through the shared
harness (``bench.harness``: its cluster setup, workers, phases and request accounting):

1. Setup: a ClusterQueue whose quota (1 CPU) is held by a ``blocker`` RayJob that runs forever, then N
   RayJobs of 1 CPU each queued behind it (QuotaReserved=False, Pending: "insufficient unused quota").
2. Polling baseline: ``bench.polling_worker`` (one GET per job per 10 s through ``AsyncKubernetesHook``,
   as the cncf ``KubernetesJobTrigger``; first polls spread over one interval) runs while everything
   waits; after one interval of warm-up, a window counts kubesim's requests against the nominal
   N × window / 10 s, the poll periods (did it keep 10 s?) and its CPU per poll. Its 10-simulated-minute
   count is the achieved request rate × 600 s. Above ``poll_max_n`` it is not run (``polling_skipped``).
3. ``bench.trigger_worker`` starts N ``RayJobTrigger``s on one loop. Startup traffic is counted until
   kubesim is quiet; then two waiting windows of different length count what waiting alone costs. The
   safety-net resync (the watch hub's relist of the namespace, every ``resync_interval``) is too rare for
   those windows; a probe process with a short interval measures what one costs.
4. Waves: the ClusterQueue quota is raised so N/4 RayJobs run at a time; as they finish, the next quarter
   is admitted, and so on until every trigger fired. A separate raw watch in this process records when
   each RayJob's terminal status (Complete) reached a watcher; the detection latency is the trigger's
   TriggerEvent wall time minus that.

Each phase's wall time and kubesim's CPU in it are recorded, the workers' logs stay under ``LOG_DIR``, and
every watch request of the triggers that ends is reported with why (``classify_watch_end``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench.harness.accounting import by_verb, delta, settled, streams_closed
from bench.harness.phases import Phases
from bench.harness.polling import POLL_INTERVAL_S, SIMULATED_MINUTES, polling_skipped
from bench.harness.triggers import (
    DEFAULT_RESYNC_S,
    STREAMS,
    detection,
    queued_jobs,
    start_triggers,
    waves,
    write_spec,
)
from bench.harness.workers import (
    LOG_DIR,
    Worker,
    fresh_workdir,
    in_kubesim,
    log_warnings,
    worker_env,
)
from bench.kube import Api, connect

RESYNC_PROBE_JOBS = 100
RESYNC_PROBE_S = 6.0
TARGETS = {
    "max_watch_streams": 4,
    "min_polling_over_trigger": 50,
    "max_p99_detection_ms": 250,
    "max_peak_rss_mib": 250,
}
"""Issue 7 §1's targets, stated at N = 1000; the report gives each N's verdict against them."""
SCALE_TARGETS = {
    3000: {"max_peak_rss_mib": 250},
    10000: {"max_peak_rss_mib": 400, "max_p99_detection_ms": 100},
}
"""Issue 17's targets for one triggerer at larger N, in place of those of ``TARGETS``."""


def targets_for(n: int) -> dict:
    return {**TARGETS, **SCALE_TARGETS.get(n, {})}


def classify_watch_end(end: dict) -> str:
    """Why one of the hub's watch requests ended, from its duration against the timeouts in play.

    The hub returns quietly in three cases (see ``bench.trigger_worker.report_watch_ends``); the cncf
    ``_TimeoutAsyncK8sApiClient`` gives every request whose ``call_api`` sees no ``timeout_seconds``
    keyword a total client timeout of ``API_TIMEOUT`` (60 s), and a watch passes its ``timeoutSeconds``
    only as a query parameter, so a watch asking for more is cut by the client at 60 s.
    """
    if end["ended"] != "returned":
        return "cancelled: the worker stopped" if end["ended"].startswith("CancelledError") else end["ended"]
    lasted, server, client = end["lasted_s"], end["timeout_s"], end["client_timeout_s"]
    if client < server and client - 0.5 <= lasted < client + 3.0:
        return f"client request timeout: cncf API_TIMEOUT ({client:g} s) < timeoutSeconds ({server} s)"
    if lasted >= server + end["grace_s"] - 0.5:
        return "the hub's own deadline (timeoutSeconds + grace) passed"
    if lasted >= server - 0.5:
        return "kubesim ended it at timeoutSeconds"
    return "the stream ended early (server or connection)"


def _watch_ends(ends: list[dict], phases: Phases) -> list[dict]:
    return [
        {**end, "phase": phases.at(end["opened"] + end["lasted_s"]), "why": classify_watch_end(end)}
        for end in ends
    ]


async def measure(
    url: str,
    kubeconfig: str,
    n: int,
    *,
    workdir: Path,
    windows: tuple[float, float] = (10.0, 20.0),
    poll_window: float | None = 30.0,
    resync_probe_s: float = RESYNC_PROBE_S,
    poll_interval: float = POLL_INTERVAL_S,
    detect_n: int | None = None,
) -> dict:
    """One N: set up, run the polling baseline (``poll_window`` None skips it), then the triggers.

    ``detect_n`` (None: all N, a quarter at a time) admits that many RayJobs at once and ends the waves
    once that many triggers fired: the detection latency of ``detect_n`` completions while N wait, where
    completing all N would take kubesim's Kueue hours (its cycle grows with the pending queue). The
    wave and 10-minute request counts then cover only those completions."""
    env = worker_env(kubeconfig)
    phases = Phases()
    async with connect(url) as api:
        jobs, spec, polling = await queued_jobs(
            api, n, phases, workdir, env, poll_window=poll_window, poll_interval=poll_interval
        )

        # -- the triggers: startup, two waiting windows, then the waves --
        trigger_log = workdir / "trigger.log"
        startup = await start_triggers(api, spec, env, trigger_log, phases)
        trigger, before, started = startup.worker, startup.before, startup.started
        imported = startup.reply.get("imported") or {}
        window_requests = []
        mark = started
        for window in windows:
            await asyncio.sleep(window)
            now = await api.stats()
            window_requests.append({"window_s": window, "requests": delta(now, mark, api)})
            mark = now
        wait_usage = await trigger.usage()
        streams_open = mark["watches_open"] - before["watches_open"]
        phases.mark("waiting")
        resync = await _resync_probe(api, jobs[: min(n, RESYNC_PROBE_JOBS)], env, workdir, resync_probe_s)
        mark = await api.stats()  # the waves start here: the probe's own traffic is not theirs
        phases.mark("resync_probe")

        fire = n if detect_n is None else min(n, detect_n)
        at_once = max(1, n // 4) if detect_n is None else fire
        seen, done = await waves(api, url, [trigger], phases, cpu=1 + at_once, fire=fire)
        end_usage = await trigger.usage()
        final = await trigger.stop()
        phases.mark("stop")

    startup_requests = delta(started, before, api)
    wave_requests = delta(done, mark, api) - 1  # minus the observer's initial list (its own session)
    # The hub relists per namespace, whatever N: what one resync costs times the resyncs in 10 minutes.
    resyncs_10min = SIMULATED_MINUTES * 60 / DEFAULT_RESYNC_S
    # Waiting itself: whatever the windows measured per second (0 when nothing grows with time), over
    # 10 minutes; the windows are too short to hold a relist, so the probe's cost is added for those.
    waited_s = sum(w["window_s"] for w in window_requests)
    waiting_rate = sum(w["requests"] for w in window_requests) / waited_s
    waiting_10min = round(
        resync["requests_per_resync"] * resyncs_10min + waiting_rate * SIMULATED_MINUTES * 60
    )
    trigger_10min = startup_requests + wave_requests + waiting_10min
    durations = phases.durations()
    return {
        "n": n,
        "workdir": str(workdir),
        "phases": durations,
        "create_s": durations["create"]["s"],
        "polling": polling,
        "trigger": {
            "startup_requests": startup_requests,
            "startup_by_verb": by_verb(started, before),
            "waves_by_verb": by_verb(done, mark),
            "waiting_windows": window_requests,
            "watch_streams_open_while_waiting": streams_open,
            "wave_requests": wave_requests,
            # watch requests opened during the waves (the observer's own one left out); kubesim counts a
            # watch in ``requests`` only when it ends, so this says how many were re-opened
            "wave_watches_opened": done["watches_opened_total"] - mark["watches_opened_total"] - 1,
            "watch_ends": _watch_ends(trigger.watch_ends, phases),
            "waves_s": durations["waves"]["s"],
            **detection(trigger, seen),
            "cpu_s": {
                "startup": startup.usage["usage"]["cpu_s"],
                "after_waiting": wait_usage["usage"]["cpu_s"],
                "after_waves": end_usage["usage"]["cpu_s"],
            },
            "fired_in_waves": len(trigger.fired),
            "rss_mib": {
                "after_imports": imported.get("rss_mib"),
                "after_startup": startup.usage["usage"]["rss_mib"],
                "after_waiting": wait_usage["usage"]["rss_mib"],
                "peak": final["final"]["peak_rss_mib"],
            },
            "resync_probe": resync,
            "waiting_requests_per_s": round(waiting_rate, 4),
            "waiting_requests_10_sim_min": waiting_10min,
            "requests_10_sim_min": trigger_10min,
            "log": str(trigger_log),
            "log_warnings": log_warnings(trigger_log),
        },
    }


async def _resync_probe(api: Api, jobs: list[dict], env: dict, workdir: Path, interval: float) -> dict:
    """What one safety-net resync costs: triggers with a short ``resync_interval`` over a fixed window.

    Run in its own process on the first jobs while they wait, after the main process's windows, so that
    the 300 s default can be accounted for over 10 simulated minutes without waiting 10 real minutes.
    The hub relists each resource every ``interval`` seconds (jittered down by up to 10%) after its first
    list, so a window of twice that length, once startup traffic has settled, holds two resyncs. A relist
    lists the whole namespace, so its cost does not depend on how many triggers the probe runs;
    ``requests_per_trigger_per_resync`` is only there to compare with the per-trigger re-reads it replaced.
    """
    spec = write_spec(workdir / "resync.json", jobs, resync_interval=interval)
    before = await api.stats()
    probe = Worker("bench.trigger_worker", spec, env, workdir / "resync.log")
    await probe.start()
    # Quiet for less than half an interval: the probe's own resyncs must not look like startup traffic.
    settled_at = await settled(api, streams=before["watches_open"] + STREAMS, quiet_s=min(2.0, interval / 2))
    await asyncio.sleep(2 * interval)
    after = await api.stats()
    await probe.stop()
    stopped = time.monotonic()

    # kubesim counts a watch request when its stream ends, which for a departed client is when its sweep
    # notices: until the probe's streams are closed, their requests would land in the next phase's count.
    await streams_closed(api, before["watches_open"])
    closed_after = time.monotonic() - stopped
    await api.quiet()
    requests = delta(after, settled_at, api)
    resyncs = 2
    return {
        "jobs": len(jobs),
        "streams_closed_s_after_exit": round(closed_after, 2),
        "resync_interval_s": interval,
        "window_s": 2 * interval,
        "requests": requests,
        "by_verb": by_verb(after, settled_at),
        "requests_per_resync": requests / resyncs,
        "requests_per_trigger_per_resync": round(requests / (len(jobs) * resyncs), 3),
    }


def run_one(n: int, *, time_scale: float = 1.0, log_dir: Path = LOG_DIR, **settings: Any) -> dict:
    """One N against a fresh kubesim, ``measure``d with ``settings`` (its keyword arguments: ``windows``,
    ``poll_window``, ``poll_interval``, ``resync_probe_s``, ``detect_n``); ``time_scale`` shortens the
    RayJobs' simulated run and ``poll_interval`` the baseline's 10 s (smoke test only: the figures assume
    10 s).

    The workers' logs and spec files stay in ``log_dir``/n<N> (emptied first), named in the result.
    """
    workdir = fresh_workdir(log_dir, f"n{n}")

    async def one(url: str, kubeconfig: str) -> dict:
        return await measure(url, kubeconfig, n, workdir=workdir, **settings)

    return in_kubesim(one, time_scale=time_scale)


def compare(row: dict, polled: list[dict]) -> None:
    """Add the polling ÷ trigger ratio over 10 simulated minutes to ``row``: from the baseline measured at
    this N, or, where it was skipped, derived from the largest N that measured it (and marked so)."""
    if row["polling"] is None:
        row["polling"] = polling_skipped(row["n"], polled)
    polling = row["polling"]
    trigger_10min = max(1, row["trigger"]["requests_10_sim_min"])
    measured = polling.get("requests_10_sim_min")
    basis = measured if measured is not None else polling.get("derived_10_sim_min")
    row["polling_over_trigger_10_sim_min"] = None if basis is None else round(basis / trigger_10min, 1)
    row["polling_ratio_derived"] = measured is None


def verdicts(row: dict) -> list[dict]:
    """Each issue 7 §1 target against this N's figures: what it asks, what was measured, met or not
    (None when there is nothing to judge)."""
    t, polling = row["trigger"], row["polling"]
    targets = targets_for(row["n"])
    ratio = row["polling_over_trigger_10_sim_min"]
    p99 = t["detection_latency"]["p99_ms"]
    waiting = [w["requests"] for w in t["waiting_windows"]]
    waiting_ends = sorted({e["why"] for e in t["watch_ends"] if e["phase"] in ("trigger_startup", "waiting")})
    basis = (
        "derived from the baseline's per-poll cost at a smaller N"
        if row["polling_ratio_derived"]
        else "measured"
    )
    if "skipped" not in polling and not polling["kept_interval"]:
        basis += (
            f"; the poller did NOT keep its 10 s interval ({polling['achieved_share']:.0%} of nominal GETs)"
        )
    return [
        {
            "target": f"≤ {targets['max_watch_streams']} open watch streams",
            "measured": str(t["watch_streams_open_while_waiting"]),
            "ok": t["watch_streams_open_while_waiting"] <= targets["max_watch_streams"],
        },
        {
            "target": f"≥ {targets['min_polling_over_trigger']}× fewer requests than polling over 10 simulated min",
            "measured": f"{ratio}× ({basis})",
            "ok": None if ratio is None else ratio >= targets["min_polling_over_trigger"],
        },
        {
            "target": f"p99 detection latency < {targets['max_p99_detection_ms']} ms",
            "measured": f"{p99} ms",
            "ok": p99 < targets["max_p99_detection_ms"],
        },
        {
            "target": f"peak RSS < {targets['max_peak_rss_mib']} MiB",
            "measured": f"{t['rss_mib']['peak']} MiB",
            "ok": t["rss_mib"]["peak"] < targets["max_peak_rss_mib"],
        },
        {
            "target": "requests grow with state transitions, not with waiting time",
            "measured": f"waiting windows {waiting} requests"
            + (f"; watches ended while waiting: {', '.join(waiting_ends)}" if waiting_ends else ""),
            "ok": not any(waiting),
        },
    ]


def run(
    sizes: tuple[int, ...] = (100, 1000), *, poll_max_n: int = 1000, poll_window: float = 30.0, **kwargs
) -> dict:
    """Every N in turn, each against its own fresh kubesim; the polling baseline only up to ``poll_max_n``
    (beyond it, one poller process cannot keep a 10 s interval on this machine: see `polling_skipped`)."""
    rows: list[dict] = []
    for n in sizes:
        try:
            row = run_one(n, poll_window=poll_window if n <= poll_max_n else None, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the other sizes still measure
            rows.append({"n": n, "error": f"{type(exc).__name__}: {exc}"})
            continue
        compare(row, [r for r in rows if "error" not in r and "skipped" not in r["polling"]])
        row["verdicts"] = verdicts(row)
        rows.append(row)
    return {"rows": rows, "log_dir": str(kwargs.get("log_dir", LOG_DIR)), "targets": TARGETS}
