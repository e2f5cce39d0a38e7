"""Long-lived responses: watch streams and followed pod logs.

A watch is a chunked response of newline-delimited `{"type", "object"}` events that stays open until the
client leaves, `timeoutSeconds` passes, or a fault drops it.

It is built to fan one write out to a thousand open streams quickly, and to cost nothing while idle:

- the store pushes each matching event into the stream synchronously (``Store.subscribe``), and the event's
  JSON line is encoded once and shared by every stream that sees it the same way (``Delivery.line``);
- the streams write to their transports from one hub callback per burst of events (``StreamHub.flush_soon``),
  not from a coroutine per stream awaiting a queue nor a callback each: a write wakes no task and schedules
  one callback, however many watchers it reaches;
- an open stream owns no periodic timer: ``timeoutSeconds`` / fault drops are one ``call_later`` each, and
  one ``StreamHub`` per app runs the shared timers: a sweep that ends the streams whose client left, and
  the BOOKMARK ticker.

``FanoutTimes`` measures it from inside: for each write, store commit -> the last ``transport.write`` of its
bytes to a watch stream (``GET /kubesim/stats`` reports it as ``fanout``). Client-side figures add the
client's own reading and parsing, which on a shared machine competes with kubesim for the same cores.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque

import msgspec
from aiohttp import web

from kubesim.apiserver.faults import Faults, Stats
from kubesim.apiserver.paths import Target, is_true
from kubesim.apiserver.table import build_table, wants_table
from kubesim.errors import ApiError, status_body
from kubesim.resources import ResourceType
from kubesim.watch import Change, Delivery

SWEEP_S = 1.0
"""How often the hub looks for streams whose client has gone (aiohttp does not cancel their handler)."""

FANOUT_RING = 8192
"""How many recent writes ``FanoutTimes`` keeps: the window its percentiles describe."""


def _event_line(event_type: str, obj: dict) -> bytes:
    return msgspec.json.encode({"type": event_type, "object": obj}) + b"\n"


class FanoutTimes:
    """How long kubesim took to hand each recent write to the last watch stream that gets it.

    A write enters a bounded ring when its bytes first go to a stream's transport; each further stream
    moves its ``handed_at`` on, so once the fan-out is over, ``handed_at - committed_at`` is the write's
    fan-out time. The two numbers live on the write itself, so nothing is allocated per delivery and the
    percentiles are computed only when asked for. Only live events count: the initial ADDED list and the
    history replay of a new watch are not fan-out. A write whose fan-out straddles ``reset`` is dropped.
    """

    def __init__(self, size: int = FANOUT_RING) -> None:
        self._ring: deque[Change] = deque(maxlen=size)
        self._cpu_at_reset = time.process_time()

    def handed_over(self, changes: list[Change], at: float) -> None:
        """``changes`` were just written to one stream's transport (one entry per event, in order)."""
        ring = self._ring
        for change in changes:
            handed = change.handed
            if handed <= 0:
                if handed < 0:
                    continue  # in flight across a reset
                ring.append(change)
            change.handed = handed + 1
            change.handed_at = at

    def reset(self) -> None:
        for change in self._ring:
            change.handed = -1  # a fan-out still in flight stays out: it would be counted in part
        self._ring.clear()
        self._cpu_at_reset = time.process_time()

    def summary(self) -> dict:
        """``events`` in the window, their fan-out p50 / p99 / max in ms, the most streams one reached, and
        the CPU seconds the whole kubesim process used since the window began: with nothing else going on,
        what the fan-out cost, whoever else was using the machine's cores meanwhile."""
        changes = self._ring
        latencies = sorted(c.handed_at - c.committed_at for c in changes)
        return {
            "events": len(changes),
            "deliveries": sum(c.handed for c in changes),
            "p50_ms": _ms(_nearest_rank(latencies, 50)),
            "p99_ms": _ms(_nearest_rank(latencies, 99)),
            "max_ms": _ms(latencies[-1] if latencies else None),
            "max_deliveries": max((c.handed for c in changes), default=0),
            "process_cpu_s": round(time.process_time() - self._cpu_at_reset, 3),
        }


def _nearest_rank(ordered: list[float], q: float) -> float | None:
    """The nearest-rank percentile of an ascending list: a value that was actually observed."""
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1] if ordered else None


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000, 3) if seconds is not None else None


class _OpenResponse:
    """A long-lived response the hub keeps an eye on; ``done`` resolves when it should end."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()

    def client_gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def bookmark(self) -> None:
        """Only watch streams send bookmarks."""


class StreamHub:
    """The open long-lived responses of one app and the timers they share.

    Without it each stream would wake on its own to check for a departed client or to send a BOOKMARK:
    with 1,000 watches that is 1,000 wakeups a second competing with the writes they are there to carry.
    The timers run only while a stream is open.
    """

    def __init__(self, *, bookmark_interval: float, sweep_interval: float = SWEEP_S) -> None:
        self.bookmark_interval = bookmark_interval
        self.sweep_interval = sweep_interval
        self._open: set[_OpenResponse] = set()
        self._bookmarked: set[_OpenResponse] = set()
        self._sweep: asyncio.TimerHandle | None = None
        self._ticker: asyncio.TimerHandle | None = None
        self._to_flush: list[_WatchStream] = []
        self._flush_handle: asyncio.Handle | None = None
        self.fanout = FanoutTimes()

    def add(self, response: _OpenResponse, *, bookmarks: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self._open.add(response)
        if self._sweep is None:
            self._sweep = loop.call_later(self.sweep_interval, self._run_sweep)
        if bookmarks:
            self._bookmarked.add(response)
            if self._ticker is None:
                self._ticker = loop.call_later(self.bookmark_interval, self._run_ticker)

    def discard(self, response: _OpenResponse) -> None:
        self._open.discard(response)
        self._bookmarked.discard(response)
        if not self._open and self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if not self._bookmarked and self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None

    def end_watches(self) -> int:
        """End every open watch stream now, as an API server going down does; how many were open."""
        streams = [response for response in self._open if isinstance(response, _WatchStream)]
        for stream in streams:
            stream.finish()
        return len(streams)

    def flush_soon(self, stream: _WatchStream) -> None:
        """Have ``stream`` write what it queued in the hub's next flush, with every other stream a burst
        of events touched: one loop callback per burst, not one per stream (1,000 handles per write)."""
        self._to_flush.append(stream)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_handle = None
        streams, self._to_flush = self._to_flush, []
        for stream in streams:
            try:
                stream.flush()
            except Exception as exc:  # as the loop does for a callback of its own: report it, flush the rest
                asyncio.get_running_loop().call_exception_handler(
                    {"message": "watch stream flush failed", "exception": exc}
                )

    def _run_sweep(self) -> None:
        for response in [r for r in self._open if r.client_gone()]:
            response.finish()
        self._sweep = asyncio.get_running_loop().call_later(self.sweep_interval, self._run_sweep)

    def _run_ticker(self) -> None:
        for response in self._bookmarked:
            response.bookmark()
        self._ticker = asyncio.get_running_loop().call_later(self.bookmark_interval, self._run_ticker)


class _WatchStream(_OpenResponse):
    """One HTTP watch: the store's subscriber and the writer of its chunked body.

    Events queue as encoded lines until the transport is ready, then leave in one chunk per burst.
    """

    def __init__(
        self,
        request: web.Request,
        cluster,
        rt: ResourceType,
        *,
        as_table: bool,
        include_object: str,
        hub: StreamHub,
    ) -> None:
        super().__init__(request)
        self._cluster = cluster
        self._rt = rt
        self._as_table = as_table
        self._include_object = include_object
        self._hub = hub
        self.live = False  # set once the initial list / replay is queued: later events are fan-out
        self._transport: asyncio.Transport | None = None
        self._lines: list[bytes] = []
        self._live_changes: list = []  # the writes behind the live events in ``_lines``, for FanoutTimes
        self._flush_queued = False
        self._ending = False  # an ERROR event was queued: it is the last one

    def deliver(self, delivery: Delivery) -> None:
        """Called by the store inside each matching write: queue the line, never block."""
        if self._ending or self.done.done():
            return
        if self._as_table and delivery.type != "ERROR":
            obj = delivery.object
            table = build_table(
                self._rt.key,
                self._rt.printer_columns,
                [obj],
                resource_version=obj.get("metadata", {}).get("resourceVersion", ""),
                include_object=self._include_object,
            )
            self._lines.append(_event_line(delivery.type, table))
        else:
            self._lines.append(delivery.line())
        if self.live:
            self._live_changes.append(delivery.change)
        self._ending = delivery.type == "ERROR"
        self._schedule_flush()

    def bookmark(self) -> None:
        """A BOOKMARK at the store's current version: every earlier event is already queued before it."""
        if self._ending or self.done.done():
            return
        rt = self._rt
        obj = {
            "kind": rt.kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": self._cluster.store.resource_version()},
        }
        self._lines.append(_event_line("BOOKMARK", obj))
        self._schedule_flush()

    def start(self, transport: asyncio.Transport | None) -> None:
        """The headers are sent: events queued so far (the initial list or replay) may follow."""
        if transport is None or transport.is_closing():
            self.finish()
            return
        self._transport = transport
        self._schedule_flush()

    def finish(self) -> None:
        self._write_queued()  # what happened before the end still goes out
        super().finish()

    def _schedule_flush(self) -> None:
        if not self._flush_queued and self._transport is not None and self._lines:
            self._flush_queued = True
            self._hub.flush_soon(self)

    def flush(self) -> None:
        """The hub's flush: write the burst queued since the last one."""
        self._flush_queued = False
        if self.done.done():
            return
        self._write_queued()
        if self._ending:
            self.finish()

    def _write_queued(self) -> None:
        transport = self._transport
        if transport is None or not self._lines or self.done.done():
            return
        if transport.is_closing():
            self._lines.clear()
            self._live_changes.clear()
            super().finish()
            return
        data = self._lines[0] if len(self._lines) == 1 else b"".join(self._lines)
        self._lines.clear()
        transport.write(b"%x\r\n%b\r\n" % (len(data), data))  # one HTTP/1.1 chunk (headers already sent)
        if self._live_changes:
            self._hub.fanout.handed_over(self._live_changes, time.monotonic())
            self._live_changes.clear()


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
    hub: StreamHub,
) -> web.StreamResponse:
    resource_version = query.get("resourceVersion") or None
    field_selector = query.get("fieldSelector") or None
    if target.name:  # legacy /watch/.../<name>: a watch on one object
        by_name = f"metadata.name={target.name}"
        field_selector = f"{field_selector},{by_name}" if field_selector else by_name
    if resource_version not in (None, "0") and faults.take_watch_expiry():
        return await _send_expired(request, f"too old resource version: {resource_version} (kubesim fault)")
    stream = _WatchStream(
        request,
        cluster,
        rt,
        as_table=wants_table(request.headers.get("Accept", "")),
        include_object=query.get("includeObject", "Metadata"),
        hub=hub,
    )
    try:
        subscription = cluster.store.subscribe(
            rt.key,
            stream.deliver,
            namespace=target.namespace or None,
            label_selector=query.get("labelSelector") or None,
            field_selector=field_selector,
            resource_version=resource_version,
        )
    except ApiError as error:
        if error.code == 410:
            return await _send_expired(request, error.message)
        raise
    stream.live = True
    watch = (_peer(request), rt.key, target.namespace or "")
    stats.watch_opened(*watch)
    limits = [v for v in (_float(query.get("timeoutSeconds")), faults.watch_drop_after_s) if v is not None]
    timer = asyncio.get_running_loop().call_later(min(limits), stream.finish) if limits else None
    try:
        response = await _open_stream(request)
        stream.start(request.transport)
        hub.add(stream, bookmarks=is_true(query.get("allowWatchBookmarks")))
        await stream.done
    finally:
        subscription.close()
        hub.discard(stream)
        if timer is not None:
            timer.cancel()
        stats.watch_closed(*watch)
    return response


def _peer(request: web.Request) -> str:
    """The client's address as "host:port" (what the client's socket calls its local address)."""
    peername = request.transport.get_extra_info("peername") if request.transport else None
    return f"{peername[0]}:{peername[1]}" if peername else ""


async def _send_expired(request: web.Request, message: str) -> web.StreamResponse:
    """As the API server does for a too-old resourceVersion: 200, one ERROR event with a 410 Status."""
    return await send_watch_error(request, status_body(410, "Expired", message))


async def send_watch_error(request: web.Request, status: dict) -> web.StreamResponse:
    """A watch the API server accepted and then ended with ``status``: 200, one ERROR event carrying it."""
    response = await _open_stream(request)
    await response.write(_event_line("ERROR", status))
    return response


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


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


async def serve_log(request: web.Request, cluster, pod: dict, query, *, hub: StreamHub) -> web.StreamResponse:
    """GET pods/<name>/log: the buffered text, or with follow=true a chunked stream until the
    container ends (``PodLogs.close``) or the client leaves (noticed by the hub's sweep)."""
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
    watched = _OpenResponse(request)
    hub.add(watched)
    pending: asyncio.Future | None = None
    try:
        while True:
            pending = pending or asyncio.ensure_future(anext(lines))
            await asyncio.wait({pending, watched.done}, return_when=asyncio.FIRST_COMPLETED)
            if watched.done.done() or watched.client_gone():
                return response
            try:
                line = pending.result()
            except StopAsyncIteration:
                return response
            pending = None
            await response.write(line.encode())
    except (ConnectionResetError, ConnectionError):
        return response
    finally:
        hub.discard(watched)
        if pending is not None:
            pending.cancel()
        await lines.aclose()
