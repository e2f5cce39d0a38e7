"""Extra links on the operator and the sensor: the task's Kueue tab and the Ray dashboard of its RayJob.

When it shows. Airflow renders an operator's extra links on the worker at the end of every task segment,
the one that defers included, and the UI reads them from XCom. A deferred task runs no worker code until
it resumes, so a link meant to help while the task waits (queued in Kueue, running) must be computable
from what is known when the RayJob is created: its ``namespace``, ``name`` and ``uid``. Those are in the
``rayjob`` XCom (``RAYJOB_XCOM_KEY``) from submission on; ``ray_cluster`` and ``job_id`` are filled in by
KubeRay later and reach the link only when the task resumes (a template needing them shows no link until
then, rather than a broken one).

What it opens. A link is a URL a browser can open, never a command; commands go to the task log
(``where_to_look``). The Ray dashboard is served inside the cluster: by default the link is
``http://localhost:8265/#/jobs`` and needs a port-forward to the Service KubeRay gives every RayJob,
``<rayjob>-head-svc`` (its name is known at submission and survives re-admissions), which the task log
prints. Where dashboards are exposed (an ingress, a proxy), set ``ray_dashboard_url_template`` on the
operator or sensor, or in the ``kubernetes`` connection's extra: a ``str.format`` string over the fields
above, e.g. ``https://ray.example.com/{namespace}/{name}/#/jobs``.

On a MultiKueue manager the Ray cluster runs on a worker cluster: once the ``rayjob`` XCom names it
(``worker_cluster``, when the task resumes), the link is rendered from the worker connection's
(``kueue_worker_<name>``, ``kueue_ray.multikueue.worker_connection_id``) ``ray_dashboard_url_template``, or is
the port-forward URL, the port-forward then made with that worker's kubeconfig.

The Kueue link opens the task instance's "Kueue" tab in Airflow's own UI (``kueue_ray_ui_plugin``): queue
position, phase and timeline of the RayJob, live; under ``[api] base_url`` when that is set.
"""

from __future__ import annotations

import string
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from kueue_ray.naming import JOB_UID_LABEL
from kueue_ray.results import RAYJOB_XCOM_KEY

DASHBOARD_TEMPLATE_FIELD = "ray_dashboard_url_template"
DASHBOARD_PORT = 8265
"""The Ray dashboard's port on the head Service (KubeRay's default)."""
PORT_FORWARD_URL = f"http://localhost:{DASHBOARD_PORT}/#/jobs"
"""The default link: the Ray dashboard's job list through ``port_forward_command``."""
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


def port_forward_command(namespace: str, name: str) -> str:
    """What makes ``PORT_FORWARD_URL`` show this RayJob's dashboard (once KubeRay runs its Ray cluster)."""
    return f"kubectl -n {namespace} port-forward svc/{name}-head-svc {DASHBOARD_PORT}:{DASHBOARD_PORT}"


def dashboard_template(operator: Any, worker: str | None = None) -> str | None:
    """The configured URL template: the operator's argument, else the ``kubernetes`` connection's extra;
    for a RayJob MultiKueue ran on ``worker``, that worker connection's extra (the manager's dashboards are
    not where the Ray cluster runs)."""
    if worker:
        from kueue_ray.multikueue import worker_connection_id

        return _connection_template(worker_connection_id(worker))
    own = getattr(operator, DASHBOARD_TEMPLATE_FIELD, None)
    if own:
        return own
    conn_id = getattr(operator, "kubernetes_conn_id", None)
    return _connection_template(conn_id) if conn_id else None


def _connection_template(conn_id: str) -> str | None:
    from airflow.sdk import BaseHook

    try:
        extra = BaseHook.get_connection(conn_id).extra_dejson
    except Exception:  # noqa: BLE001 - no connection, no template: fall back to the default
        return None
    return extra.get(DASHBOARD_TEMPLATE_FIELD) or None


async def worker_dashboard_template(worker: str) -> str | None:
    """``dashboard_template(operator, worker)`` in the triggerer, where a task may end: the worker
    connection's template, read through Airflow's async connection access; None without one."""
    from airflow.providers.common.compat.connection import get_async_connection

    from kueue_ray.multikueue import worker_connection_id

    try:
        extra = (await get_async_connection(worker_connection_id(worker))).extra_dejson
    except Exception:  # noqa: BLE001 - no connection, no template: the default link
        return None
    return extra.get(DASHBOARD_TEMPLATE_FIELD) or None


def dashboard_url(template: str | None, fields: dict[str, Any]) -> str:
    """The link for a RayJob described by ``fields`` (the ``rayjob`` XCom); "" before the RayJob exists."""
    if not fields.get("name") or not fields.get("namespace"):
        return ""
    return render_link(template, fields) if template else PORT_FORWARD_URL


def where_to_look(template: str | None, fields: dict[str, Any]) -> list[str]:
    """Task-log lines that say how to watch the RayJob: the dashboard (with the port-forward it needs,
    when it needs one) and the kubectl command that shows its Kueue Workload."""
    namespace, name, uid = fields["namespace"], fields["name"], fields.get("uid")
    if template:
        url = render_link(template, fields)
        dashboard = (
            f"Ray dashboard: {url}" if url else f"Ray dashboard: {template} (once KubeRay fills it in)"
        )
    else:
        dashboard = (
            f"Ray dashboard (once the RayJob runs): {port_forward_command(namespace, name)}, then open "
            f"{PORT_FORWARD_URL} (the task's 'Ray dashboard' link)"
        )
    lines = [dashboard]
    if uid:
        lines.append(f"Kueue Workload: kubectl -n {namespace} describe workloads -l {JOB_UID_LABEL}={uid}")
    return lines


def _rayjob_fields(operator: Any, ti_key: Any) -> dict[str, Any]:
    known = getattr(operator, "rayjob_details", None)
    if known is not None:  # set in this worker segment: newer than any XCom
        return dict(known)
    from airflow.sdk.execution_time.xcom import XCom

    return dict(XCom.get_value(ti_key=ti_key, key=RAYJOB_XCOM_KEY) or {})


class RayDashboardLink(BaseOperatorLink):
    """The Ray dashboard of the task's RayJob: a port-forwarded localhost URL, or ``ray_dashboard_url_template``."""

    name = "Ray dashboard"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        fields = _rayjob_fields(operator, ti_key)
        return dashboard_url(dashboard_template(operator, fields.get("worker_cluster")), fields)


class KueueTabLink(BaseOperatorLink):
    """The task instance's Kueue tab: where the RayJob waits, why, and what happened to it."""

    name = "Kueue"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        if not _rayjob_fields(operator, ti_key).get("name"):
            return ""
        from airflow.sdk.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
        return base + kueue_tab_path(ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.map_index)
