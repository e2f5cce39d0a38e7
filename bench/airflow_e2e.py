"""End-to-end latency in Airflow (issue 7 §2): RayJob completion → the deferred sensor's success.

A real ``airflow standalone`` (scheduler, dag-processor, triggerer, api-server; devtools.airflow) runs the
project's ``text_classifier_finetune`` DAG against a kubesim subprocess with the single-queue setup
(devtools.kubesim_process), so each run's RayJob queues behind the others and runs alone.

A raw watch in this process records when each RayJob's terminal status (Complete) reached a watcher;
the sensor task ``wait`` of the run that owns the RayJob (the operator's identity annotations say which)
succeeds when the triggerer's event has gone through the scheduler and a worker ran
``execute_complete``: latency = the task instance's ``end_date`` minus that moment. The polling peer's
expected detection delay alone is half its interval (5 s for a 10 s poll), before the same scheduling.

Admission → a task state change is not measured: by design no Airflow task changes state when Kueue
admits (the sensor stays deferred; the trigger writes the admission to the task log), so there is no
state change to time; §1's detection latency is the figure for admission events reaching the triggerer.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx

from bench.stats import summary_ms

DAG_ID = "text_classifier_finetune"
NAMESPACE = "ray"
TIME_SCALE = 20.0


def _watch_terminal(url: str, seen: dict[str, float], stop: threading.Event) -> None:
    """Record, per owning run id, the wall time a RayJob's terminal status reached this watcher."""
    from kueue_ray.naming import MANAGED_BY_SELECTOR, AirflowIdentity

    path = f"{url}/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs"
    with httpx.Client(timeout=None) as client:
        rv = client.get(path).json()["metadata"]["resourceVersion"]
        params = {"watch": "true", "resourceVersion": rv, "labelSelector": MANAGED_BY_SELECTOR}
        with client.stream("GET", path, params=params) as response:
            for line in response.iter_lines():
                received = time.time()
                if stop.is_set():
                    return
                obj = json.loads(line)["object"]
                if (obj.get("status") or {}).get("jobDeploymentStatus") not in ("Complete", "Failed"):
                    continue
                identity = AirflowIdentity.from_annotations(obj["metadata"].get("annotations"))
                if identity is not None and identity.run_id not in seen:
                    seen[identity.run_id] = received


def _epoch(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def measure(runs: int, workdir: Path, timeout_s: float) -> dict:
    from devtools.airflow import start_airflow
    from devtools.kubesim_process import start_kubesim

    sim = start_kubesim(workdir / "kubesim", queues="single", time_scale=TIME_SCALE)
    try:
        started = time.monotonic()
        airflow = start_airflow(
            workdir / "airflow",
            kubeconfig=sim.kubeconfig,
            extra_env={"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"},
        )
        try:
            airflow.wait_for_dags([DAG_ID], timeout=300)
            startup_s = time.monotonic() - started
            seen: dict[str, float] = {}
            stop = threading.Event()
            watcher = threading.Thread(target=_watch_terminal, args=(sim.url, seen, stop), daemon=True)
            watcher.start()
            airflow.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False}).raise_for_status()
            run_ids = []
            for _ in range(runs):
                body = {"logical_date": None, "conf": {}, "dag_run_id": f"bench__{uuid.uuid4().hex[:10]}"}
                response = airflow.api("POST", f"/dags/{DAG_ID}/dagRuns", json=body)
                response.raise_for_status()
                run_ids.append(response.json()["dag_run_id"])
            ends: dict[str, dict] = {}
            deadline = time.monotonic() + timeout_s
            while len(ends) < runs and time.monotonic() < deadline:
                for run_id in run_ids:
                    if run_id in ends:
                        continue
                    ti = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/wait").json()
                    if ti.get("state") in ("success", "failed", "upstream_failed"):
                        ends[run_id] = ti
                time.sleep(1)
            stop.set()
        finally:
            airflow.stop()
    finally:
        sim.stop()
    latencies = [
        _epoch(ti["end_date"]) - seen[run_id]
        for run_id, ti in ends.items()
        if ti.get("state") == "success" and ti.get("end_date") and run_id in seen
    ]
    states: dict[str, int] = {}
    for ti in ends.values():
        states[ti["state"]] = states.get(ti["state"], 0) + 1
    return {
        "runs": runs,
        "finished": len(ends),
        "sensor_states": states,
        "airflow_startup_s": round(startup_s, 1),
        "completion_to_sensor_success": summary_ms(latencies),
        "polling_expected_detection_ms": 5000,
    }


def run(runs: int = 5, timeout_s: float = 900.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as directory:
        return measure(runs, Path(directory), timeout_s)
