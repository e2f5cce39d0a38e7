"""Backfill throughput (issue 7 §4): ``n`` backfill runs of the text classifier with 16 worker slots.

Runs in the Airflow of ``bench.airflow_e2e`` (after its latency runs have finished, so nothing of theirs
is active; starting a second Airflow would cost another 1–2 minutes and measure nothing different).

1. Block the queue: a RayJob ``bench-queue-blocker`` (no Airflow identity, so no trigger and no sensor
   follow it) asks for the single-queue ClusterQueue's one GPU, runs forever and has ``prod-priority``,
   so the ``dev-priority`` backfill RayJobs can neither be admitted nor preempt it: they wait as Kueue
   says ("insufficient unused quota"), and their sensors wait deferred. A ClusterQueue ``stopPolicy: Hold``
   would block admission too, but Kueue then reports the queue inactive, which the sensor rightly treats
   as INADMISSIBLE and fails after its grace period: that is not waiting.
2. ``POST /api/v2/backfills`` (what the UI's backfill dialog sends) for ``n`` days from 2026-01-01 with
   ``max_active_runs`` = ``n`` (the DAG is @daily). A backfill's ``max_active_runs`` is its own limit,
   counted apart from the DAG's ``max_active_runs=3`` (which limits only non-backfill runs), so all
   ``n`` runs may be active at once; what limits the tasks is then ``[core] parallelism`` = 16 (the
   scheduler queues at most ``parallelism`` minus the executor's occupied slots; the LocalExecutor runs
   one task per slot) — ``max_active_tasks`` (16) counts per DAG run, and pools do not count deferred
   tasks. The metadata database is PostgreSQL (bench.airflow_e2e): on SQLite this request is refused
   with 503 ("database is locked") for minutes while the scheduler works through the runs already made.
   Should the api-server still answer 5xx, the request is sent again, as the UI user would (unless the
   failed attempt made the backfill after all: ``Airflow.create_backfill``), and the refusals are counted.

   The scheduler examines at most ``[scheduler] max_dagruns_per_loop_to_schedule`` running DAG runs per
   loop (default 20), a backfill's runs always in date order (``BackfillDagRun.sort_ordinal``) before
   the others by last decision. So with the default, a backfill whose first 20 runs wait in Kueue's
   queue never gets its 21st run examined: 20 RayJobs exist and the other runs' tasks stay without a
   state until those finish (measured here on this setup: 20 RayJobs, then none for 10 minutes).
   That throttles a backfill to 20 RayJobs in Kueue, which is harmless for priority (Kueue still
   orders what is there) but is not "every run submitted"; the benchmark's Airflow therefore sets it
   to ``n`` + 20, as a user who wants a whole backfill queued in Kueue would (bench/README.md says so).
   Exactly ``n`` is one short: the DAG's own scheduled run of today is examined first (not a backfill
   run), so the last backfill run was never examined (measured: 199 of 200).
3. Sample about once a second, from just before the request is sent: the deferred sensors (count),
   then the backfill task instances that hold a worker slot — ``queued`` (handed to the executor) or
   ``running`` — in ONE list request (one instant), then succeeded submits and running backfill runs, and the RayJobs the
   ``ClusterWatch`` has seen created for backfill runs. A deferred task instance holds no slot. Once
   every sensor is deferred, sampling continues ``hold_s`` seconds to show they stay deferred and hold
   no slot.
4. Unblock (delete the blocker). The backfill is not waited for: its ``n`` RayJobs would then run one at a
   time; the benchmark stops Airflow and kubesim.

Figures, counted from the first ``POST /backfills`` (503s and retries included): seconds to ``n`` RayJobs
existing (the watch's time of the n-th creation) — target 120 s; seconds to ``n`` sensors deferred
(first sample with all deferred, ~1 s resolution); the most task instances running and the most slots
held at one instant, over the whole period; the most slots held, and ``wait`` task instances running,
once all had deferred — target 0. Result::

    {"runs", "worker_slots", "nproc", "max_dagruns_per_loop_to_schedule",
     "backfill_create": {"backfill_id", "refused_503", "request_s"} or {"error", "request_s"},
     "all_rayjobs_s", "rayjobs_created", "all_deferred_s",
     "max_running", "max_slots_held", "max_slots_held_after_all_deferred",
     "max_running_wait_after_all_deferred", "samples_after_all_deferred", "target_submitted_s",
     "cores_busy_until_all_deferred" (machine-wide, /proc/stat, of ``nproc``),
     "component_restarts", "sample_errors": {"count", "first"},
     "series": [{"t", "took_s", "rayjobs", "runs_running", "submit": {"queued", "running", "success"},
                 "wait": {"queued", "running", "deferred"}}, ...],
     "phase_s"}

``t`` is seconds since the first request was sent.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import date, timedelta
from pathlib import Path

import httpx

from bench.harness.cluster import rayjob_body

DAG_ID = "text_classifier_finetune"
NAMESPACE = "ray"
WORKER_SLOTS = 16
"""``AIRFLOW__CORE__PARALLELISM`` as devtools.airflow sets it."""
FIRST_DATE = date(2026, 1, 1)
"""The DAG's start_date: backfill dates from here, all in the past for the benchmark's clock."""
TARGET_SUBMITTED_S = 120.0
BLOCKER = "bench-queue-blocker"
SLOT_STATES = ("queued", "running")
"""Task instance states that hold a worker slot: handed to the executor, or running in a worker."""
BACKFILL_RUNS = "backfill__"
SAMPLE_EVERY_S = 1.0
RAYJOBS = f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
AIRFLOW_DEFAULT_DAGRUNS_PER_LOOP = 20
"""Airflow's default ``[scheduler] max_dagruns_per_loop_to_schedule`` (see the module docstring)."""


def blocker_rayjob() -> dict:
    """A RayJob that takes the ClusterQueue's only GPU forever and cannot be preempted by dev-priority."""
    return rayjob_body(
        BLOCKER,
        labels={"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/priority-class": "prod-priority"},
        requests={"cpu": "2", "memory": "8G", "nvidia.com/gpu": "1"},
        entrypoint="sleep infinity",
        image="rayproject/ray:2.9.0",
        startup_s="0",
    )


def block_queue(sim_url: str, timeout_s: float, headers: dict[str, str] | None = None) -> None:
    """Create the blocker and wait until KubeRay runs it (so it holds the quota)."""
    with httpx.Client(base_url=sim_url, timeout=30, headers=headers) as client:
        client.post(RAYJOBS, json=blocker_rayjob()).raise_for_status()
        deadline = time.monotonic() + timeout_s
        while (client.get(f"{RAYJOBS}/{BLOCKER}").json().get("status") or {}).get(
            "jobDeploymentStatus"
        ) != "Running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"the blocker RayJob was not running within {timeout_s}s")
            time.sleep(0.5)


def unblock_queue(sim_url: str, headers: dict[str, str] | None = None) -> None:
    httpx.delete(f"{sim_url}{RAYJOBS}/{BLOCKER}", timeout=30, headers=headers).raise_for_status()


def count(airflow, path: str, **params) -> int:
    """``total_entries`` of one REST list, fetching a single item."""
    response = airflow.api("GET", path, params={**params, "limit": 1})
    response.raise_for_status()
    return response.json()["total_entries"]


def sample(airflow, watch, started: float) -> dict:
    """One point of the time series. The slot holders (``queued`` + ``running`` task instances of both
    tasks) come from ONE list request, so they are counted at the same instant, and AFTER the deferred
    count: a point that counts every sensor deferred shows the slots held from then on, not just before.
    ``t`` is when the first request was sent and ``took_s`` how long the whole sample took (a loaded
    api-server answers late)."""
    tis = f"/dags/{DAG_ID}/dagRuns/~/taskInstances"
    sent = time.monotonic()
    deferred = count(airflow, tis, task_id="wait", state="deferred", run_id_prefix_pattern=BACKFILL_RUNS)
    response = airflow.api(
        "GET",
        tis,
        params={"state": list(SLOT_STATES), "run_id_prefix_pattern": BACKFILL_RUNS, "limit": 100},
    )
    response.raise_for_status()
    point: dict = {
        "t": round(sent - started, 1),
        "rayjobs": sum(1 for run_id in list(watch.created) if run_id.startswith(BACKFILL_RUNS)),
        "submit": dict.fromkeys(SLOT_STATES, 0),
        "wait": dict.fromkeys(SLOT_STATES, 0),
    }
    for ti in response.json()["task_instances"]:
        point[ti["task_id"]][ti["state"]] += 1
    point["wait"]["deferred"] = deferred
    point["submit"]["success"] = count(
        airflow, tis, task_id="submit", state="success", run_id_prefix_pattern=BACKFILL_RUNS
    )
    point["runs_running"] = count(airflow, f"/dags/{DAG_ID}/dagRuns", run_type="backfill", state="running")
    point["took_s"] = round(time.monotonic() - sent, 1)
    return point


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine from /proc/stat: what every process together used."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def cores_busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Average cores in use between two cpu_jiffies() readings (all processes: Airflow, kubesim, us)."""
    busy, total = after[0] - before[0], after[1] - before[1]
    return round(busy / total * (os.cpu_count() or 1), 2) if total > 0 else None


def slots_held(point: dict) -> int:
    return sum(point[task][state] for task in ("submit", "wait") for state in SLOT_STATES)


def running(point: dict) -> int:
    return point["submit"]["running"] + point["wait"]["running"]


def summarize(
    series: list[dict], created: list[float], n: int, t0_wall: float | None, t0_offset: float | None
) -> dict:
    """The figures of the module docstring. ``t0_wall`` / ``t0_offset``: when the first ``POST /backfills``
    was sent (wall time; seconds into the series); None if the backfill was not created."""
    all_deferred = next((p for p in series if p["wait"]["deferred"] >= n), None)
    after = [p for p in series if all_deferred is not None and p["t"] >= all_deferred["t"]]
    return {
        "all_rayjobs_s": (
            round(sorted(created)[n - 1] - t0_wall, 1) if len(created) >= n and t0_wall is not None else None
        ),
        "rayjobs_created": len(created),
        "all_deferred_s": (
            round(all_deferred["t"] - t0_offset, 1) if all_deferred and t0_offset is not None else None
        ),
        "max_running": max((running(p) for p in series), default=None),
        "max_slots_held": max((slots_held(p) for p in series), default=None),
        "max_slots_held_after_all_deferred": max((slots_held(p) for p in after), default=None),
        "max_running_wait_after_all_deferred": max((p["wait"]["running"] for p in after), default=None),
        "samples_after_all_deferred": len(after),
    }


def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"{exc.response.status_code} on {exc.request.url.path}: {exc.response.text[:300]}"
    return f"{type(exc).__name__}: {exc}"


def _supervise(airflow, restarts: list[str]) -> None:
    """Restart a scheduler or triggerer that died (standalone does not), and remember it: a crash must
    show in the figures, not end the measurement."""
    for component in ("scheduler", "triggerer"):
        if not airflow.component_processes(component):
            restarts.append(component)
            airflow.start_component(component)


class Creator(threading.Thread):
    """``POST /api/v2/backfills`` in the background (the UI's backfill dialog; ``Airflow.create_backfill``
    asks again while the api-server answers 5xx). The figures count from the start of that
    request (``started`` monotonic, ``started_wall`` wall time); the refusals before it are counted
    (``refused_503``: every 5xx or dropped attempt, the key kept from runs that only saw 503s)."""

    def __init__(self, airflow, body: dict, *, timeout_s: float) -> None:
        super().__init__(daemon=True)
        self.airflow, self.body, self.timeout_s = airflow, body, timeout_s
        self.record: dict = {}
        self.started: float | None = None
        self.started_wall: float | None = None

    def run(self) -> None:
        started, started_wall = time.monotonic(), time.time()
        try:
            created, refusals = self.airflow.create_backfill(self.body, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            self.record = {"error": _describe(exc), "request_s": round(time.monotonic() - started, 1)}
            return
        self.record = {
            "backfill_id": created.get("id"),
            "refused_503": refusals,
            "request_s": round(time.monotonic() - started, 1),
        }
        self.started, self.started_wall = started, started_wall

    @property
    def failed(self) -> bool:
        return not self.is_alive() and self.started is None


def measure(
    airflow,
    sim_url: str,
    watch,
    n: int,
    *,
    hold_s: float = 15.0,
    timeout_s: float = 600.0,
    headers: dict[str, str] | None = None,
) -> dict:
    """``headers``: kubesim's Authorization (devtools.kubesim_process runs it with a token)."""
    started_phase = time.monotonic()
    block_queue(sim_url, timeout_s=120, headers=headers)
    body = {
        "dag_id": DAG_ID,
        "from_date": f"{FIRST_DATE.isoformat()}T00:00:00Z",
        "to_date": f"{(FIRST_DATE + timedelta(days=n - 1)).isoformat()}T00:00:00Z",
        "max_active_runs": n,
    }
    creator = Creator(airflow, body, timeout_s=timeout_s)
    cpu_before, cpu_at_all_deferred = cpu_jiffies(), None
    started = time.monotonic()
    creator.start()
    series: list[dict] = []
    restarts: list[str] = []
    sample_errors: list[str] = []
    deferred_at = None
    try:
        while time.monotonic() - started < timeout_s and not creator.failed:
            _supervise(airflow, restarts)
            try:
                point = sample(airflow, watch, started)
            except httpx.HTTPError as exc:  # a loaded api-server's 500 must not end the measurement
                sample_errors.append(f"t={time.monotonic() - started:.1f}: {_describe(exc)}")
                time.sleep(SAMPLE_EVERY_S)
                continue
            series.append(point)
            if deferred_at is None and point["wait"]["deferred"] >= n:
                deferred_at, cpu_at_all_deferred = time.monotonic(), cpu_jiffies()
            if deferred_at is not None and time.monotonic() - deferred_at >= hold_s:
                break
            time.sleep(SAMPLE_EVERY_S)
    finally:
        unblock_queue(sim_url, headers)
    creator.join(timeout=1)
    offset = None if creator.started is None else creator.started - started
    creations = [t for run_id, t in list(watch.created.items()) if run_id.startswith(BACKFILL_RUNS)]
    return {
        "runs": n,
        "worker_slots": WORKER_SLOTS,
        "nproc": os.cpu_count(),
        "max_dagruns_per_loop_to_schedule": airflow.env.get(
            "AIRFLOW__SCHEDULER__MAX_DAGRUNS_PER_LOOP_TO_SCHEDULE"
        ),
        "backfill_create": creator.record,
        **summarize(series, creations, n, creator.started_wall, offset),
        "target_submitted_s": TARGET_SUBMITTED_S,
        "cores_busy_until_all_deferred": (
            cores_busy(cpu_before, cpu_at_all_deferred) if cpu_at_all_deferred else None
        ),
        "component_restarts": restarts,
        "sample_errors": {"count": len(sample_errors), "first": sample_errors[:3]},
        "series": series,
        "phase_s": round(time.monotonic() - started_phase, 1),
    }
