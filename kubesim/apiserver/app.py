"""The aiohttp application: routes, the filter chain (authentication, faults, the request log) and the
fixed endpoints (/version, probes, OpenAPI, and kubesim's own /kubesim/stats, /faults, /auth, /requests).

Every API request passes the middleware here before ``rest.dispatch`` maps it onto the store; the
decisions about faults and refusals live in ``faults``.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import Callable

import msgspec
from aiohttp import web

from kubesim.apiserver import discovery, watch_stream
from kubesim.apiserver.faults import (
    Auth,
    Faults,
    FaultSettingsError,
    Refusal,
    RequestRecord,
    Stats,
    refusal,
    unauthorized,
)
from kubesim.apiserver.http import AUTH, CLUSTER, FAULTS, SNAPSHOTS, STATS, STREAMS, json_response, not_found
from kubesim.apiserver.paging import Snapshots
from kubesim.apiserver.paths import parse_target, rbac_verb
from kubesim.apiserver.rest import dispatch
from kubesim.errors import status_body

log = logging.getLogger(__name__)


def make_app(cluster, *, bookmark_interval: float = 5.0, token: str | None = None) -> web.Application:
    """The aiohttp application for ``cluster``; ``bookmark_interval`` is real seconds between BOOKMARKs;
    ``token``, when set, is the bearer token every API request must carry (``faults.Auth``)."""
    app = web.Application(middlewares=[_faults_and_accounting], client_max_size=64 * 1024 * 1024)
    app[CLUSTER] = cluster
    app[AUTH] = Auth(token)
    # What another cluster of this process (a MultiKueue manager) is answered for a kubeconfig's token.
    cluster.authenticates = lambda bearer: app[AUTH].allows("/apis", f"Bearer {bearer}" if bearer else None)
    app[FAULTS] = Faults()
    app[STATS] = Stats()
    app[SNAPSHOTS] = Snapshots()
    app[STREAMS] = watch_stream.StreamHub(bookmark_interval=bookmark_interval)
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
    app.router.add_post("/kubesim/users", _post_users)
    app.router.add_get("/kubesim/requests", _get_requests)
    app.router.add_delete("/kubesim/requests", _delete_requests)
    app.router.add_route("*", "/{tail:.*}", dispatch)
    app.on_response_prepare.append(_date_header)
    return app


async def _date_header(request: web.Request, response: web.StreamResponse) -> None:
    """``Date`` on the cluster's clock (``Clock.offset_s``), as a control plane whose clock is off sends it."""
    response.headers["Date"] = email.utils.format_datetime(request.app[CLUSTER].clock.now(), usegmt=True)


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
    elif faults.unserved_path(request.path):
        # The API server's not-found handler: plain text, no Status (no operator serves the group).
        response = web.Response(status=404, text="404 page not found\n", content_type="text/plain")
    elif (rule := faults.take_rule(record)) is not None and rule.code is None:
        await asyncio.sleep(rule.delay_s)  # a slow answer, then served as usual
        response = await _serve(request, handler)
    elif rule is not None:
        await asyncio.sleep(rule.delay_s)
        if rule.served and record.verb != "watch":
            await _serve(request, handler)  # the server acts; only its answer is lost
        answer = refusal(
            rule,
            record,
            resource_version=request.query.get("resourceVersion", ""),
            current_version=request.app[CLUSTER].store.resource_version(),
        )
        response = (
            await watch_stream.send_watch_error(request, answer.body)
            if answer.as_watch_error
            else _refused(answer)
        )
    elif faults.should_fail():
        response = json_response(
            status_body(500, "InternalError", "Internal error occurred: kubesim injected fault"), 500
        )
    else:
        response = await _serve(request, handler)
    request.app[STATS].record(_record(request, response.status, arrived, _created_name(response)))
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


def _created_name(response: web.StreamResponse) -> str:
    """The name of the object a create made (answered 201), as an audit log's objectRef names it: the path of
    a create names no object, and with generateName only the answer knows it."""
    if response.status != 201 or not isinstance(response, web.Response) or not response.body:
        return ""
    try:
        return str(msgspec.json.decode(response.body)["metadata"]["name"])
    except (msgspec.DecodeError, KeyError, TypeError):
        return ""


def _record(request: web.Request, code: int, arrived: float, created: str = "") -> RequestRecord:
    target = parse_target(request.path)
    user = request.app[AUTH].user_of(request.headers.get("Authorization"))
    if target is None or not target.plural:
        return RequestRecord(request.method.lower(), "", "", "", "", "", code, request.path, arrived, user)
    return RequestRecord(
        verb=rbac_verb(request.method, target, request.query),
        group=target.group,
        resource=target.plural,
        subresource=target.subresource,
        namespace=target.namespace,
        name=target.name or created,
        code=code,
        path=request.path,
        at=arrived,
        user=user,
    )


# ----- fixed endpoints -----


async def _version(_request: web.Request) -> web.Response:
    return json_response(discovery.version_info())


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _openapi_v3(request: web.Request) -> web.Response:
    return json_response(discovery.openapi_v3_root(request.app[CLUSTER].registry.all()))


async def _openapi_v3_group_version(request: web.Request) -> web.Response:
    parts = request.match_info["gv"].split("/")
    if parts[0] == "api" and len(parts) == 2:
        group_name, version = "", parts[1]
    elif parts[0] == "apis" and len(parts) == 3:
        group_name, version = parts[1], parts[2]
    else:
        return not_found()
    document = discovery.openapi_v3_group_version(group_name, version, request.app[CLUSTER].registry.all())
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
            request.app[CLUSTER].clock.offset_s = request.app[FAULTS].clock_offset_s
            request.app[CLUSTER].store.images.unpullable = request.app[FAULTS].unpullable_images
        if drop:  # once, now: every open watch ends, as when the API server restarts
            request.app[STREAMS].end_watches()
    except (ValueError, TypeError) as exc:
        return json_response(status_body(400, "BadRequest", str(exc)), 400)
    return json_response(request.app[FAULTS].as_dict())


async def _delete_faults(request: web.Request) -> web.Response:
    request.app[FAULTS].reset()
    request.app[CLUSTER].clock.offset_s = 0.0
    request.app[CLUSTER].store.images.unpullable = frozenset()
    return json_response(request.app[FAULTS].as_dict())


async def _get_auth(request: web.Request) -> web.Response:
    auth = request.app[AUTH]
    return json_response(
        {"token_required": auth.token is not None, "accounts": sorted(auth.accounts.values())}
    )


async def _post_auth(request: web.Request) -> web.Response:
    """``{"token": "..."}`` requires (or rotates) the bearer token; ``{"token": null}`` accepts anyone.
    ``{"accounts": {"<token>": "<user>"}}`` sets the further identities (``faults.Auth.accounts``)."""
    try:
        body = await request.json() if request.can_read_body else {}
    except ValueError as exc:
        return json_response(status_body(400, "BadRequest", str(exc)), 400)
    token = body.get("token") if isinstance(body, dict) else None
    accounts = body.get("accounts", {}) if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or not body
        or not set(body) <= {"token", "accounts"}
        or not (token is None or (isinstance(token, str) and token))
        or not isinstance(accounts, dict)
        or not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in accounts.items())
    ):
        return json_response(
            status_body(
                400,
                "BadRequest",
                'the body must be {"token": "<token>" or null} and/or {"accounts": {"<token>": "<user>"}}',
            ),
            400,
        )
    auth = request.app[AUTH]
    if "token" in body:
        auth.token = token
    if "accounts" in body:
        auth.accounts = dict(accounts)
    return json_response(
        {"token_required": auth.token is not None, "accounts": sorted(auth.accounts.values())}
    )


async def _post_users(request: web.Request) -> web.Response:
    """``{"<token>": "<user>", ...}`` adds identities (``faults.Auth.accounts``); answers every user's name."""
    try:
        body = await request.json() if request.can_read_body else None
    except ValueError as exc:
        return json_response(status_body(400, "BadRequest", str(exc)), 400)
    if not isinstance(body, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in body.items()
    ):
        return json_response(
            status_body(400, "BadRequest", 'the body must be {"<token>": "<user>", ...}'), 400
        )
    request.app[AUTH].accounts.update(body)
    return json_response(sorted(set(request.app[AUTH].accounts.values())))


async def _get_requests(request: web.Request) -> web.Response:
    return json_response([record.as_dict() for record in request.app[STATS].log])


async def _delete_requests(request: web.Request) -> web.Response:
    request.app[STATS].clear_log()
    return json_response([])
