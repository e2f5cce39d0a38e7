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

import json
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx

from bench import backfill
from bench.stats import summary_ms

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
"""Where kueue_ray lives: Airflow's plugins folder puts it on the path, as pytest's pythonpath does."""
if str(PLUGINS) not in sys.path:
    sys.path.append(str(PLUGINS))

DAG_ID = "text_classifier_finetune"
NAMESPACE = "ray"
TIME_SCALE = 10.0
"""A run's RayJob: 5 simulated s start-up + 60 s training = 6.5 s of wall time, longer than a sensor takes
to start and defer here, so the RayJobs queued behind it are admitted while their triggers wait."""
ADMISSION_EVENT = "Workload QuotaReserved=True (Kueue's admission write, before the RayJob is unsuspended)"
POLLING_PEERS = (
    ("cncf KubernetesJobTrigger / Spark CRD launcher", 10),
    ("astronomer-providers Ray trigger", 60),
)
"""(peer, poll interval s): a poller notices a change half an interval late on average."""
TERMINAL_TI_STATES = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})
QUEUED_PHASE = ": QUEUED ("
KNOWN_PHASES = (": ADMITTED (", ": RUNNING (")
PHASES = (QUEUED_PHASE, *KNOWN_PHASES, ": SUCCEEDED (", ": FAILED (", ": STOPPED (", ": PREEMPTED (")
"""How the trigger's transition lines name the phase (``RayJob ns/name: ADMITTED (QuotaReserved): ...``)."""


def epoch(value: str) -> float:
    """Seconds since the epoch of an ISO-8601 timestamp as Airflow writes them (``Z`` or an offset)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class ClusterWatch:
    """What kubesim told a raw watcher, per owning DAG run: when the run's RayJob first appeared
    (``created``), when its Workload first had ``QuotaReserved=True`` (``admitted``), when the RayJob
    reached Complete or Failed (``finished``). Wall times (``time.time()``), taken as each line is read.

    Two streams: the project's RayJobs (label-selected; their identity annotations name the run) and the
    namespace's Workloads (their owner reference names the RayJob by uid). A stream that ends, or says
    its resourceVersion expired, is relisted and re-opened; events in between are lost, and the run then
    simply has no sample.
    """

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.headers = headers or {}
        """Authorization for kubesim's ``--token`` (devtools.kubesim_process always sets one)."""
        self.created: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self._run_of_uid: dict[str, str] = {}
        self._admitted_uid: dict[str, float] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._follow, args=(path, handler), daemon=True)
            for path, handler in (
                (f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs", self._on_rayjob),
                (f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads", self._on_workload),
            )
        ]

    @property
    def admitted(self) -> dict[str, float]:
        return {self._run_of_uid[uid]: t for uid, t in self._admitted_uid.items() if uid in self._run_of_uid}

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop recording (the daemon threads end with their stream or the process)."""
        self._stop.set()

    def _on_rayjob(self, obj: dict, seen: float) -> None:
        from kueue_ray.naming import AirflowIdentity

        identity = AirflowIdentity.from_annotations(obj["metadata"].get("annotations"))
        if identity is None:
            return
        self._run_of_uid.setdefault(obj["metadata"]["uid"], identity.run_id)
        self.created.setdefault(identity.run_id, seen)
        if (obj.get("status") or {}).get("jobDeploymentStatus") in ("Complete", "Failed"):
            self.finished.setdefault(identity.run_id, seen)

    def _on_workload(self, obj: dict, seen: float) -> None:
        conditions = (obj.get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in conditions):
            return
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "RayJob":
                self._admitted_uid.setdefault(ref["uid"], seen)

    def _follow(self, path: str, handler) -> None:
        from kueue_ray.naming import MANAGED_BY_SELECTOR

        params = {"labelSelector": MANAGED_BY_SELECTOR} if "rayjobs" in path else {}
        with httpx.Client(base_url=self.url, timeout=None, headers=self.headers) as client:
            while not self._stop.is_set():
                try:
                    self._list_and_watch(client, path, params, handler)
                except httpx.HTTPError:
                    if self._stop.is_set():  # kubesim is being stopped
                        return
                    time.sleep(0.5)

    def _list_and_watch(self, client: httpx.Client, path: str, params: dict, handler) -> None:
        listed = client.get(path, params=params).json()
        for item in listed["items"]:
            handler(item, time.time())
        watch = {**params, "watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
        with client.stream("GET", path, params=watch) as response:
            for line in response.iter_lines():
                seen = time.time()
                if self._stop.is_set():
                    return
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return
                if event["type"] in ("ADDED", "MODIFIED"):
                    handler(event["object"], seen)


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


def log_entries(airflow, run_id: str, task_id: str, try_number: int, dag_id: str = DAG_ID) -> list[dict]:
    """The structured entries of one try's log (what the UI renders), trigger lines included."""
    response = airflow.api(
        "GET",
        f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
        params={"full_content": "true"},
        headers={"Accept": "application/json"},
    )
    response.raise_for_status()
    return [entry for entry in response.json().get("content") or () if isinstance(entry, dict)]


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
            log_entries(airflow, run_id, "wait", ti["try_number"])
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
    from devtools.airflow import start_airflow
    from devtools.kubesim_process import start_kubesim
    from devtools.postgres import start_postgres

    database = start_postgres()
    sim = start_kubesim(workdir / "kubesim", queues="single-queue", time_scale=TIME_SCALE)
    try:
        started = time.monotonic()
        airflow = start_airflow(
            workdir / "airflow",
            kubeconfig=sim.kubeconfig,
            database_url=database.sqlalchemy_url,
            extra_env={
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                # see bench.backfill: with the default 20, only a backfill's first 20 runs progress
                # while they wait in Kueue's queue; the default's 20 on top leave room for other runs
                "AIRFLOW__SCHEDULER__MAX_DAGRUNS_PER_LOOP_TO_SCHEDULE": str(
                    backfill_runs + backfill.AIRFLOW_DEFAULT_DAGRUNS_PER_LOOP
                ),
            },
        )
        try:
            airflow.wait_for_dags([DAG_ID], timeout=300)
            startup_s = round(time.monotonic() - started, 1)
            watch = ClusterWatch(sim.url, sim.headers)
            watch.start()
            airflow.set_paused(DAG_ID, False)
            latency = _phase(measure_latency, airflow, watch, runs, timeout_s) if runs else None
            if latency is not None:
                latency["airflow_startup_s"] = startup_s
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
        finally:
            airflow.stop()
    finally:
        sim.stop()
        database.stop()
    for phase in (latency, backfilled):
        if phase is not None:
            phase["metadata_database"] = database.version
    return {"e2e": latency, "backfill": backfilled}


def run(runs: int = 10, backfill_runs: int = 0, timeout_s: float = 900.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as directory:
        return measure(runs, backfill_runs, Path(directory), timeout_s)
