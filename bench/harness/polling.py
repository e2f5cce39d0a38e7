"""The polling baseline at the same N: ``bench.polling_worker`` sends one GET per job per interval through
``AsyncKubernetesHook``, as the cncf ``KubernetesJobTrigger`` does, while everything waits."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from bench.harness.accounting import delta
from bench.harness.phases import Phases
from bench.harness.workers import Worker
from bench.kube import Api
from bench.stats import summary_ms

POLL_INTERVAL_S = 10.0
SIMULATED_MINUTES = 10
KEPT_INTERVAL_SHARE = 0.95
"""The poller kept its 10 s interval if it sent at least this share of the nominal GETs in its window..."""
KEPT_PERIOD_P99_SHARE = 1.2
"""... and 99% of its jobs' poll-to-poll periods stayed within this many intervals (the sleep + the GET)."""


async def measure_polling(
    api: Api, n: int, spec: Path, env: dict, workdir: Path, window: float, interval: float
) -> dict:
    """The polling baseline over ``window`` seconds of steady state, while everything waits.

    The pollers' first polls spread over one interval, so the window opens one interval (plus a second)
    after the worker is up. Its figures: kubesim's request delta against the nominal N × window / 10 s,
    the polls answered and their periods, and the worker's CPU and peak RSS. ``requests_per_poll`` is
    over the poller's whole life instead (it stops between polls): a window's edges cut polls in flight,
    and on a loaded machine a stalled poller answers a window's GETs after it closed.
    """
    poller = Worker("bench.polling_worker", spec, env, workdir / "poll.log")
    life_before = await api.stats()
    try:
        await poller.start()
        await asyncio.sleep(interval + 1.0)
        first = await poller.usage()
        before = await api.stats()
        await asyncio.sleep(window)
        after = await api.stats()
        last = await poller.usage()
        final = await poller.stop()
    finally:
        poller.kill()
    life_requests = delta(await api.stats(), life_before, api)
    requests = delta(after, before, api)
    polls = last["polls"] - first["polls"]
    nominal = n * window / interval
    achieved = requests / nominal
    periods = last["periods"]
    period = summary_ms(periods)
    kept = (
        achieved >= KEPT_INTERVAL_SHARE
        and bool(periods)
        and period["p99_ms"] <= KEPT_PERIOD_P99_SHARE * interval * 1000
    )
    cpu_s = final["final"]["cpu_s"] - first["usage"]["cpu_s"]
    return {
        "interval_s": interval,
        "window_s": window,
        "requests": requests,
        "nominal_requests": round(nominal),
        "achieved_share": round(achieved, 3),
        "polls": polls,
        "requests_per_poll": round(life_requests / final["polls"], 3) if final["polls"] else None,
        "poll_period_s": {k: (v / 1000 if k != "count" else v) for k, v in period.items()},
        "kept_interval": kept,
        # what this poller sends over 10 simulated minutes at the rate it actually achieved
        "requests_10_sim_min": round(requests / window * SIMULATED_MINUTES * 60),
        # what the 10 s shape asks for: N GETs every interval
        "nominal_10_sim_min": round(n * SIMULATED_MINUTES * 60 / interval),
        "cpu_s_in_window": round(cpu_s, 2),
        "cpu_ms_per_poll": round(cpu_s * 1000 / polls, 1) if polls else None,
        "cpu_s": final["final"]["cpu_s"],
        "peak_rss_mib": final["final"]["peak_rss_mib"],
        "log": str(workdir / "poll.log"),
    }


async def baseline(
    api: Api,
    n: int,
    spec: Path,
    env: dict,
    workdir: Path,
    phases: Phases,
    window: float | None,
    interval: float,
) -> dict | None:
    """``measure_polling``, then kubesim quiet again; ends the ``polling`` phase. None (and no phase) when
    ``window`` is None: the baseline is not run at this N."""
    if window is None:
        return None
    polling = await measure_polling(api, n, spec, env, workdir, window, interval)
    await api.quiet()
    phases.mark("polling")
    return polling


def polling_skipped(n: int, measured: list[dict]) -> dict:
    """Why the baseline is not run at this N, from what it cost at the largest N it was run at."""
    if not measured:
        return {"skipped": f"N = {n} is above poll_max_n and no smaller N measured the baseline"}
    ref = max(measured, key=lambda row: row["n"])
    per_poll = ref["polling"]["cpu_ms_per_poll"]
    interval = ref["polling"]["interval_s"]
    needed = None if per_poll is None else round(per_poll / 1000 * n / interval, 2)
    return {
        "skipped": f"N = {n} is above poll_max_n: at N = {ref['n']} one poll cost {per_poll} CPU-ms, so "
        f"{n} polls per {interval:g} s need {needed} cores for the poller alone (this machine has "
        f"{os.cpu_count()}, shared with kubesim and the triggers)",
        "reference_n": ref["n"],
        "cores_needed": needed,
        # the baseline's shape (requests per poll as measured at the reference N) over 10 simulated minutes
        "derived_10_sim_min": None
        if ref["polling"]["requests_per_poll"] is None
        else round(ref["polling"]["requests_per_poll"] * n * SIMULATED_MINUTES * 60 / interval),
    }
