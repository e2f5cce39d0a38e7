"""`python -m bench.run --profile quick|full`: every benchmark in one run, printed next to its target.

The quick profile (`make bench`) aims at under 5 minutes on a 2-core machine: trigger scale at N = 100
only, one cold parse per file, fan-out with fewer writes, and ours against Airflow's floor over 8 runs
(two waves of 4; 7 pairs once the triggerer's first success is set apart) in an Airflow of its own
(``--only e2e --only backfill`` starts another for 10 latency runs and a 50-run backfill; ``--only
triggerers`` runs three triggerers at 3 × 1,000). The full profile measures everything the issues ask for
in one run: N = 100, 1000 and 3000, longer windows, three triggerers at 3 × 1,000 and 3 × 10,000, the
floor over 51 pairs, and one Airflow for 50 latency runs and the 200-run backfill. The JSON of the run
goes to ``--out`` (default: a file in the temp directory) and a Markdown summary to stdout, which is what
bench/README.md quotes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from devtools.signals import stop_on_signals

PROFILES = {
    "quick": {
        "admission": {"sizes": (250, 500, 1000, 2000), "repeats": 10},
        "parse": {"cold_runs": 1},
        "fanout": {"objects": 5000, "watchers": 1000, "writes": 10, "rate_hz": 2.0, "readers": 4},
        "trigger": {"sizes": (100,), "windows": (5.0, 10.0), "poll_window": 10.0, "poll_max_n": 1000},
        # `--only refused` runs it at N = 100 (one 403-refused triggerer and its polling peer, ~2 minutes)
        "refused": None,
        # `--only triggerers` runs three triggerers at 3 × 1,000 waits (~3 minutes)
        "triggerers": None,
        # Ours against Airflow's floor (bench.task_end --paths ours) in an Airflow of its own: 8 runs, two
        # waves of the DAGs' 4 active runs (11 took three waves and the profile 5 min 34 s, 2026-12-05)
        "floor": {"runs": 8},
        # A real Airflow takes 1-2 minutes to start here: `--only e2e --only backfill` runs both in one
        # Airflow with 10 latency runs and a 50-run backfill (`--e2e-runs` / `--backfill-runs` set sizes).
        "e2e": None,
        "backfill": None,
    },
    "full": {
        "admission": {"sizes": (250, 500, 1000, 2000), "repeats": 50},
        "parse": {"cold_runs": 3},
        "fanout": {"objects": 5000, "watchers": 1000, "writes": 120, "rate_hz": 2.0, "readers": 4},
        "trigger": {
            "sizes": (100, 1000, 3000),
            "windows": (20.0, 60.0),
            "poll_window": 30.0,
            "poll_max_n": 1000,
        },
        "refused": {"n": 1000, "window_s": 60.0, "poll_window_s": 30.0},
        "triggerers": {"sizes": (1000, 10000), "window_s": 60.0, "detect_n": 1000, "restart_n": 300},
        "floor": {"runs": 51},
        "e2e": {"runs": 50},
        "backfill": {"runs": 200},
    },
}


TRIGGERERS_ALONE = {"sizes": (1000,), "window_s": 20.0, "detect_n": 300, "restart_n": 150}
"""The three-triggerer step when asked for (``--only triggerers``) in a profile that leaves it out."""


def floor(runs: int) -> dict:
    """Complete → task success of ours beside Airflow's floor, ``runs`` pairs in one Airflow
    (``bench.task_end --paths ours``): the floor's part of its result."""
    from bench import task_end

    with tempfile.TemporaryDirectory(prefix="bench-floor-") as directory:
        result = task_end.measure(runs, Path(directory), 1800.0, {task_end.OURS: True})
    return {**result["floor"], "runs": runs, "airflow_startup_s": result["airflow_startup_s"]}


def machine() -> dict:
    """What the figures were measured on: the README's machine line."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    memory = subprocess.run(["free", "-h"], capture_output=True, text=True, check=False).stdout.splitlines()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory": memory[1].split()[1] if len(memory) > 1 else "?",
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def run(profile: str, only: set[str] | None, out: Path) -> dict:
    from bench import admission, airflow_e2e, fanout, parse, refused_watch, trigger_scale, triggerers

    settings = PROFILES[profile]
    results: dict = {
        "profile": profile,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
    }

    def wanted(name: str) -> bool:
        return name in only if only else settings[name] is not None

    @functools.cache
    def airflow_session() -> dict:
        """The e2e and backfill figures from ONE Airflow start (bench.airflow_e2e), whichever step asks first."""
        try:
            return airflow_e2e.run(
                runs=(settings["e2e"] or {"runs": 10})["runs"] if wanted("e2e") else 0,
                backfill_runs=(settings["backfill"] or {"runs": 50})["runs"] if wanted("backfill") else 0,
            )
        except Exception as exc:  # noqa: BLE001 - both steps report it; Airflow is not started twice
            error = {"error": f"{type(exc).__name__}: {exc}"}
            return {"e2e": dict(error), "backfill": dict(error)}

    steps = [
        ("admission", lambda: admission.run(**settings["admission"])),
        ("parse", lambda: parse.run(**settings["parse"])),
        ("fanout", lambda: fanout.run(**settings["fanout"])),
        ("trigger", lambda: trigger_scale.run(**settings["trigger"])),
        ("refused", lambda: refused_watch.run(**(settings["refused"] or {"n": 100, "window_s": 30.0}))),
        ("triggerers", lambda: triggerers.run(**(settings["triggerers"] or TRIGGERERS_ALONE))),
        ("floor", lambda: floor(**(settings["floor"] or {"runs": 8}))),
        ("e2e", lambda: airflow_session()["e2e"] or {"error": "size 0"}),
        ("backfill", lambda: airflow_session()["backfill"] or {"error": "size 0"}),
    ]
    for name, step in steps:
        if (only and name not in only) or (not only and settings[name] is None):
            continue
        started = time.monotonic()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        try:
            results[name] = step()
        except Exception as exc:  # noqa: BLE001 - one broken piece must not hide the other figures
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        results[name]["elapsed_s"] = round(time.monotonic() - started, 1)
        results[name]["load_average_after"] = os.getloadavg()
        out.write_text(json.dumps(results, indent=1, default=str))  # what was measured survives a later crash
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument(
        "--only",
        action="append",
        help="admission | parse | fanout | trigger | refused | triggerers | floor | e2e | backfill (repeatable)",
    )
    parser.add_argument("--out", help="write the JSON results here")
    parser.add_argument("--trigger-sizes", help="comma-separated N for the trigger benchmark, e.g. 100,1000")
    parser.add_argument(
        "--trigger-detect-n",
        type=int,
        help="trigger benchmark: complete only this many RayJobs (all at once) for the detection latency",
    )
    parser.add_argument("--refused-n", type=int, help="N for the refused-watch benchmark (and run that step)")
    parser.add_argument(
        "--triggerers-sizes",
        help="comma-separated N per triggerer for the three-triggerer benchmark, e.g. 1000",
    )
    for option in ("objects", "watchers", "writes", "readers"):
        parser.add_argument(
            f"--fanout-{option}", type=int, help=f"fan-out benchmark: {option} (overrides the profile)"
        )
    parser.add_argument("--e2e-runs", type=int, help="Airflow latency runs (and run the e2e step)")
    parser.add_argument("--backfill-runs", type=int, help="backfill size (and run the backfill step)")
    args = parser.parse_args(argv)
    for name, size in (("e2e", args.e2e_runs), ("backfill", args.backfill_runs)):
        if size is not None:
            PROFILES[args.profile][name] = {"runs": size}
    for option in ("objects", "watchers", "writes", "readers"):
        if getattr(args, f"fanout_{option}") is not None:
            PROFILES[args.profile]["fanout"][option] = getattr(args, f"fanout_{option}")
    if args.refused_n is not None:
        PROFILES[args.profile]["refused"] = {
            **(PROFILES[args.profile]["refused"] or {"window_s": 60.0, "poll_window_s": 30.0}),
            "n": args.refused_n,
        }
    if args.trigger_detect_n is not None:
        PROFILES[args.profile]["trigger"]["detect_n"] = args.trigger_detect_n
    if args.triggerers_sizes:
        PROFILES[args.profile]["triggerers"] = {
            **(PROFILES[args.profile]["triggerers"] or TRIGGERERS_ALONE),
            "sizes": tuple(int(n) for n in args.triggerers_sizes.split(",")),
        }
    if args.trigger_sizes:
        PROFILES[args.profile]["trigger"]["sizes"] = tuple(int(n) for n in args.trigger_sizes.split(","))
    out = Path(args.out) if args.out else Path(tempfile.gettempdir()) / f"bench-{args.profile}.json"
    results = run(args.profile, set(args.only) if args.only else None, out)
    from bench.report import render

    print(render(results))
    print(f"\n(JSON: {out})")
    return 0


if __name__ == "__main__":
    stop_on_signals()  # a benchmark stopped with kill stops its kubesim and Airflow
    sys.exit(main())
