"""What the benchmarks that run a real Airflow share: one ``airflow standalone`` on a throwaway PostgreSQL
with kubesim's single-queue setup (``airflow_stack``), raw watches that record when kubesim told a
watcher about each DAG run's objects (``ClusterWatch``, ``JobWatch``), and readers of Airflow's answers
(``epoch``, ``log_entries``)."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
"""Where kueue_ray lives: Airflow's plugins folder puts it on the path, as pytest's pythonpath does."""
if str(PLUGINS) not in sys.path:
    sys.path.append(str(PLUGINS))

BENCH_DAGS = Path(__file__).resolve().parents[1] / "dags"
"""The benchmark-only DAGs: their own bundle, which only the benchmarks add, so ``make run`` and the DAG
integrity tests see only the pipelines."""
NAMESPACE = "ray"
"""Where the project's DAGs submit (the single-queue setup's namespace)."""
TERMINAL_TI_STATES = frozenset({"success", "failed", "upstream_failed", "skipped", "removed"})


@dataclass
class Stack:
    database: Any
    """devtools.postgres's server (``version``)."""
    sim: Any
    """devtools.kubesim_process's kubesim (``url``, ``headers``, ``kubeconfig``)."""
    airflow: Any
    """devtools.airflow's Airflow (``api``, ``trigger_dag_run``, ``set_paused``)."""
    startup_s: float
    """From starting Airflow until it had parsed the DAGs."""


@contextmanager
def airflow_stack(
    workdir: Path, dag_ids: list[str], *, time_scale: float, extra_env: dict[str, str]
) -> Iterator[Stack]:
    """PostgreSQL, kubesim (single-queue, ``time_scale``) and an Airflow whose DAGs start paused, once it
    parsed ``dag_ids``; all three stopped on the way out, even when the benchmark fails."""
    from devtools.airflow import start_airflow
    from devtools.kubesim_process import start_kubesim
    from devtools.postgres import start_postgres

    database = start_postgres()
    sim = start_kubesim(workdir / "kubesim", queues="single-queue", time_scale=time_scale)
    try:
        started = time.monotonic()
        airflow = start_airflow(
            workdir / "airflow",
            kubeconfig=sim.kubeconfig,
            database_url=database.sqlalchemy_url,
            extra_env={"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True", **extra_env},
        )
        try:
            airflow.wait_for_dags(dag_ids, timeout=300)
            yield Stack(database, sim, airflow, round(time.monotonic() - started, 1))
        finally:
            airflow.stop()
    finally:
        sim.stop()
        database.stop()


def dag_bundles() -> str:
    """``[dag_processor] dag_bundle_config_list``: the pipelines' DAG folder and the benchmark DAGs."""
    from devtools.airflow import ROOT

    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    return json.dumps(
        [
            {"name": "dags-folder", "classpath": local, "kwargs": {"path": str(ROOT / "dags")}},
            {"name": "bench", "classpath": local, "kwargs": {"path": str(BENCH_DAGS)}},
        ]
    )


def epoch(value: str) -> float:
    """Seconds since the epoch of an ISO-8601 timestamp as Airflow writes them (``Z`` or an offset).

    >>> epoch("1970-01-01T00:01:00Z")
    60.0
    """
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def log_entries(airflow, run_id: str, task_id: str, try_number: int, dag_id: str) -> list[dict]:
    """The structured entries of one try's log (what the UI renders), trigger lines included."""
    response = airflow.api(
        "GET",
        f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
        params={"full_content": "true"},
        headers={"Accept": "application/json"},
    )
    response.raise_for_status()
    return [entry for entry in response.json().get("content") or () if isinstance(entry, dict)]


class ClusterWatch:
    """What kubesim told a raw watcher, per owning DAG run: when the run's RayJob first appeared
    (``created``), when its Workload first had ``QuotaReserved=True`` (``admitted``), when the RayJob
    reached Complete or Failed (``finished``). Wall times (``time.time()``), taken as each line is read.

    Two streams: the project's RayJobs (label-selected; their identity annotations name the run) and the
    namespace's Workloads (their owner reference names the RayJob by uid). A stream that ends, or says
    its resourceVersion expired, is relisted and re-opened; events in between are lost, and the run then
    simply has no sample.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        on_finished: Callable[[str, float], None] | None = None,
    ) -> None:
        self.url = url
        self.headers = headers or {}
        """Authorization for kubesim's ``--token`` (devtools.kubesim_process always sets one)."""
        self.on_finished = on_finished
        """Called with (run id, wall time) as each run's RayJob is first seen finished, on the watch's thread."""
        self.created: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self._run_of_uid: dict[str, str] = {}
        self._admitted_uid: dict[str, float] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._follow, args=(path, handler), daemon=True)
            for path, handler in self._streams()
        ]

    def _streams(self) -> list[tuple[str, Callable[[dict, float], None]]]:
        """(path, handler) of each stream followed."""
        return [
            (f"/apis/ray.io/v1/namespaces/{NAMESPACE}/rayjobs", self._on_rayjob),
            (f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads", self._on_workload),
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
        deployment = (obj.get("status") or {}).get("jobDeploymentStatus")
        if deployment in ("Complete", "Failed") and identity.run_id not in self.finished:
            self.finished[identity.run_id] = seen
            if self.on_finished is not None:
                self.on_finished(identity.run_id, seen)

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


class JobWatch(ClusterWatch):
    """When each DAG run's batch Job reached ``Complete`` (the provider peer's ``created`` and
    ``finished``): ``ClusterWatch``'s list-then-watch loop over the namespace's batch Jobs.

    The cncf-kubernetes provider's job operator labels its Job's pod template with the task instance's
    ``dag_id``, ``task_id`` and ``run_id`` (label-safe; the benchmark's run ids already are), so the Job
    names its run.
    """

    def _streams(self) -> list[tuple[str, Callable[[dict, float], None]]]:
        return [(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", self._on_job)]

    def _on_job(self, obj: dict, seen: float) -> None:
        labels = (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        run_id = labels.get("run_id")
        if not run_id:
            return
        self.created.setdefault(run_id, seen)
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions):
            self.finished.setdefault(run_id, seen)
