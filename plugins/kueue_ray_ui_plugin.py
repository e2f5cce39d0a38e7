"""Airflow plugin: Kueue inside the Airflow UI (the app and pages are in ``kueue_ray.ui``).

* a "Kueue" tab on every task instance (``destination: task_instance``): the RayJob the task submitted
  or waits for, live, with its timeline; tasks without a RayJob say so;
* a "Kueue queues" page in the navigation (labelled "Kueue"): every ClusterQueue's quota, cohort, pending and admitted
  workloads;
* their JSON API under ``/kueue/api/v1``.

Every component imports plugins (a task worker does, for macros), but only the api-server serves apps:
the FastAPI app is therefore built on first access of ``fastapi_apps``, so workers and the dag-processor
never import FastAPI for it.

Settings (``airflow.cfg`` or ``AIRFLOW__KUEUE_RAY__*``): ``[kueue_ray] kubernetes_conn_id`` (default
``kubernetes_default``) and ``[kueue_ray] namespaces`` (comma-separated, default ``ray``).
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin


def _root() -> str:
    from airflow.configuration import conf

    from_base_url = conf.get("api", "base_url", fallback="") or ""
    path = from_base_url.split("://", 1)[-1].partition("/")[2] if "://" in from_base_url else from_base_url
    return f"/{path.strip('/')}" if path.strip("/") else ""


_ROOT = _root()
NAV_LABEL = "Kueue"
"""The queues page's entry in Airflow's navigation: short enough to be shown whole."""
"""The path of ``[api] base_url`` ("" at the root): the views' addresses are absolute paths."""


class KueueRayUIPlugin(AirflowPlugin):
    name = "kueue_ray_ui"

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from kueue_ray.ui.webapp import app

        return [{"app": app(), "url_prefix": "/kueue", "name": "Kueue"}]

    external_views = [
        {
            # Airflow's navigation cuts labels beyond about eight characters ("Kueue qu…"); the page's own
            # title says "Kueue queues".
            "name": NAV_LABEL,
            "href": f"{_ROOT}/kueue/queues",
            "destination": "nav",
            "url_route": "kueue-queues",
            "nav_top_level": True,
            "icon": f"{_ROOT}/kueue/static/kueue.svg",
        },
        {
            "name": "Kueue",
            # No map_index: Airflow replaces {MAP_INDEX} only on a mapped task's page and leaves the
            # placeholder in the URL of every other one. The page reads a mapped task's index from the
            # Airflow page around it (.../mapped/<index>/plugin/kueue).
            "href": f"{_ROOT}/kueue/task-instance?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}",
            "destination": "task_instance",
            "url_route": "kueue",
            "icon": f"{_ROOT}/kueue/static/kueue.svg",
        },
    ]
