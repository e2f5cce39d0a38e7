"""RayJob ``Complete`` → task success, ending in the triggerer vs resuming on a worker, beside the
cncf-kubernetes provider's own Kueue job operator; worker slots per successful wait.
``python -m bench.task_end --runs 50 --out bench/results/task_end.json``.

One Airflow (devtools.airflow: scheduler, dag-processor, triggerer, api-server,
LocalExecutor, parallelism 16) on a throwaway PostgreSQL (devtools.postgres) against kubesim with the
single-queue setup at time-scale 10, and a StatsD listener (devtools.statsd) that Airflow sends its
metrics to. The two DAGs of ``bench/dags/task_end.py`` are the pipelines' submit → wait shape, identical
but for the sensor's ``end_in_triggerer``; ``runs`` manual runs of each are triggered at once, alternating,
so both paths see the same load (4 active runs per DAG, one RayJob admitted at a time).

The peer, ``bench_provider_kueue_job`` (``bench/dags/task_end_peer.py``), is triggered in the same
alternation: the provider's ``KubernetesStartKueueJobOperator`` (deferrable, default poll interval)
submitting a batch Job of the same size and duration to the same LocalQueue, so its Jobs and the RayJobs
take turns at the queue's single GPU. Its one task submits and waits; its "Complete" is the Job's
``Complete`` condition as a raw watch of the namespace's Jobs sees it (``bench.harness.airflow.JobWatch``), and
its failed runs are reported with the error their task log ends with.

* **Complete → task success**: a raw watch of the project's RayJobs (``bench.harness.airflow.ClusterWatch``)
  sees ``jobDeploymentStatus`` Complete → the ``wait`` task instance's ``end_date``. On the triggerer
  path the triggerer sets it when it handles the trigger's ``TaskSuccessEvent``; on the worker path the
  scheduler queues the resumed task and a worker runs ``execute_complete``.
  Split where the trigger yields its event (the runner's ``Trigger fired event`` line in the task's log):
  Complete → event is the trigger's part (detection, the driver log tail, the XComs); event → success is
  Airflow's (its trigger runner hands events to its supervisor once per pass of a loop that sleeps up to
  1 s, then the supervisor writes the success, or the scheduler resumes the task on a worker).
* **Airflow's floor** (``bench.floor``), in the same run: ``bench_floor``'s one task defers at once on a
  trigger that yields ``TaskSuccessEvent`` when its flag file appears. The moment the raw watch sees the
  RayJob of run *i* of ``bench_end_in_triggerer`` Complete, it raises the flag of floor run *i*, so the
  pair is handed to the same triggerer at the same instant under the same load. Floor sample: flag →
  task success. Ours minus the floor: per pair, and p50 / p99 of each side. The first success of the
  triggerer (the earliest Complete of ours) is reported apart with its pair, as the first success is the
  one that may pay for the triggerer's supervisor building its Execution API client. A floor run whose
  task had not deferred before its flag (its worker ``start_date`` later than the flag) is left out.
* **Worker slots per successful wait**: Airflow's task runner sends the StatsD counter ``ti.start``
  (tags ``dag_id``, ``task_id``) each time a worker runs a task: once for the ``execute`` that defers,
  once more for each resume. Per path: (``ti.start`` of the waiting task − finished task instances) ÷
  successful waits, i.e. the resumes a success cost (a run that failed in ``execute`` started once).

Result::

    {"runs", "airflow_startup_s", "phase_s", "metadata_database",
     "paths": {dag_id: {"end_in_triggerer", "finished", "states", "complete_to_success": summary_ms,
                        "complete_to_success_ms": every sample, sorted,
                        "complete_to_event", "event_to_success": summary_ms,
                        "worker_starts", "worker_slots_per_success", "task_id",
                        "failures": {error message: count}}},
     "floor": {"finished", "states", "late", "flag_to_success", "flag_to_event", "event_to_success",
               "ours", "difference": summary_ms (ours, floor and ours - floor per pair, first success
               excepted), "p50_difference_ms", "p99_difference_ms",
               "first_success": {"run", "ours_ms", "floor_ms"}, "pairs_ms": [[ours, floor], ...]}}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from bench.floor import FLAGS_ENV, flip
from bench.harness.airflow import (
    TERMINAL_TI_STATES,
    ClusterWatch,
    JobWatch,
    airflow_stack,
    dag_bundles,
    epoch,
    log_entries,
)
from bench.stats import summary_ms
from devtools.signals import stop_on_signals

PEER = "bench_provider_kueue_job"
PEER_TASK = "kueue_job"
"""The peer's one task: it submits its Job and waits for it."""
OURS = "bench_end_in_triggerer"
PATHS = {OURS: True, "bench_end_on_worker": False, PEER: None}
"""DAG id → its sensor's ``end_in_triggerer``; None: the peer, which has no sensor."""
FLOOR = "bench_floor"
"""Airflow's floor (``bench.floor``): its task ``wait`` ends in the triggerer when its flag is raised."""
TIME_SCALE = 10.0


def waiting_task(dag_id: str) -> str:
    """The task whose end is measured: the sensor ``wait``, or the peer's operator."""
    return PEER_TASK if dag_id == PEER else "wait"


def wait_tis(airflow, dag_id: str, prefix: str) -> dict[str, dict]:
    """The waiting task instances of this benchmark's runs of ``dag_id``, by run id."""
    response = airflow.api(
        "GET",
        f"/dags/{dag_id}/dagRuns/~/taskInstances",
        params={"task_id": waiting_task(dag_id), "run_id_prefix_pattern": prefix, "limit": 1000},
    )
    response.raise_for_status()
    return {ti["dag_run_id"]: ti for ti in response.json()["task_instances"]}


FIRED = "Trigger fired event"
"""What Airflow's trigger runner logs, into the task's log, the moment a trigger yields its event."""


def fired_at(airflow, dag_id: str, ti: dict) -> float | None:
    """When the wait's trigger yielded its event: the timestamp of the runner's last ``FIRED`` line in
    the try's log. None if the log has none (a wait that never deferred)."""
    entries = log_entries(airflow, ti["dag_run_id"], waiting_task(dag_id), ti["try_number"], dag_id=dag_id)
    stamps = [epoch(e["timestamp"]) for e in entries if e.get("event") == FIRED and e.get("timestamp")]
    return stamps[-1] if stamps else None


def failure(airflow, dag_id: str, ti: dict) -> str:
    """The last error a failed task instance's log shows (its exception), or its state if none."""
    try:
        entries = log_entries(airflow, ti["dag_run_id"], ti["task_id"], ti["try_number"], dag_id=dag_id)
    except httpx.HTTPStatusError as exc:
        return f"{ti['state']} (log: HTTP {exc.response.status_code})"
    errors = [e for e in entries if str(e.get("level", "")).lower() in ("error", "critical")]
    if not errors:
        return ti["state"]
    last = errors[-1]
    detail = last.get("error_detail") or []
    if detail and isinstance(detail, list) and isinstance(detail[0], dict):
        return f"{detail[0].get('exc_type')}: {detail[0].get('exc_value')}"[:300]
    return str(last.get("event", ""))[:300]


class Flags:
    """Raises floor run *i*'s flag the moment the raw watch sees run *i* of ours finished (the watch's
    ``on_finished``), and remembers when."""

    def __init__(self, directory: Path, prefix: str) -> None:
        self.directory, self.prefix = directory, prefix
        self.raised: dict[str, float] = {}
        """Floor run id → wall time its flag was raised."""

    def __call__(self, run_id: str, seen: float) -> None:
        ours = f"{self.prefix}{OURS}_"
        if run_id.startswith(ours):
            floor_run = f"{self.prefix}{FLOOR}_{run_id[len(ours) :]}"
            flip(self.directory, floor_run)
            self.raised[floor_run] = time.time()


def measure_paths(
    airflow,
    watch: ClusterWatch,
    statsd,
    runs: int,
    timeout_s: float,
    job_watch: ClusterWatch | None = None,
    flags: Flags | None = None,
    measured: dict | None = None,
) -> dict:
    started = time.monotonic()
    measured = PATHS if measured is None else measured
    prefix = flags.prefix if flags else f"bench_{uuid.uuid4().hex[:6]}__"
    waited = [*measured, FLOOR] if flags else list(measured)
    for index in range(runs):
        for dag_id in waited:
            airflow.trigger_dag_run(dag_id, run_id=f"{prefix}{dag_id}_{index:03d}")
    deadline = time.monotonic() + timeout_s
    while True:
        done = {
            dag_id: {
                r: ti
                for r, ti in wait_tis(airflow, dag_id, prefix).items()
                if ti["state"] in TERMINAL_TI_STATES
            }
            for dag_id in waited
        }
        if all(len(tis) >= runs for tis in done.values()) or time.monotonic() > deadline:
            break
        time.sleep(2)
    time.sleep(2)  # the last StatsD datagrams
    paths = {}
    for dag_id, end_in_triggerer in measured.items():
        states: dict[str, int] = {}
        latencies, to_event, event_to_success = [], [], []
        failures: dict[str, int] = {}
        finished = (job_watch.finished if job_watch else {}) if dag_id == PEER else watch.finished
        for run_id, ti in done[dag_id].items():
            states[ti["state"]] = states.get(ti["state"], 0) + 1
            if ti["state"] == "success" and ti.get("end_date") and run_id in finished:
                ended = epoch(ti["end_date"])
                latencies.append(ended - finished[run_id])
                if (fired := fired_at(airflow, dag_id, ti)) is not None:
                    to_event.append(fired - finished[run_id])
                    event_to_success.append(ended - fired)
            elif ti["state"] != "success":
                message = failure(airflow, dag_id, ti).replace(run_id, "<run_id>")
                failures[message] = failures.get(message, 0) + 1
        successes = states.get("success", 0)
        starts = len(statsd.named("ti.start", dag_id=dag_id, task_id=waiting_task(dag_id)))
        paths[dag_id] = {
            "end_in_triggerer": end_in_triggerer,
            "finished": len(done[dag_id]),
            "states": states,
            "complete_to_success": summary_ms(latencies),
            "complete_to_success_ms": sorted(round(latency * 1000, 1) for latency in latencies),
            "complete_to_event": summary_ms(to_event),
            "event_to_success": summary_ms(event_to_success),
            "worker_starts": starts,
            "worker_slots_per_success": (
                round((starts - len(done[dag_id])) / successes, 2) if successes else None
            ),
            "task_id": waiting_task(dag_id),
            "failures": failures,
        }
    result = {"runs": runs, "paths": paths, "phase_s": round(time.monotonic() - started, 1)}
    if flags is not None:
        result["floor"] = floor_figures(airflow, done[FLOOR], done[OURS], watch.finished, flags)
    return result


def floor_figures(airflow, floor_tis: dict, our_tis: dict, finished: dict[str, float], flags: Flags) -> dict:
    """The floor's samples, ours beside them run by run, and the first success of ours apart."""
    states: dict[str, int] = {}
    floor: dict[str, float] = {}
    to_event, event_to_success = [], []
    late = 0
    for run_id, ti in floor_tis.items():
        states[ti["state"]] = states.get(ti["state"], 0) + 1
        raised = flags.raised.get(run_id)
        if ti["state"] != "success" or raised is None or not ti.get("end_date"):
            continue
        if ti.get("start_date") and epoch(ti["start_date"]) > raised:
            late += 1  # its flag was up before it deferred: no hand-over to measure
            continue
        floor[run_id] = epoch(ti["end_date"]) - raised
        if (fired := fired_at(airflow, FLOOR, ti)) is not None:
            to_event.append(fired - raised)
            event_to_success.append(epoch(ti["end_date"]) - fired)
    ours: dict[str, float] = {}
    for run_id, ti in our_tis.items():
        if ti["state"] == "success" and ti.get("end_date") and run_id in finished:
            ours[run_id] = epoch(ti["end_date"]) - finished[run_id]
    first = min(ours, key=lambda run_id: finished[run_id]) if ours else None
    pairs = []
    for run_id, latency in ours.items():
        partner = run_id.replace(f"__{OURS}_", f"__{FLOOR}_", 1)
        if run_id != first and partner in floor:
            pairs.append((latency, floor[partner]))
    first_partner = first.replace(f"__{OURS}_", f"__{FLOOR}_", 1) if first else None
    our_side, floor_side = [p[0] for p in pairs], [p[1] for p in pairs]
    ours_summary, floor_summary = summary_ms(our_side), summary_ms(floor_side)
    return {
        "finished": len(floor_tis),
        "states": states,
        "late": late,
        "flag_to_success": summary_ms(list(floor.values())),
        "flag_to_event": summary_ms(to_event),
        "event_to_success": summary_ms(event_to_success),
        "ours": ours_summary,
        "floor": floor_summary,
        "difference": summary_ms([o - f for o, f in pairs]),
        "p50_difference_ms": round(ours_summary["p50_ms"] - floor_summary["p50_ms"], 1),
        "p99_difference_ms": round(ours_summary["p99_ms"] - floor_summary["p99_ms"], 1),
        "first_success": {
            "run": first,
            "ours_ms": round(ours[first] * 1000, 1) if first else None,
            "floor_ms": round(floor[first_partner] * 1000, 1) if first_partner in floor else None,
        },
        "pairs_ms": [[round(o * 1000, 1), round(f * 1000, 1)] for o, f in sorted(pairs)],
    }


HANDOVER = Path(__file__).resolve().parent / "handover"
"""``--handover woken``: this folder first on the Airflow processes' path (``bench/handover/sitecustomize.py``)."""


def measure(runs: int, workdir: Path, timeout_s: float, paths: dict, handover: str = "stock") -> dict:
    from devtools.airflow import ROOT
    from devtools.statsd import StatsdListener

    statsd = StatsdListener()
    flags = Flags(workdir / "flags", f"bench_{uuid.uuid4().hex[:6]}__")
    flags.directory.mkdir()
    extra_env = {
        **statsd.airflow_env(),
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": dag_bundles(),
        FLAGS_ENV: str(flags.directory),
    }
    if handover == "woken":
        extra_env["PYTHONPATH"] = os.pathsep.join([str(HANDOVER), str(ROOT / "plugins"), str(ROOT)])
    dag_ids = [*paths, FLOOR]
    try:
        with airflow_stack(workdir, dag_ids, time_scale=TIME_SCALE, extra_env=extra_env) as stack:
            airflow, sim = stack.airflow, stack.sim
            watch = ClusterWatch(sim.url, sim.headers, on_finished=flags)
            job_watch = JobWatch(sim.url, sim.headers)
            watch.start()
            job_watch.start()
            for dag_id in dag_ids:
                airflow.set_paused(dag_id, False)
            result = measure_paths(airflow, watch, statsd, runs, timeout_s, job_watch, flags, paths)
            watch.stop()
            job_watch.stop()
    finally:
        statsd.stop()
    return {
        **result,
        "handover": handover,
        "airflow_startup_s": stack.startup_s,
        "metadata_database": stack.database.version,
    }


def stage(summary: dict) -> str:
    return f"{summary['p50_ms']} / {summary['p99_ms']} / {summary['max_ms']}"


def render(result: dict) -> str:
    lines = [
        f"{result['runs']} runs of each DAG triggered at once, alternating (4 active per DAG, one RayJob "
        f"admitted at a time); trigger runner's hand-over: {result.get('handover', 'stock')}; Airflow up in "
        f"{result['airflow_startup_s']} s; the phase took {result['phase_s']} s.",
        "",
        "| path | finished (states) | Complete → task success p50 / p99 / max (ms) | of which Complete → "
        "trigger event (ours) | trigger event → task success (Airflow's) | worker slots per successful wait |",
        "|---|---|---|---|---|---|",
    ]
    names = {True: "ends in the triggerer (default)", False: "resumes on a worker"}
    names[None] = "peer: the provider's `KubernetesStartKueueJobOperator`, deferrable"
    for dag_id, path in result["paths"].items():
        name = names[path["end_in_triggerer"]]
        latency = path["complete_to_success"]
        lines.append(
            f"| {name} (`{dag_id}`) | {path['finished']} ({path['states']}) | {latency['p50_ms']} / "
            f"{latency['p99_ms']} / {latency['max_ms']} ({latency['count']} samples) | "
            f"{stage(path['complete_to_event'])} | {stage(path['event_to_success'])} | "
            f"{path['worker_slots_per_success']} ({path['worker_starts']} `ti.start`) |"
        )
    for dag_id, path in result["paths"].items():
        for message, count in sorted((path.get("failures") or {}).items(), key=lambda item: -item[1]):
            lines.append(f"\n`{dag_id}`: {count} × {message}")
    if floor := result.get("floor"):
        lines += render_floor(floor)
    return "\n".join(lines)


def render_floor(floor: dict) -> list[str]:
    first = floor["first_success"]
    difference = floor["difference"]
    return [
        "",
        f"Airflow's floor (`{FLOOR}`): {floor['finished']} runs ({floor['states']}), {floor['late']} left out "
        f"(flag up before the task deferred); flag → success {stage(floor['flag_to_success'])} ms, of which "
        f"flag → trigger event {stage(floor['flag_to_event'])}, event → success {stage(floor['event_to_success'])}.",
        "",
        f"| {difference['count']} pairs (run *i* of ours, floor run *i*; first success apart) | p50 (ms) | "
        "p99 (ms) | max (ms) | target |",
        "|---|---|---|---|---|",
        f"| ours: Complete → task success | {floor['ours']['p50_ms']} | {floor['ours']['p99_ms']} | "
        f"{floor['ours']['max_ms']} | |",
        f"| the floor: flag → task success | {floor['floor']['p50_ms']} | {floor['floor']['p99_ms']} | "
        f"{floor['floor']['max_ms']} | |",
        f"| ours − the floor (p50 − p50, p99 − p99) | {floor['p50_difference_ms']} | "
        f"{floor['p99_difference_ms']} | | p50 < 100, p99 < 250 |",
        f"| ours − the floor, pair by pair | {difference['p50_ms']} | {difference['p99_ms']} | "
        f"{difference['max_ms']} | |",
        f"| the triggerer's first success ({first['run']}): ours, its floor | {first['ours_ms']} | "
        f"{first['floor_ms']} | | no more than any other |",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.task_end", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", help="write the JSON result here")
    parser.add_argument(
        "--paths",
        choices=("all", "ours"),
        default="all",
        help="ours: only the triggerer path and its floor (no worker path, no peer)",
    )
    parser.add_argument(
        "--handover",
        choices=("stock", "woken"),
        default="stock",
        help="woken: Airflow's trigger runner patched to hand events over when yielded (bench/handover/)",
    )
    args = parser.parse_args(argv)
    paths = PATHS if args.paths == "all" else {OURS: True}
    with tempfile.TemporaryDirectory(prefix="bench-task-end-") as directory:
        result = measure(args.runs, Path(directory), args.timeout, paths, args.handover)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(render(result))
    return 0


if __name__ == "__main__":
    stop_on_signals()  # a benchmark stopped with kill stops its kubesim and Airflow
    sys.exit(main())
