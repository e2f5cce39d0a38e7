"""Extra links on the operator and sensor: the task's Kueue tab, the Ray dashboard and the Kueue Workload.

Both are rendered on the worker when a task segment ends (also the one that defers), from what the task
pushed to XCom under ``RAYJOB_XCOM_KEY``: {name, namespace, uid, workload_name, ray_cluster, job_id,
dashboard_url, cluster_queue, queue}. A link is "" (hidden) until the fields it needs are known.

URL templates are ``str.format`` strings over those fields. They come from the operator argument, else
from the ``kubernetes`` connection's extra, else a default:

* Ray dashboard: ``ray_dashboard_url_template`` (operator arg / connection extra), e.g.
  ``https://ray.example.com/{namespace}/{ray_cluster}/#/jobs/{job_id}``. Default: KubeRay's
  ``status.dashboardURL`` (an in-cluster service address, reachable through ``kubectl port-forward``).
* Kueue: the task instance's "Kueue" tab in Airflow's own UI (``kueue_ray_ui_plugin``): queue position,
  phase and timeline of the RayJob, live. Under ``[api] base_url`` when that is set.
* Kueue Workload: ``workload_url_template``, e.g. a cluster console
  ``https://console.example.com/k8s/ns/{namespace}/kueue.x-k8s.io~v1beta2~Workload/{workload_name}``.
  Default: the kubectl command that shows it, ``kubectl -n {namespace} describe workload {workload_name}``
  (Workload names are Kueue's, found by the ``kueue.x-k8s.io/job-uid`` label; the command has them filled in).
"""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

RAYJOB_XCOM_KEY = "rayjob"
DASHBOARD_TEMPLATE_FIELD = "ray_dashboard_url_template"
WORKLOAD_TEMPLATE_FIELD = "workload_url_template"
DEFAULT_WORKLOAD_TEMPLATE = "kubectl -n {namespace} describe workload {workload_name}"
KUEUE_TAB_ROUTE = "kueue"
"""The ``url_route`` of the plugin's task-instance tab: Airflow's UI serves it at
``.../tasks/<task_id>/plugin/kueue``."""


def task_instance_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """A task instance's page in Airflow's UI, relative to its base URL (ids percent-encoded, as the UI
    encodes them: run ids hold ``:`` and ``+``)."""
    path = f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    return f"{path}/mapped/{map_index}" if map_index is not None and map_index >= 0 else path


def kueue_tab_path(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    return f"{task_instance_path(dag_id, run_id, task_id, map_index)}/plugin/{KUEUE_TAB_ROUTE}"


def render_link(template: str | None, fields: dict[str, Any]) -> str:
    """Fill ``template`` from ``fields``; "" when it is missing or needs a field that is not known yet."""
    if not template:
        return ""
    needed = {name for _, name, _, _ in string.Formatter().parse(template) if name}
    if any(fields.get(name) in (None, "") for name in needed):
        return ""
    return template.format(**{name: fields[name] for name in needed})


def _template(operator: Any, field: str) -> str | None:
    own = getattr(operator, field, None)
    if own:
        return own
    conn_id = getattr(operator, "kubernetes_conn_id", None)
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson
    except Exception:  # noqa: BLE001 - no connection, no template: fall back to the default
        return None
    return extra.get(field) or None


def _rayjob_fields(operator: Any, ti_key: Any) -> dict[str, Any]:
    known = getattr(operator, "rayjob_details", None)
    if known:
        return dict(known)
    from airflow.sdk.execution_time.xcom import XCom

    return dict(XCom.get_value(ti_key=ti_key, key=RAYJOB_XCOM_KEY) or {})


class RayDashboardLink(BaseOperatorLink):
    """The Ray dashboard of the RayJob's current (or last) Ray cluster."""

    name = "Ray dashboard"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        fields = _rayjob_fields(operator, ti_key)
        template = _template(operator, DASHBOARD_TEMPLATE_FIELD)
        if template:
            return render_link(template, fields)
        url = fields.get("dashboard_url") or ""
        if url and "://" not in url:
            url = f"http://{url}"
        return url


class KueueTabLink(BaseOperatorLink):
    """The task instance's Kueue tab: where the RayJob waits, why, and what happened to it."""

    name = "Kueue"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        if not _rayjob_fields(operator, ti_key).get("name"):
            return ""
        from airflow.sdk.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return base + kueue_tab_path(ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.map_index)


class KueueWorkloadLink(BaseOperatorLink):
    """Where to look at the Kueue Workload: a console URL, or the kubectl command by default."""

    name = "Kueue Workload"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        fields = _rayjob_fields(operator, ti_key)
        template = _template(operator, WORKLOAD_TEMPLATE_FIELD) or DEFAULT_WORKLOAD_TEMPLATE
        return render_link(template, fields)
