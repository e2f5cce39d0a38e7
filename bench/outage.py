"""What an outage costs the API server: requests sent by N waiting tasks whose triggerer starts while every
request is answered 503, or while its first list of each resource takes seconds, before and after the
hub's shared reads (``kueue_ray.hub.reads``), in one run.

One kubesim subprocess per condition (time-scale 1) with the trigger benchmark's setup
(``bench.harness.cluster.setup_jobs``: N RayJobs of 1 CPU queued behind a blocker, so no trigger fires). For
each code under test (``--before``: a checkout of the plugin before the change, e.g. ``git archive main
plugins``; then this checkout's), one ``bench.trigger_worker`` process starts N ``RayJobTrigger``s on one
loop, as a triggerer restarting with N deferred tasks does:

* **outage**: a fault rule answers every API request with 503 (``{"code": 503}``) from just before the
  worker starts until ``outage_s`` after it reported its triggers started; then the rule is cleared.
* **slow first list**: a rule holds the next list of RayJobs and of Workloads in the namespace
  ``slow_list_s`` seconds before serving it (``{"delay_s": ..., "count": 2}``).

Counted: kubesim's requests (the harness's own left out) from the worker's start until both of its
watches are open again after the condition ended and kubesim has been quiet for ``QUIET_S``, by verb and resource; kubesim logs a watch when its stream
ends, so the watches still open then are counted apart (``watches_opened``). Then the worker is stopped
and the next code runs against the same cluster.

``python -m bench.outage --before /tmp/outage-before --out bench/results/outage.json``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from bench.harness.accounting import by_verb, delta
from bench.harness.cluster import NAMESPACE, WATCHED, set_faults, setup_jobs
from bench.harness.phases import Phases, wait_until
from bench.harness.polling import POLL_INTERVAL_S
from bench.harness.triggers import write_spec
from bench.harness.workers import LOG_DIR, ROOT, Worker, fresh_workdir, in_kubesim, worker_env
from bench.kube import Api, connect
from devtools.signals import stop_on_signals

QUIET_S = 5.0
"""No request for this long after the condition ended: the triggers settled (the default relist is 300 s)."""


async def _one(
    api: Api, code: str, plugins: Path, spec: Path, env: dict, workdir: Path, condition: dict
) -> dict:
    """One worker on ``plugins`` under ``condition``: its requests until kubesim is quiet again."""
    env = {**env, "PYTHONPATH": f"{plugins}:{ROOT}"}
    before = await api.stats()
    started = time.monotonic()
    if condition["kind"] == "outage":
        await set_faults(api, [{"code": 503}])
    else:
        slow = {"delay_s": condition["seconds"], "verbs": ["list"], "resources": WATCHED}
        await set_faults(api, [{**slow, "namespace": NAMESPACE, "count": len(WATCHED)}])
    worker = Worker("bench.trigger_worker", spec, env, workdir / f"{code}-{condition['kind']}.log")
    await worker.start()
    triggers_started = time.monotonic() - started
    await asyncio.sleep(condition["seconds"])
    if condition["kind"] == "outage":
        await set_faults(api, [])

    async def watching() -> bool:  # both loops recovered (the last backoff step may be 30 s away)
        return (await api.stats())["watches_open"] >= before["watches_open"] + len(WATCHED)

    await wait_until(watching, timeout_s=600)
    after = await api.quiet(quiet_s=QUIET_S, timeout_s=600)
    final = await worker.stop()
    return {
        "code": code,
        "requests": delta(after, before, api),
        "by_verb": by_verb(after, before),
        # kubesim logs a watch when its stream ends: the ones still open are counted here
        "watches_opened": after["watches_opened_total"] - before["watches_opened_total"],
        "fired": len(worker.fired),
        "worker_started_s": round(triggers_started, 1),
        "counted_s": round(time.monotonic() - started, 1),
        "peak_rss_mib": final["final"]["peak_rss_mib"],
        "cpu_s": final["final"]["cpu_s"],
    }


async def measure(
    url: str, kubeconfig: str, n: int, condition: dict, codes: dict[str, Path], workdir: Path
) -> dict:
    env = worker_env(kubeconfig, plugins=None)
    async with connect(url) as api:
        jobs = await setup_jobs(api, n, Phases())
        spec = write_spec(workdir / f"jobs-{n}.json", jobs, poll_interval=POLL_INTERVAL_S)
        rows = [
            await _one(api, code, plugins, spec, env, workdir, condition) for code, plugins in codes.items()
        ]
    return {"n": n, "condition": condition, "runs": rows}


def run_condition(n: int, condition: dict, codes: dict[str, Path], log_dir: Path = LOG_DIR) -> dict:
    workdir = fresh_workdir(log_dir, f"outage-{condition['kind']}-n{n}")

    async def one(url: str, kubeconfig: str) -> dict:
        return await measure(url, kubeconfig, n, condition, codes, workdir)

    return in_kubesim(one)


def render(results: list[dict]) -> str:
    lines = [
        "| condition | N waiting tasks | code | requests (ended) | watches opened | by verb and resource (ended) "
        "| triggers started after |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in results:
        condition = result["condition"]
        what = (
            f"503 on every request for {condition['seconds']:g} s"
            if condition["kind"] == "outage"
            else f"first list of each resource takes {condition['seconds']:g} s"
        )
        for row in result["runs"]:
            verbs = ", ".join(f"{k}: {v}" for k, v in row["by_verb"].items())
            lines.append(
                f"| {what} | {result['n']} | {row['code']} | {row['requests']} | {row['watches_opened']} | "
                f"{verbs} | {row['worker_started_s']} s |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout (its plugins/) of the code before the change")
    parser.add_argument("--outage-n", type=int, default=200)
    parser.add_argument("--outage-s", type=float, default=30.0)
    parser.add_argument("--slow-n", type=int, default=500)
    parser.add_argument("--slow-list-s", type=float, default=12.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    codes = {"before": args.before / "plugins"} if args.before else {}
    codes["after"] = ROOT / "plugins"
    results = [
        run_condition(args.outage_n, {"kind": "outage", "seconds": args.outage_s}, codes),
        run_condition(args.slow_n, {"kind": "slow_first_list", "seconds": args.slow_list_s}, codes),
    ]
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(render(results))
    return 0


if __name__ == "__main__":
    stop_on_signals()  # a benchmark stopped with kill stops its kubesim and Airflow
    raise SystemExit(main())
