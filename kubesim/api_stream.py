"""Long-lived responses: watch streams and followed pod logs.

A watch is a chunked response of newline-delimited `{"type", "object"}` events that stays open until the
client leaves, `timeoutSeconds` passes, or a fault drops it. It never blocks longer than a second without
checking whether the client is still there, so abandoned watches do not pile up in the store.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
from aiohttp import web

from kubesim.api_paths import Target, is_true
from kubesim.api_table import build_table, wants_table
from kubesim.faults import Faults, Stats
from kubesim.resources import ResourceType
from kubesim.store import ApiError

_POLL_S = 1.0
"""Longest wait between checks that the client is still connected."""


def _event_line(event_type: str, obj: dict) -> bytes:
    return msgspec.json.encode({"type": event_type, "object": obj}) + b"\n"


def _expired(message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Expired",
        "code": 410,
    }


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    return response


async def serve_watch(
    request: web.Request,
    cluster,
    rt: ResourceType,
    target: Target,
    query,
    *,
    faults: Faults,
    stats: Stats,
    bookmark_interval: float,
) -> web.StreamResponse:
    resource_version = query.get("resourceVersion") or None
    field_selector = query.get("fieldSelector") or None
    if target.name:  # legacy /watch/.../<name>: a watch on one object
        by_name = f"metadata.name={target.name}"
        field_selector = f"{field_selector},{by_name}" if field_selector else by_name
    as_table = wants_table(request.headers.get("Accept", ""))
    if resource_version not in (None, "0") and faults.take_watch_expiry():
        return await _send_expired(request, f"too old resource version: {resource_version} (kubesim fault)")
    try:
        watcher = cluster.store.watch(
            rt.key,
            namespace=target.namespace or None,
            label_selector=query.get("labelSelector") or None,
            field_selector=field_selector,
            resource_version=resource_version,
            copy_objects=False,  # events are only serialised onto the stream
        )
    except ApiError as error:
        if error.code == 410:
            return await _send_expired(request, error.message)
        raise
    stats.watch_opened()
    try:
        response = await _open_stream(request)
        await _pump(
            request,
            response,
            watcher,
            cluster,
            rt,
            timeout=_float(query.get("timeoutSeconds")),
            drop_after=faults.watch_drop_after_s,
            bookmark_interval=bookmark_interval if is_true(query.get("allowWatchBookmarks")) else None,
            as_table=as_table,
            include_object=query.get("includeObject", "Metadata"),
        )
    finally:
        watcher.close()
        stats.watch_closed()
    return response


async def _send_expired(request: web.Request, message: str) -> web.StreamResponse:
    """As the API server does for a too-old resourceVersion: 200, one ERROR event with a 410 Status."""
    response = await _open_stream(request)
    await response.write(_event_line("ERROR", _expired(message)))
    return response


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


async def _pump(
    request: web.Request,
    response: web.StreamResponse,
    watcher,
    cluster,
    rt: ResourceType,
    *,
    timeout: float | None,
    drop_after: float | None,
    bookmark_interval: float | None,
    as_table: bool,
    include_object: str,
) -> None:
    start = time.monotonic()
    limits = [value for value in (timeout, drop_after) if value is not None]
    deadline = start + min(limits) if limits else None
    next_bookmark = start + bookmark_interval if bookmark_interval else None
    while True:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return
        wake = min(t for t in (deadline, next_bookmark, now + _POLL_S) if t is not None)
        event = await watcher.next(timeout=max(0.0, wake - now))
        if _client_gone(request):
            return
        try:
            if event is not None:
                obj = event.object
                if as_table and event.type != "ERROR":
                    obj = build_table(
                        rt.key,
                        rt.printer_columns,
                        [obj],
                        resource_version=obj.get("metadata", {}).get("resourceVersion", ""),
                        include_object=include_object,
                    )
                await response.write(_event_line(event.type, obj))
                if event.type == "ERROR":
                    return
            elif next_bookmark is not None and time.monotonic() >= next_bookmark:
                bookmark = {
                    "kind": rt.kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": cluster.store.resource_version()},
                }
                await response.write(_event_line("BOOKMARK", bookmark))
                next_bookmark = time.monotonic() + bookmark_interval
        except (ConnectionResetError, ConnectionError):
            return


def _log_container(pod: dict, requested: str | None) -> str | None:
    """The container whose log is asked for, resolved from the pod spec as the kubelet does."""
    names = [c.get("name") for c in pod.get("spec", {}).get("containers", []) or []]
    names += [c.get("name") for c in pod.get("spec", {}).get("initContainers", []) or []]
    pod_name = pod["metadata"]["name"]
    if requested:
        if names and requested not in names:
            raise ApiError(400, "BadRequest", f"container {requested} is not valid for pod {pod_name}")
        return requested
    default = pod["metadata"].get("annotations", {}).get("kubectl.kubernetes.io/default-container")
    if default:
        return default
    main = [c.get("name") for c in pod.get("spec", {}).get("containers", []) or []]
    if len(main) == 1:
        return main[0]
    if len(main) > 1:
        raise ApiError(
            400,
            "BadRequest",
            f"a container name must be specified for pod {pod_name}, choose one of: [{' '.join(main)}]",
        )
    return None


def _int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, "BadRequest", f"{name} must be an integer, got {value!r}") from None


async def serve_log(request: web.Request, cluster, pod: dict, query) -> web.StreamResponse:
    """GET pods/<name>/log: the buffered text, or with follow=true a chunked stream until the
    container ends (``PodLogs.close``) or the client leaves."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    container = _log_container(pod, query.get("container") or None)
    tail_lines = _int(query.get("tailLines"), "tailLines")
    since_seconds = _int(query.get("sinceSeconds"), "sinceSeconds")
    timestamps = is_true(query.get("timestamps"))
    if not is_true(query.get("follow")):
        text = cluster.logs.read(
            namespace,
            name,
            container,
            tail_lines=tail_lines,
            since_seconds=since_seconds,
            timestamps=timestamps,
        )
        limit = _int(query.get("limitBytes"), "limitBytes")
        body = text.encode()
        return web.Response(body=body[:limit] if limit is not None else body, content_type="text/plain")
    lines = cluster.logs.follow(namespace, name, container, tail_lines=tail_lines, timestamps=timestamps)
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    pending: asyncio.Future | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(lines))
            done, _ = await asyncio.wait({pending}, timeout=_POLL_S)
            if _client_gone(request):
                return response
            if not done:
                continue
            try:
                line = pending.result()
            except StopAsyncIteration:
                return response
            pending = None
            await response.write(line.encode())
    except (ConnectionResetError, ConnectionError):
        return response
    finally:
        if pending is not None:
            pending.cancel()
        await lines.aclose()
