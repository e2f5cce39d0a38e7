"""End-to-end latency in Airflow (issue 7 §2), and the one Airflow start the backfill benchmark shares.

A real Airflow (scheduler, dag-processor, triggerer, api-server, LocalExecutor with
``[core] parallelism`` 16; devtools.airflow) on a PostgreSQL metadata database (devtools.postgres: what
Airflow's users run; SQLite refuses the 200-run backfill under load) runs the project's
``text_classifier_finetune`` DAG against a kubesim subprocess with the single-queue setup at time-scale 10
(devtools.kubesim_process). ``runs``
manual runs are triggered at once through the REST API; the DAG lets 3 run at a time and the ClusterQueue
admits one RayJob at a time, so almost every RayJob queues behind another one and its admission is a real
Kueue admission that happens while its sensor is already deferred.

Raw watches in this process (``ClusterWatch``: the project's RayJobs, and the Workloads of namespace
``ray``) record, per DAG run, the wall time an event reached a watcher. Two latencies per run:

* **Kueue admission → Airflow knows.** Admission is the Workload's first ``QuotaReserved=True`` (Kueue
  writes it, with ``Admitted``, before the RayJob is unsuspended: the earliest kubesim write that *is*
  admission). No task changes state on admission, by design: the sensor stays deferred and its trigger
  writes the transition (``ADMITTED``, or ``RUNNING`` if KubeRay was already running the job by the time
  the trigger looked) to the task log, which is what a user sees in the UI. "Airflow knows" is the
  timestamp of that log record, as returned by ``GET .../taskInstances/wait/logs/{try}``. Only runs
  whose trigger had logged ``QUEUED`` before that line count: a RayJob admitted before its sensor deferred
  (the first run, into an empty queue) measures the sensor's start-up, not the reaction to admission.
* **RayJob completion → sensor success.** From the moment the watch saw ``jobDeploymentStatus`` Complete
  to the ``wait`` task instance's ``end_date``: the trigger's event, the scheduler resuming the task, a
  worker running ``execute_complete``.

Next to them, the polling peers' expected detection delay (half their poll interval, before the same
scheduling) — constants, expected, not measured here; §1 measures the trigger's own detection latency.

``run`` starts kubesim and Airflow once, runs this measurement and then, in the same Airflow (the start
takes 1–2 minutes here), ``bench.backfill``'s; everything is stopped even when a phase fails. Result::

    {"e2e": {"runs", "finished", "sensor_states", "airflow_startup_s", "admission_event",
             "admission_to_task_log": {"count", "p50_ms", "p99_ms", "max_ms"},
             "admission_excluded": {"admitted_before_trigger_waited", "no_admission_line"},
             "completion_to_sensor_success": {"count", "p50_ms", "p99_ms", "max_ms"},
             "polling_peers": [{"peer", "poll_interval_s", "expected_detection_ms"}], "phase_s"},
     "backfill": see bench.backfill}

A phase that fails is ``{"error": "..."}``; a skipped one (size 0) is None.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

from bench import backfill
from bench.harness.airflow import TERMINAL_TI_STATES, ClusterWatch, airflow_stack, epoch, log_entries
from bench.stats import summary_ms

DAG_ID = "text_classifier_finetune"
TIME_SCALE = 10.0
"""A run's RayJob: 5 simulated s start-up + 60 s training = 6.5 s of wall time, longer than a sensor takes
to start and defer here, so the RayJobs queued behind it are admitted while their triggers wait."""
ADMISSION_EVENT = "Workload QuotaReserved=True (Kueue's admission write, before the RayJob is unsuspended)"
POLLING_PEERS = (
    ("cncf KubernetesJobTrigger / Spark CRD launcher", 10),
    ("astronomer-providers Ray trigger", 60),
)
"""(peer, poll interval s): a poller notices a change half an interval late on average."""
QUEUED_PHASE = ": QUEUED ("
KNOWN_PHASES = (": ADMITTED (", ": RUNNING (")
PHASES = (QUEUED_PHASE, *KNOWN_PHASES, ": SUCCEEDED (", ": FAILED (", ": STOPPED (", ": PREEMPTED (")
"""How the trigger's transition lines name the phase (``RayJob ns/name: ADMITTED (QuotaReserved): ...``)."""


def task_instances(airflow, task_id: str, run_id_prefix: str, **filters) -> list[dict]:
    """Every task instance of ``task_id`` in the runs whose id starts with ``run_id_prefix`` (paged)."""
    found: list[dict] = []
    while True:
        response = airflow.api(
            "GET",
            f"/dags/{DAG_ID}/dagRuns/~/taskInstances",
            params={
                "task_id": task_id,
                "run_id_prefix_pattern": run_id_prefix,
                "limit": 100,
                "offset": len(found),
                **filters,
            },
        )
        response.raise_for_status()
        page = response.json()
        found += page["task_instances"]
        if not page["task_instances"] or len(found) >= page["total_entries"]:
            return found


def airflow_knows_admission(entries: list[dict]) -> tuple[float | None, bool]:
    """From the trigger's lines: (timestamp of its first ADMITTED / RUNNING line, whether it had logged
    QUEUED before). None when its first phase line after QUEUED-or-nothing was another one (the RayJob
    had already finished when the trigger first looked)."""
    queued_before = False
    for entry in entries:
        event = str(entry.get("event", ""))
        phase = next((phase for phase in PHASES if phase in event), None)
        if phase == QUEUED_PHASE:
            queued_before = True
        elif phase in KNOWN_PHASES and entry.get("timestamp"):
            return epoch(entry["timestamp"]), queued_before
        elif phase is not None:
            return None, queued_before
    return None, queued_before


def measure_latency(airflow, watch: ClusterWatch, runs: int, timeout_s: float) -> dict:
    started = time.monotonic()
    prefix = f"bench_{uuid.uuid4().hex[:6]}__"
    for index in range(runs):
        airflow.trigger_dag_run(DAG_ID, run_id=f"{prefix}{index:03d}")
    deadline = time.monotonic() + timeout_s
    while True:
        ends = {ti["dag_run_id"]: ti for ti in task_instances(airflow, "wait", prefix)}
        done = {run_id: ti for run_id, ti in ends.items() if ti.get("state") in TERMINAL_TI_STATES}
        if len(done) >= runs or time.monotonic() > deadline:
            break
        time.sleep(2)

    completion, admission = [], []
    excluded = {"admitted_before_trigger_waited": 0, "no_admission_line": 0}
    admitted = watch.admitted
    for run_id, ti in done.items():
        if ti["state"] != "success":
            continue
        if ti.get("end_date") and run_id in watch.finished:
            completion.append(epoch(ti["end_date"]) - watch.finished[run_id])
        if run_id not in admitted:
            continue
        known_at, queued_before = airflow_knows_admission(
            log_entries(airflow, run_id, "wait", ti["try_number"], DAG_ID)
        )
        if not queued_before:
            excluded["admitted_before_trigger_waited"] += 1
        elif known_at is None:
            excluded["no_admission_line"] += 1
        else:
            admission.append(known_at - admitted[run_id])
    states: dict[str, int] = {}
    for ti in done.values():
        states[ti["state"]] = states.get(ti["state"], 0) + 1
    return {
        "runs": runs,
        "finished": len(done),
        "sensor_states": states,
        "admission_event": ADMISSION_EVENT,
        "admission_to_task_log": summary_ms(admission),
        "admission_excluded": excluded,
        "completion_to_sensor_success": summary_ms(completion),
        "polling_peers": [
            {"peer": peer, "poll_interval_s": interval, "expected_detection_ms": interval * 500}
            for peer, interval in POLLING_PEERS
        ],
        "phase_s": round(time.monotonic() - started, 1),
    }


def _phase(measure, *args, **kwargs) -> dict:
    """One phase's result, or its error: a broken latency phase must not hide the backfill figures."""
    try:
        return measure(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported in the result, next to the other phase
        return {"error": f"{type(exc).__name__}: {exc}"}


def measure(runs: int, backfill_runs: int, workdir: Path, timeout_s: float) -> dict:
    extra_env = {
        # see bench.backfill: with the default 20, only a backfill's first 20 runs progress
        # while they wait in Kueue's queue; the default's 20 on top leave room for other runs
        "AIRFLOW__SCHEDULER__MAX_DAGRUNS_PER_LOOP_TO_SCHEDULE": str(
            backfill_runs + backfill.AIRFLOW_DEFAULT_DAGRUNS_PER_LOOP
        ),
    }
    with airflow_stack(workdir, [DAG_ID], time_scale=TIME_SCALE, extra_env=extra_env) as stack:
        airflow, sim = stack.airflow, stack.sim
        watch = ClusterWatch(sim.url, sim.headers)
        watch.start()
        airflow.set_paused(DAG_ID, False)
        latency = _phase(measure_latency, airflow, watch, runs, timeout_s) if runs else None
        if latency is not None:
            latency["airflow_startup_s"] = stack.startup_s
        backfilled = (
            _phase(
                backfill.measure,
                airflow,
                sim.url,
                watch,
                backfill_runs,
                timeout_s=timeout_s,
                headers=sim.headers,
            )
            if backfill_runs
            else None
        )
        watch.stop()
    for phase in (latency, backfilled):
        if phase is not None:
            phase["metadata_database"] = stack.database.version
    return {"e2e": latency, "backfill": backfilled}


def run(runs: int = 10, backfill_runs: int = 0, timeout_s: float = 900.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as directory:
        return measure(runs, backfill_runs, Path(directory), timeout_s)
