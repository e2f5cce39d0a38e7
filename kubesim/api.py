"""The Kubernetes REST API over aiohttp, backed by the cluster's store.

Everything a client sees goes through here: discovery, CRUD with the status subresource, watch streams,
pod logs, Table output for kubectl, Status error bodies, bearer-token authentication, and the /kubesim
endpoints for faults, authentication and stats. Decisions (path parsing, verbs, tables, discovery
documents, faults and refusals) live in the api_* and faults modules;
this module only maps HTTP onto the store.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Callable

import msgspec
from aiohttp import web

from kubesim import api_discovery, api_stream
from kubesim.api_discovery import AggregatedApi
from kubesim.api_paths import Target, parse_target, rbac_verb
from kubesim.api_table import build_table, wants_table
from kubesim.errors import ApiError
from kubesim.faults import (
    Auth,
    Faults,
    FaultSettingsError,
    Refusal,
    RequestRecord,
    Stats,
    refusal,
    status_body,
    unauthorized,
)
from kubesim.resources import ResourceType

log = logging.getLogger(__name__)

CLUSTER = web.AppKey("cluster", object)
AUTH = web.AppKey("auth", Auth)
FAULTS = web.AppKey("faults", Faults)
STATS = web.AppKey("stats", Stats)
STREAMS = web.AppKey("streams", api_stream.StreamHub)

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
JSON = "application/json"
_BUILTIN_GROUPS = {"", "batch", "apps", "policy", "autoscaling"}
CUSTOM_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")
"""What the API server accepts for a custom resource: CRDs have no strategic-merge-patch schema."""


def json_response(body: dict | list, status: int = 200) -> web.Response:
    return web.Response(body=msgspec.json.encode(body), status=status, content_type=JSON)


def error_response(error: ApiError) -> web.Response:
    return json_response(error.status(), status=error.code)


def not_found() -> web.Response:
    return json_response(
        status_body(404, "NotFound", "the server could not find the requested resource"), 404
    )


def make_app(cluster, *, bookmark_interval: float = 5.0, token: str | None = None) -> web.Application:
    """The aiohttp application for ``cluster``; ``bookmark_interval`` is real seconds between BOOKMARKs;
    ``token``, when set, is the bearer token every API request must carry (``faults.Auth``)."""
    app = web.Application(middlewares=[_faults_and_accounting], client_max_size=64 * 1024 * 1024)
    app[CLUSTER] = cluster
    app[AUTH] = Auth(token)
    app[FAULTS] = Faults()
    app[STATS] = Stats()
    app[STREAMS] = api_stream.StreamHub(bookmark_interval=bookmark_interval)
    for path in ("/version", "/version/"):  # the Python client asks for /version/
        app.router.add_get(path, _version)
    for probe in ("/healthz", "/readyz", "/livez"):
        app.router.add_get(probe, _ok)
    app.router.add_get("/openapi/v3", _openapi_v3)
    app.router.add_get("/openapi/v3/{gv:.+}", _openapi_v3_group_version)
    app.router.add_get("/kubesim/stats", _get_stats)
    app.router.add_delete("/kubesim/stats/fanout", _delete_fanout_stats)
    app.router.add_get("/kubesim/faults", _get_faults)
    app.router.add_post("/kubesim/faults", _post_faults)
    app.router.add_delete("/kubesim/faults", _delete_faults)
    app.router.add_get("/kubesim/auth", _get_auth)
    app.router.add_post("/kubesim/auth", _post_auth)
    app.router.add_get("/kubesim/requests", _get_requests)
    app.router.add_delete("/kubesim/requests", _delete_requests)
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app


# ----- middleware: faults first, then the handler, then the request log -----


@web.middleware
async def _faults_and_accounting(request: web.Request, handler: Callable) -> web.StreamResponse:
    """As a real API server's filter chain: authentication, then the injected refusals (RBAC, API Priority
    and Fairness, a control plane in trouble), then the handler; every API request is logged."""
    if request.path.startswith("/kubesim/"):
        return await handler(request)
    faults = request.app[FAULTS]
    arrived = time.time()
    record = _record(request, 0, arrived)
    if faults.latency_ms:
        await asyncio.sleep(faults.latency_ms / 1000)
    if not request.app[AUTH].allows(request.path, request.headers.get("Authorization")):
        response: web.StreamResponse = _refused(unauthorized())
    elif (rule := faults.take_rule(record)) is not None:
        if rule.served and record.verb != "watch":
            await _serve(request, handler)  # the server acts; only its answer is lost
        answer = refusal(
            rule,
            record,
            resource_version=request.query.get("resourceVersion", ""),
            current_version=request.app[CLUSTER].store.resource_version(),
        )
        response = (
            await api_stream.send_watch_error(request, answer.body)
            if answer.as_watch_error
            else _refused(answer)
        )
    elif faults.should_fail():
        response = json_response(
            status_body(500, "InternalError", "Internal error occurred: kubesim injected fault"), 500
        )
    else:
        response = await _serve(request, handler)
    request.app[STATS].record(_record(request, response.status, arrived))
    return response


async def _serve(request: web.Request, handler: Callable) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:  # raised by aiohttp itself, e.g. 413 for an oversized body
        return json_response(status_body(exc.status, exc.reason, exc.text or exc.reason), exc.status)
    except Exception:
        log.exception("unhandled error serving %s %s", request.method, request.path)
        return json_response(status_body(500, "InternalError", "Internal error occurred"), 500)


def _refused(answer: Refusal) -> web.Response:
    response = json_response(answer.body, answer.code)
    response.headers.update(answer.headers)
    return response


def _record(request: web.Request, code: int, arrived: float) -> RequestRecord:
    target = parse_target(request.path)
    if target is None or not target.plural:
        return RequestRecord(request.method.lower(), "", "", "", "", "", code, request.path, arrived)
    return RequestRecord(
        verb=rbac_verb(request.method, target, request.query),
        group=target.group,
        resource=target.plural,
        subresource=target.subresource,
        namespace=target.namespace,
        name=target.name,
        code=code,
        path=request.path,
        at=arrived,
    )


# ----- fixed endpoints -----


async def _version(_request: web.Request) -> web.Response:
    return json_response(api_discovery.version_info())


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _openapi_v3(request: web.Request) -> web.Response:
    return json_response(api_discovery.openapi_v3_root(request.app[CLUSTER].registry.all()))


async def _openapi_v3_group_version(request: web.Request) -> web.Response:
    parts = request.match_info["gv"].split("/")
    if parts[0] == "api" and len(parts) == 2:
        group_name, version = "", parts[1]
    elif parts[0] == "apis" and len(parts) == 3:
        group_name, version = parts[1], parts[2]
    else:
        return not_found()
    document = api_discovery.openapi_v3_group_version(
        group_name, version, request.app[CLUSTER].registry.all()
    )
    return json_response(document) if document else not_found()


async def _get_stats(request: web.Request) -> web.Response:
    stats = request.app[STATS].as_dict(request.app[CLUSTER].object_counts())
    stats["fanout"] = request.app[STREAMS].fanout.summary()
    return json_response(stats)


async def _delete_fanout_stats(request: web.Request) -> web.Response:
    """Start a fresh fan-out window (a benchmark resets it before its timed writes)."""
    hub = request.app[STREAMS]
    hub.fanout.reset()
    return json_response(hub.fanout.summary())


async def _get_faults(request: web.Request) -> web.Response:
    return json_response(request.app[FAULTS].as_dict())


async def _post_faults(request: web.Request) -> web.Response:
    try:
        settings = await request.json() if request.can_read_body else {}
        if not isinstance(settings, dict):
            raise FaultSettingsError("the body must be a JSON object")
        drop = settings.pop("drop_watches", False)
        if not isinstance(drop, bool):
            raise FaultSettingsError("drop_watches must be true or false")
        if settings or not drop:
            request.app[FAULTS].update(settings)
        if drop:  # once, now: every open watch ends, as when the API server restarts
            request.app[STREAMS].end_watches()
    except (ValueError, TypeError) as exc:
        return json_response(status_body(400, "BadRequest", str(exc)), 400)
    return json_response(request.app[FAULTS].as_dict())


async def _delete_faults(request: web.Request) -> web.Response:
    request.app[FAULTS].reset()
    return json_response(request.app[FAULTS].as_dict())


async def _get_auth(request: web.Request) -> web.Response:
    return json_response({"token_required": request.app[AUTH].token is not None})


async def _post_auth(request: web.Request) -> web.Response:
    """``{"token": "..."}`` requires (or rotates) the bearer token; ``{"token": null}`` accepts anyone."""
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError as exc:
        return json_response(status_body(400, "BadRequest", str(exc)), 400)
    token = body.get("token") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or set(body) != {"token"}
        or not (token is None or (isinstance(token, str) and token))
    ):
        return json_response(
            status_body(400, "BadRequest", 'the body must be {"token": "<token>" or null}'), 400
        )
    request.app[AUTH].token = token
    return json_response({"token_required": token is not None})


async def _get_requests(request: web.Request) -> web.Response:
    return json_response([record.as_dict() for record in request.app[STATS].log])


async def _delete_requests(request: web.Request) -> web.Response:
    request.app[STATS].clear_log()
    return json_response([])


# ----- the Kubernetes API -----


async def _dispatch(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    path = request.path.rstrip("/") or "/"
    if request.method not in ("GET", "HEAD") and not path.startswith(("/api/", "/apis/")):
        return not_found()
    types = cluster.registry.all()
    aggregated = list(cluster.aggregated_apis.values())
    if path == "/api":
        return json_response(api_discovery.core_versions())
    if path == "/apis":
        return json_response(api_discovery.group_list(types, aggregated))
    segments = path.strip("/").split("/")
    if len(segments) == 2 and segments[0] == "apis":
        document = api_discovery.group(segments[1], types, aggregated)
        return json_response(document) if document else not_found()
    target = parse_target(path)
    if target is None:
        return not_found()
    api = cluster.aggregated_apis.get((target.group, target.version))
    if api is not None and target.plural:
        return await _serve_aggregated(request, api, target)
    if not target.plural:
        document = api_discovery.resource_list(target.group, target.version, types, aggregated)
        return json_response(document) if document else not_found()
    rt = cluster.registry.get(target.key)
    if rt is None or rt.version != target.version:
        return not_found()
    try:
        return await _serve_resource(request, cluster, rt, target)
    except ApiError as error:
        return error_response(error)


async def _serve_aggregated(request: web.Request, api: AggregatedApi, target: Target) -> web.Response:
    if request.method != "GET":
        return json_response(
            status_body(405, "MethodNotAllowed", "the server does not allow this method"), 405
        )
    try:
        result = api.handler(target.rest, dict(request.query))
        if asyncio.iscoroutine(result):
            result = await result
    except ApiError as error:
        return error_response(error)
    return json_response(result)


def _check_scope(rt: ResourceType, target: Target, method: str) -> None:
    if target.namespace and not rt.namespaced:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if rt.namespaced and not target.namespace and (target.name or method == "POST"):
        if method == "POST":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if target.subresource and target.subresource not in rt.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if target.subresource and not target.name:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if method in ("PUT", "PATCH") and not target.name:
        raise ApiError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )


async def _serve_resource(
    request: web.Request, cluster, rt: ResourceType, target: Target
) -> web.StreamResponse:
    _check_scope(rt, target, request.method)
    query = request.query
    namespace = target.namespace or None
    store = cluster.store
    method = request.method
    if target.subresource == "log":
        if method != "GET":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        pod = store.get(rt.key, target.name, namespace=namespace)
        return await api_stream.serve_log(request, cluster, pod, query, hub=request.app[STREAMS])
    if method in ("GET", "HEAD"):
        if rbac_verb(method, target, query) == "watch":
            return await api_stream.serve_watch(
                request,
                cluster,
                rt,
                target,
                query,
                faults=request.app[FAULTS],
                stats=request.app[STATS],
                hub=request.app[STREAMS],
            )
        if target.name:
            obj = store.get(rt.key, target.name, namespace=namespace)
            if wants_table(request.headers.get("Accept", "")):
                return json_response(_table(rt, [obj], store.resource_version(), query))
            return json_response(obj)
        return _list(request, store, rt, namespace, query)
    dry_run = query.get("dryRun") == "All"
    if dry_run and method in ("PUT", "PATCH"):
        raise ApiError(400, "BadRequest", "kubesim supports dryRun=All on create and delete only")
    if method == "POST":
        if target.name:
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        body = await _body(request, rt, target)
        return json_response(store.create(rt.key, body, namespace=namespace, dry_run=dry_run), 201)
    if method == "PUT":
        body = await _body(request, rt, target)
        subresource = target.subresource or None
        return json_response(store.update(rt.key, body, subresource=subresource))
    if method == "PATCH":
        return json_response(await _patch(request, store, rt, target))
    if method == "DELETE":
        if not target.name:
            return await _delete_collection(request, store, rt, namespace, query)
        options = await _delete_options(request)
        policy = options.get("propagationPolicy") or query.get("propagationPolicy")
        deleted = store.delete(
            rt.key,
            target.name,
            namespace=namespace,
            propagation_policy=policy,
            preconditions=_preconditions(options),
            dry_run=dry_run,
        )
        return json_response(deleted) if dry_run else _deleted(rt, deleted)
    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


async def _body(request: web.Request, rt: ResourceType, target: Target) -> dict:
    """The request object, checked against the URL the way the API server does before storing."""
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
    body.setdefault("apiVersion", rt.api_version)
    body.setdefault("kind", rt.kind)
    if body["apiVersion"] != rt.api_version:
        raise ApiError(
            400,
            "BadRequest",
            f"the API version in the data ({body['apiVersion']}) does not match the expected API version "
            f"({rt.api_version})",
        )
    if body["kind"] != rt.kind:
        raise ApiError(
            400,
            "BadRequest",
            f"the kind in the data ({body['kind']}) does not match the expected kind ({rt.kind})",
        )
    metadata = body.setdefault("metadata", {})
    if target.namespace:
        if metadata.get("namespace", target.namespace) != target.namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        metadata["namespace"] = target.namespace
    if target.name:
        if metadata.get("name", target.name) != target.name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({metadata['name']}) does not match the name on the URL ({target.name})",
            )
        metadata["name"] = target.name
    return body


async def _patch(request: web.Request, store, rt: ResourceType, target: Target) -> dict:
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
    accepted = CUSTOM_PATCH_TYPES if _is_custom(rt) else tuple(PATCH_TYPES)
    patch_type = PATCH_TYPES.get(content_type) if content_type in accepted else None
    if patch_type is None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(accepted)}",
        )
    try:
        patch = json.loads(await request.read())
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {exc}") from None
    return store.patch(
        rt.key,
        target.name,
        patch,
        patch_type=patch_type,
        namespace=target.namespace or None,
        subresource=target.subresource or None,
    )


async def _delete_options(request: web.Request) -> dict:
    raw = await request.read() if request.can_read_body else b""
    if not raw.strip():
        return {}
    try:
        options = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {exc}") from None
    return options if isinstance(options, dict) else {}


def _preconditions(options: dict) -> dict | None:
    """DeleteOptions.preconditions: ``uid`` and ``resourceVersion``, each a string when given."""
    preconditions = options.get("preconditions")
    if preconditions is None:
        return None
    if not isinstance(preconditions, dict) or not all(
        isinstance(preconditions.get(key), str | None) for key in ("uid", "resourceVersion")
    ):
        raise ApiError(
            400, "BadRequest", "preconditions must be an object with string uid and resourceVersion"
        )
    return preconditions


def _is_custom(rt: ResourceType) -> bool:
    builtin = rt.group in _BUILTIN_GROUPS or (
        rt.group.endswith(".k8s.io") and not rt.group.endswith("x-k8s.io")
    )
    return not builtin


def _deleted(rt: ResourceType, obj: dict) -> web.Response:
    """Upstream answers with the object when it lingers (finalizers) or for pods, namespaces and custom
    resources; other kinds get a Status Success naming what was deleted."""
    lingering = bool(obj.get("metadata", {}).get("deletionTimestamp"))
    if lingering or _is_custom(rt) or rt.key in ("pods", "namespaces"):
        return json_response(obj)
    metadata = obj.get("metadata", {})
    return json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": metadata.get("name"),
                "group": rt.group,
                "kind": rt.plural,
                "uid": metadata.get("uid"),
            },
        }
    )


async def _delete_collection(
    request: web.Request, store, rt: ResourceType, namespace: str | None, query
) -> web.Response:
    options = await _delete_options(request)
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    items, resource_version = store.list(
        rt.key,
        namespace=namespace,
        label_selector=query.get("labelSelector") or None,
        field_selector=query.get("fieldSelector") or None,
    )
    if query.get("dryRun") != "All":
        for item in items:
            metadata = item["metadata"]
            try:
                store.delete(
                    rt.key, metadata["name"], namespace=metadata.get("namespace"), propagation_policy=policy
                )
            except ApiError as error:
                if error.code != 404:
                    raise
    return json_response(_list_body(rt, items, resource_version))


def _list_body(
    rt: ResourceType, items: list[dict], resource_version: str, cont: str = "", remaining=None
) -> dict:
    metadata: dict = {"resourceVersion": resource_version}
    if cont:
        metadata["continue"] = cont
        if remaining is not None:
            metadata["remainingItemCount"] = remaining
    return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata, "items": items}


def _list(request: web.Request, store, rt: ResourceType, namespace: str | None, query) -> web.Response:
    items, resource_version = store.list(
        rt.key,
        namespace=namespace,
        label_selector=query.get("labelSelector") or None,
        field_selector=query.get("fieldSelector") or None,
    )
    items, cont, remaining = paginate(items, query.get("limit"), query.get("continue"))
    if wants_table(request.headers.get("Accept", "")):
        table = _table(rt, items, resource_version, query)
        if cont:
            table["metadata"]["continue"] = cont
        return json_response(table)
    return json_response(_list_body(rt, items, resource_version, cont, remaining))


def paginate(items: list[dict], limit: str | None, token: str | None) -> tuple[list[dict], str, int | None]:
    """limit/continue over the current state. The token names the last item returned, so a page
    boundary survives creations and deletions (upstream also pins the resourceVersion; we do not)."""
    if not token and not limit:
        return items, "", None
    items = sorted(items, key=_sort_key)
    if token:
        try:
            after = tuple(json.loads(base64.urlsafe_b64decode(token.encode())))
        except (ValueError, TypeError):
            raise ApiError(400, "BadRequest", "continue key is not valid") from None
        items = [item for item in items if _sort_key(item) > after]
    if not limit or int(limit) <= 0 or len(items) <= int(limit):
        return items, "", None
    page = items[: int(limit)]
    last = list(_sort_key(page[-1]))
    return page, base64.urlsafe_b64encode(json.dumps(last).encode()).decode(), len(items) - len(page)


def _sort_key(item: dict) -> tuple[str, str]:
    metadata = item.get("metadata", {})
    return (metadata.get("namespace", ""), metadata.get("name", ""))


def _table(rt: ResourceType, objects: list[dict], resource_version: str, query) -> dict:
    return build_table(
        rt.key,
        rt.printer_columns,
        objects,
        resource_version=resource_version,
        include_object=query.get("includeObject", "Metadata"),
    )
