"""The Kueue UI's FastAPI app, mounted by Airflow's api-server at ``/kueue`` (see the plugin module).

Pages (HTML; Airflow shows them in an iframe):

* ``GET /kueue/queues`` - the "Kueue queues" page of the navigation;
* ``GET /kueue/task-instance?dag_id=&run_id=&task_id=&map_index=`` - the "Kueue" tab of a task instance.

JSON API, used by both pages and documented in README.md ("Kueue in the Airflow UI"):

* ``GET /kueue/api/v1/queues`` - every ClusterQueue (``views.queues_view``);
* ``GET /kueue/api/v1/task-instance?dag_id=&run_id=&task_id=&map_index=`` - one task's RayJob, or a
  deploy task's RayService (``views.task_view``); 403 unless the user may read the DAG;
* ``GET /kueue/api/v1/openapi.json`` - the schema of the above.

Both JSON endpoints take ``known=<version>``: when the cluster has not changed since the answer that
carried that ``version``, the answer is an empty 204 at once. The pages ask every ``POLL_SECONDS`` (2 s)
with the version they show, so they stay live without a reload, an unchanged cluster costs a 204, and no
request is held open: a browser opens at most six connections to one host for all its tabs together, and
tabs holding requests open (long polling) starved every other tab of Airflow's UI in the benchmark.
Every answer is built from the process's :class:`~kueue_ray.ui.cache.ClusterCache`; no request asks
the cluster anything of its own.

Everything, static files included, requires an authenticated Airflow user (``access``).

The views are plain JSON values, so the answers are encoded as they are (``JSONResponse``): FastAPI's
``jsonable_encoder``, which a returned dict goes through, took 313 ms for the queues page of a cluster with
1,000 pending and 10,000 finished workloads, where ``json.dumps`` takes 8 ms.
"""

from __future__ import annotations

import asyncio
import logging
import string
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from kueue_ray.options import SECTION
from kueue_ray.ui.access import Access, ReadableDags
from kueue_ray.ui.cache import ClusterCache
from kueue_ray.ui.pods import PodReads
from kueue_ray.ui.priority_edit import change_priority, dispatched_to, editable_dag, offer
from kueue_ray.ui.views import (
    APP_PREFIX,
    Links,
    TaskRef,
    queues_view,
    service_cluster_queue,
    task_cluster_queue,
    task_view,
)
from kueue_ray.ui.views.rayjob import starting_cluster

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = frozenset({"kueue.js", "kueue.css", "kueue.svg"})
DEFAULT_NAMESPACES = "ray"
PAGES = string.Template((STATIC / "page.html").read_text())
"""Both pages are one HTML shell (``static/page.html``); ``kueue.js`` draws the page its ``data-page`` names."""
UNCHANGED: dict[int | str, dict[str, Any]] = {
    204: {"description": "nothing changed since the version given as `known`"}
}
"""The answer of a poll whose page is up to date (the JSON API's ``known``), in the OpenAPI document."""
DASHBOARD_LINK_XCOM = "_link_RayDashboardLink"
"""Where Airflow keeps the Ray dashboard extra link the task rendered (``links.RayDashboardLink``)."""


def _page(page: str, title: str) -> HTMLResponse:
    return HTMLResponse(PAGES.substitute(page=page, title=title), headers={"Cache-Control": "no-store"})


def settings_from_airflow() -> tuple[str, list[str]]:
    """``[kueue_ray] kubernetes_conn_id`` (default ``kubernetes_default``) and ``[kueue_ray] namespaces``
    (comma-separated, default ``ray``): the connection and the namespaces the pages watch."""
    from airflow.configuration import conf

    conn_id = conf.get(SECTION, "kubernetes_conn_id", fallback="kubernetes_default")
    namespaces = conf.get(SECTION, "namespaces", fallback=DEFAULT_NAMESPACES)
    return conn_id, [n.strip() for n in namespaces.split(",") if n.strip()]


def this_deployment() -> str | None:
    """This Airflow deployment's identity (``kueue_ray.deployment.ensure_stored``: the api-server stores a
    generated one in the metadata database on first start); None, logged, when it cannot be read: the
    pages then tell no deployment from another, as before deployments existed."""
    from kueue_ray.deployment import ensure_stored

    try:
        return ensure_stored()
    except Exception:  # noqa: BLE001 - the pages still work without it
        logging.getLogger(__name__).exception("The Airflow deployment identity could not be read")
        return None


def airflow_root() -> str:
    """The path Airflow's UI is served under (from ``[api] base_url``), "" at the root."""
    from airflow.api_fastapi.app import API_ROOT_PATH

    return API_ROOT_PATH.rstrip("/")


async def current_user(request: Request) -> Any:
    """The Airflow user of this request, exactly as Airflow's REST API resolves it (bearer token, else
    the UI's session cookie); 401 / 403 otherwise."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    return await get_user(request, None, await bearer_scheme(request))


User = Annotated[Any, Depends(current_user)]
Known = Annotated[
    int | None, Query(description="the `version` of the answer the page shows: 204 if unchanged")
]


def parse_map_index(value: str | None) -> int:
    """Airflow's UI leaves ``{MAP_INDEX}`` unreplaced for a task that is not mapped: that is -1."""
    try:
        return int(value) if value is not None else -1
    except ValueError:
        return -1


def task_ref(dag_id: str, run_id: str, task_id: str, map_index: str = "-1") -> TaskRef:
    """The task instance a request names in its query (``dag_id``, ``run_id``, ``task_id``, ``map_index``)."""
    return TaskRef(dag_id, run_id, task_id, parse_map_index(map_index))


TaskInstance = Annotated[TaskRef, Depends(task_ref)]


def read_task_xcoms(ref: TaskRef) -> dict[str, Any]:
    """The task instance's ``rayjob``, ``timeline`` and ``rayservice`` XComs and its Ray dashboard link
    (blocking)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from kueue_ray.results import RAYJOB_XCOM_KEY, RAYSERVICE_XCOM_KEY, TIMELINE_XCOM_KEY

    keys = (RAYJOB_XCOM_KEY, TIMELINE_XCOM_KEY, DASHBOARD_LINK_XCOM, RAYSERVICE_XCOM_KEY)
    with create_session() as session:
        rows = session.execute(
            select(XComModel.key, XComModel.value).where(
                XComModel.dag_id == ref.dag_id,
                XComModel.run_id == ref.run_id,
                XComModel.task_id == ref.task_id,
                XComModel.map_index == ref.map_index,
                XComModel.key.in_(keys),
            )
        ).all()
        return {row.key: XComModel.deserialize_value(row) for row in rows}


def answer_version(cluster_cache: ClusterCache, version: int, cluster_queues: list[str]) -> dict[str, Any]:
    """The ``version`` an answer carries: none when a pending list in it is older than its queue (the page
    then asks again in full at its next poll, by when the list may be read again)."""
    behind = any(cluster_cache.pending_behind(name) for name in cluster_queues)
    return {"version": None if behind else version}


def create_app(cluster_cache: ClusterCache | None = None) -> FastAPI:
    """The app; ``cluster_cache`` for tests, else one is made from Airflow's config at startup."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.deployment = await asyncio.to_thread(this_deployment)
        made = app.state.cache = cluster_cache or ClusterCache(*settings_from_airflow())
        app.state.pods = PodReads(made)
        await made.start()
        try:
            yield
        finally:
            await made.stop()

    app = FastAPI(
        title="Kueue for Airflow",
        description="Kueue's queues and the RayJobs of Airflow task instances (see README.md).",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    readable = ReadableDags()
    router = APIRouter(dependencies=[Depends(current_user)])

    def links() -> Links:
        return Links(root=airflow_root(), deployment=getattr(app.state, "deployment", None))

    @router.get("/", include_in_schema=False)
    async def index() -> RedirectResponse:
        return RedirectResponse(f"{airflow_root()}{APP_PREFIX}/queues")

    @router.get("/queues", include_in_schema=False)
    async def queues_page() -> HTMLResponse:
        return _page("queues", "Kueue queues")

    @router.get("/task-instance", include_in_schema=False)
    async def task_page() -> HTMLResponse:
        return _page("task", "Kueue")

    @router.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> FileResponse:
        if name not in STATIC_FILES:
            raise HTTPException(404, f"no static file {name!r}")
        return FileResponse(STATIC / name, headers={"Cache-Control": "no-cache"})

    @router.get(
        "/api/v1/queues",
        summary="Every ClusterQueue: quota, cohort, pending and admitted workloads",
        responses=UNCHANGED,
    )
    async def queues(request: Request, user: User, known: Known = None) -> Any:
        cluster_cache: ClusterCache = request.app.state.cache
        if known is not None and known == cluster_cache.version:
            return Response(status_code=204)
        access = await run_in_threadpool(readable.for_user, user)
        snapshot = cluster_cache.snapshot()
        names = [cq["metadata"]["name"] for cq in snapshot.cluster_queues]
        reads = await asyncio.gather(*(cluster_cache.pending(name) for name in names))
        view = queues_view(snapshot, dict(zip(names, reads, strict=True)), access, links())
        return JSONResponse(view | answer_version(cluster_cache, view["version"], names))

    @router.get(
        "/api/v1/task-instance",
        summary="The RayJob (or a deploy task's RayService) of one task instance, live",
        responses=UNCHANGED | {403: {"description": "the user may not read the DAG"}},
    )
    async def task_instance(request: Request, user: User, ref: TaskInstance, known: Known = None) -> Any:
        cluster_cache: ClusterCache = request.app.state.cache
        access = await run_in_threadpool(readable.for_user, user)
        if not access.can_read(ref.dag_id):
            raise HTTPException(
                403, f"You may not read DAG {ref.dag_id!r}, so nothing of its RayJobs is shown."
            )
        if known is not None and known == cluster_cache.version:
            return Response(status_code=204)
        xcoms = await run_in_threadpool(read_task_xcoms, ref)
        snapshot = cluster_cache.snapshot()
        rayjob = xcoms.get("rayjob") or {}
        rayservice = xcoms.get("rayservice") or {}
        live = cluster_cache.timeline(rayjob.get("uid") or "")
        pending = None
        if rayjob.get("name") or not rayservice.get("name"):
            cluster_queue = task_cluster_queue(snapshot, rayjob)
        else:
            cluster_queue = service_cluster_queue(snapshot, rayservice)
        if cluster_queue:
            pending = await cluster_cache.pending(cluster_queue)
        starting = starting_cluster(snapshot, rayjob) if rayjob.get("name") else None
        pods = await request.app.state.pods.pods(rayjob.get("namespace"), starting) if starting else None
        view = task_view(
            ref,
            rayjob_xcom=rayjob or None,
            timeline_xcom=xcoms.get("timeline"),
            dashboard_link=xcoms.get(DASHBOARD_LINK_XCOM) or None,
            snapshot=snapshot,
            live_timeline=live.to_dict() if live else None,
            pending=pending,
            access=access,
            links=links(),
            rayservice_xcom=rayservice or None,
            pods=pods,
        )
        editable = await run_in_threadpool(editable_dag, user, ref.dag_id)
        return JSONResponse(
            view
            | {"priority_change": offer(view, rayjob or None, editable)}
            | answer_version(cluster_cache, view["version"], [cluster_queue] if cluster_queue else [])
        )

    @router.post(
        "/api/v1/task-instance/priority",
        summary="Change the priority of a task instance's RayJob (Kueue moves it in its queue)",
        responses={
            403: {"description": "the user may not edit the DAG"},
            409: {"description": "not allowed"},
        },
    )
    async def task_instance_priority(request: Request, user: User, ref: TaskInstance, priority: str) -> Any:
        if not await run_in_threadpool(editable_dag, user, ref.dag_id):
            raise HTTPException(
                403, f"You may not edit DAG {ref.dag_id!r}, so you may not change its priorities."
            )
        rayjob = (await run_in_threadpool(read_task_xcoms, ref)).get("rayjob") or {}
        if not rayjob.get("name"):
            raise HTTPException(404, "This task instance has no RayJob.")
        snapshot = request.app.state.cache.snapshot()
        access = Access(user_name=user.get_name(), dag_ids=frozenset({ref.dag_id}))
        current = task_view(ref, rayjob_xcom=rayjob, snapshot=snapshot, access=access)
        if offer(current, rayjob, True) is None:
            raise HTTPException(
                409, "Not changed: the RayJob has finished, is gone, or has a fixed priority."
            )
        status, message = await change_priority(
            request.app.state.cache,
            rayjob,
            current["rayjob"]["priority"]["class"],
            priority,
            user.get_name(),
            dispatched_to(snapshot.workloads, rayjob),
        )
        if status != 200:
            raise HTTPException(status, message)
        return {"message": message}

    @router.get("/api/v1/openapi.json", include_in_schema=False)
    async def openapi() -> dict[str, Any]:
        return app.openapi()

    app.include_router(router)
    return app


@cache
def app() -> FastAPI:
    """The one app of this process (Airflow mounts it; building it imports FastAPI, so only on demand)."""
    return create_app()
