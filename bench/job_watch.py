"""When each DAG run's batch Job reached ``Complete``, seen by a raw watch (the provider peer's
``ClusterWatch``).

The cncf-kubernetes provider's job operator labels its Job's pod template with the task instance's
``dag_id``, ``task_id`` and ``run_id`` (label-safe; the benchmark's run ids already are), so the Job names
its run. ``finished[run_id]`` is the wall time (``time.time()``) the watch read the first event with the
Job's ``Complete`` condition true.
"""

from __future__ import annotations

import threading

from bench.airflow_e2e import NAMESPACE, ClusterWatch


class JobWatch(ClusterWatch):
    """``ClusterWatch``'s list-then-watch loop over the namespace's batch Jobs."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(url, headers)
        path = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
        self._threads = [threading.Thread(target=self._follow, args=(path, self._on_job), daemon=True)]

    def _on_job(self, obj: dict, seen: float) -> None:
        labels = (((obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
        run_id = labels.get("run_id")
        if not run_id:
            return
        self.created.setdefault(run_id, seen)
        conditions = (obj.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions):
            self.finished.setdefault(run_id, seen)
