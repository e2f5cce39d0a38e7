"""What a namespace's size costs one triggerer's memory, apart from its own waits (issue 33).

A triggerer's hub lists and watches every RayJob and Workload of its namespace and deployment, not only
those its own tasks wait on, so with three triggerers sharing 30,000 waits each caches 30,000 of each
(bench/README.md, run AC). This benchmark separates the two costs, in one kubesim, for one or more plugin
checkouts side by side:

1. Setup: the trigger benchmark's queue held by a blocker and ``total`` RayJobs queued behind it
   (``bench.harness.cluster.setup_jobs``).
2. For each ``own`` and each checkout, twice in turn: one ``bench.trigger_worker`` waiting on the first
   ``own`` RayJobs, started until its two watch streams are open and kubesim was quiet for 3 s; its RSS
   after the imports and after startup, and its peak, then it stops.

``own`` = 100 is what the namespace costs; ``own`` = ``total`` / 3 is one of run AC's three triggerers at
startup. Run it with ``python -m bench.namespace_memory --total 30000 --own 100 10000 --plugins
before=<checkout>/plugins after=plugins``. Not part of ``bench.run``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.harness.accounting import streams_closed
from bench.harness.cluster import setup_jobs
from bench.harness.phases import Phases
from bench.harness.triggers import start_triggers, write_spec
from bench.harness.workers import LOG_DIR, fresh_workdir, in_kubesim, worker_env
from bench.kube import connect

ROUNDS = 2
"""Each checkout's worker runs this many times per ``own``, in turn, so that drift shows."""


async def measure(
    url: str, kubeconfig: str, total: int, owns: list[int], plugins: dict[str, Path], log_dir: Path
) -> dict:
    workdir = fresh_workdir(log_dir, f"namespace-{total}")
    phases = Phases()
    rows: list[dict] = []
    async with connect(url) as api:
        jobs = await setup_jobs(api, total, phases)
        for own in owns:
            spec = write_spec(workdir / f"own-{own}.json", jobs[:own])
            for round_ in range(ROUNDS):
                for label, path in plugins.items():
                    log = workdir / f"{label}-{own}-{round_}.log"
                    startup = await start_triggers(
                        api,
                        spec,
                        worker_env(kubeconfig, plugins=path),
                        log,
                        phases,
                        phase=f"{label}-{own}-{round_}",
                    )
                    await startup.worker.stop()
                    # the next worker's start is settled by its own two streams
                    await streams_closed(api, startup.before["watches_open"])
                    row = {
                        "plugins": label,
                        "own": own,
                        "round": round_,
                        "rss_mib_after_imports": (startup.reply.get("imported") or {}).get("rss_mib"),
                        "rss_mib_after_startup": startup.usage["usage"]["rss_mib"],
                        "peak_rss_mib": startup.usage["usage"]["peak_rss_mib"],
                        "rss_mib_after_trim": (startup.usage.get("after_trim") or {}).get("rss_mib"),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return {"total": total, "rows": rows, "phases": phases.durations()}


def run(total: int, owns: list[int], plugins: dict[str, Path], *, log_dir: Path = LOG_DIR) -> dict:
    """The whole benchmark against a fresh kubesim; the workers' logs stay in ``log_dir``."""

    async def one(url: str, kubeconfig: str) -> dict:
        return await measure(url, kubeconfig, total, owns, plugins, log_dir)

    return in_kubesim(one)


def render(result: dict) -> list[str]:
    """One table row per (own, checkout): RSS after imports, after startup and its peak, each round."""
    lines = [
        f"| waits of this triggerer (namespace: {result['total']} RayJobs + Workloads) | plugins | RSS MiB "
        "after imports, each round | RSS MiB after startup, each round | peak RSS MiB, each round |",
        "|---|---|---|---|---|",
    ]
    for own, label in dict.fromkeys((row["own"], row["plugins"]) for row in result["rows"]):
        rounds = [row for row in result["rows"] if (row["own"], row["plugins"]) == (own, label)]
        imports = " / ".join(str(row["rss_mib_after_imports"]) for row in rounds)
        startup = " / ".join(str(row["rss_mib_after_startup"]) for row in rounds)
        peak = " / ".join(str(row.get("peak_rss_mib")) for row in rounds)
        lines.append(f"| {own} | {label} | {imports} | {startup} | {peak} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.namespace_memory", description=__doc__)
    parser.add_argument("--total", type=int, default=30000, help="RayJobs in the namespace")
    parser.add_argument("--own", type=int, nargs="+", default=[100, 10000], help="waits of the triggerer")
    parser.add_argument("--plugins", nargs="+", required=True, help="LABEL=DIR of a checkout's plugins/")
    parser.add_argument("--out", help="write the JSON result here")
    args = parser.parse_args(argv)
    plugins = {label: Path(path).resolve() for label, _, path in (p.partition("=") for p in args.plugins)}
    result = run(args.total, args.own, plugins)
    print("\n".join(render(result)))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    from devtools.signals import stop_on_signals

    stop_on_signals()
    sys.exit(main())
