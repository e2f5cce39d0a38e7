"""One list+watch of one resource, as client-go's Reflector does it, and what it does when the API server
says no.

Two processes keep a live copy of the cluster: the triggerer (``kueue_ray.hub``: RayJobs and Workloads
for the waiting tasks) and the api-server (``kueue_ray.ui.cache``: what the Kueue pages show). Both need
the same loop: list, watch from the list's resourceVersion, relist when due, and survive every answer a
real API server gives in its first hour. It lives here once, so a refusal handled for the triggerer is
handled for the UI too (a UI loop that read a 403 ``Status`` line as an event once asked again ~700 times
a second). Subclasses say what a list's pages and an event mean to them (``apply_page``, ``apply_event``) and are
told about health (``succeeded``, ``failed``) and polling (``polling_started``, ``watching_again``).

What the loop does with each answer (``ListWatchLoop._stream``):

* 200: stream events; bookmarks keep the resourceVersion fresh; a stream the server closes at once
  without a word counts as dropped.
* 410 Gone (as an HTTP status or a watch's ERROR event): relist at once; with backoff only when that
  keeps happening without a healthy watch in between.
* 401: load the credentials again (retire the shared client) once at once, then with backoff: an
  exec-plugin token expired.
* 429: wait at least ``Retry-After`` (API Priority and Fairness).
* 403 to the watch while lists are allowed (a Role granting ``list`` but not ``watch``): poll, one list
  per ``degraded_list_interval``, and try the watch again every ``degraded_watch_retry_every``-th time,
  from the last list's resourceVersion, so fixing the Role ends the polling without losing a change. The
  refusal outlives the loop (``refusals``): a loop started again for the same target keeps the schedule
  instead of meeting the 403 again at once.
* Anything else (5xx, other 403s, dropped connections, cut-off JSON, timeouts): back off with jitter.
  A subclass may shorten the pause before retrying a 401/403 (``retry_delay``): the hub asks again when
  a refusal would end its waits, so that answer decides (``kueue_ray.kube.refusals.RefusalWindow``).

After a list, the memory it freed goes back to the system a moment later (``kueue_ray.kube.heap``).

A watch is opened with ``_preload_content=False``, and in that mode kubernetes_asyncio hands over any
answer, 200 or not, as a stream: the loop reads the status itself (``Refused``, in ``kueue_ray.kube.refusals``
with the ``Backoff`` every retry uses). The ApiClient a loop lists and watches with is lent to it by a
``kueue_ray.kube.shared_client.SharedApiClient``; what it watches and its tunables are plain values in
``kueue_ray.kube.watch_target``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import math
import random
import time
from collections.abc import Iterable, MutableMapping
from typing import Any

from kueue_ray.kube import heap
from kueue_ray.kube.errors import describe_error
from kueue_ray.kube.listbody import ListBody
from kueue_ray.kube.pages import EXPIRED_RESTARTS, PAGE_SIZE, continue_token, server_time
from kueue_ray.kube.refusals import Backoff, Refused, WatchGone
from kueue_ray.kube.server_clock import server_clock
from kueue_ray.kube.shared_client import SharedApiClient
from kueue_ray.kube.watch_target import (
    LIST_REQUEST_TIMEOUT_SECONDS,
    SERVER_TIMEOUT_GRACE_SECONDS,
    ListWatchSettings,
    RefusalMemory,
    Target,
)

log = logging.getLogger(__name__)


async def _as_api_exception(response: Any) -> Any:
    """The ApiException kubernetes_asyncio would have raised for this answer had it been preloaded."""
    from kubernetes_asyncio.client.exceptions import ApiException
    from kubernetes_asyncio.client.rest import RESTResponse

    return ApiException(http_resp=RESTResponse(response, await response.read()))


class ListWatchLoop:
    """One list+watch of ``target`` with its cache of objects (see the module docstring).

    Subclasses implement ``begin_list``, ``apply_page``, ``end_list`` and ``apply_event`` and may override the notification hooks. The
    loop runs as one asyncio task between ``start`` and ``stop``.
    """

    def __init__(
        self,
        target: Target,
        client: SharedApiClient,
        settings: ListWatchSettings,
        refusals: RefusalMemory,
    ) -> None:
        self.target = target
        self.client = client
        self.settings = settings
        self.refusals = refusals
        self.objects: MutableMapping[str, dict] = {}
        """The cached objects by key: a ``dict``, or one that packs them (``kueue_ray.kube.packed``)."""
        self.resource_version: str | None = None
        self.next_relist = 0.0
        """Monotonic time of the next safety-net relist."""
        self.listed = asyncio.Event()
        """Set once the first list is in the cache."""
        self.polling_because: Refused | None = None
        """The watch refusal (403) that made the loop list every interval instead; None while it watches."""
        self._watch_retry_at = math.inf
        """While polling: the monotonic time from which the next request tries the watch again."""
        remembered = refusals.get(target)
        if remembered is not None and time.monotonic() - remembered[1] < settings.watch_retry_seconds:
            # A loop that replaces one refused less than a watch retry ago keeps that retry's schedule:
            # asking again at once would make every restart (e.g. the last waiting task of a namespace
            # ended, a new one came) a refused request.
            self.polling_because = remembered[0]
            self._watch_retry_at = remembered[1] + settings.watch_retry_seconds
        self._credentials_reloaded = False
        """The credentials were loaded again after a 401 and nothing succeeded since."""
        self._expired_in_a_row = 0
        self.task: asyncio.Task | None = None

    # ----- what subclasses say ------------------------------------------------------------------------

    def resync_interval(self) -> float:
        """Seconds between safety-net relists."""
        raise NotImplementedError

    def begin_list(self) -> None:
        """A list starts (or starts again, its continue token expired): the pages ``apply_page`` hands over
        until ``end_list`` are everything the target holds."""
        raise NotImplementedError

    def apply_page(self, items: Iterable[dict]) -> None:
        """One page of the list. ``items`` is decoded as it is iterated, once: keep what is needed of each
        item, not the item."""
        raise NotImplementedError

    def end_list(self) -> None:
        """The list is complete: what is cached but was not listed was deleted."""
        raise NotImplementedError

    def apply_event(self, kind: str, obj: dict) -> None:
        """One watch event (ADDED, MODIFIED or DELETED)."""
        raise NotImplementedError

    def succeeded(self) -> None:
        """The API server answered a request with 200 (a list, an opened watch, an event)."""

    def failed(self, exc: BaseException) -> None:
        """A request failed; the loop retries it (after the delay it logs). A watch refused while lists
        are allowed is no failure: the loop polls instead (``polling_started``)."""

    def retry_delay(self, delay: float) -> float:
        """The pause before retrying a refused request, given the backoff's ``delay`` (a subclass may
        shorten it, e.g. to ask again when a refusal would end its readers' waits)."""
        return delay

    def polling_started(self) -> None:
        """The loop lists every interval instead of watching (``polling_because`` says why)."""

    def watching_again(self) -> None:
        """A watch was allowed again after polling."""

    # ----- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        target = self.target
        name = f"kueue-ray-watch/{target.conn_id}/{target.namespace or '(cluster)'}/{target.plural}"
        # A context of its own: the loop serves whoever reads its cache, so its log lines must not carry
        # the context (e.g. a task log) of whichever caller happened to start it.
        self.task = asyncio.create_task(self._run(), name=name, context=contextvars.Context())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def polling_notice(self) -> str:
        """What a reader is told while the loop polls instead of watching."""
        target, interval = self.target, self.settings.degraded_list_interval
        return (
            f"The API server refuses to watch {target.plural} {target.where} ({self.polling_because}). "
            f"Following them by listing every {interval:g}s instead: changes arrive up to {interval:g}s "
            f"late, none is lost. To watch again, grant 'watch' on {target.qualified} to the user of "
            f"connection {target.conn_id} (check: {target.can_i('watch')})"
        )

    # ----- the loop ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        from kubernetes_asyncio.client import CustomObjectsApi

        target = self.target
        backoff = Backoff(self.settings.backoff_initial, self.settings.backoff_max)
        while True:
            try:
                # The shared ApiClient: no TLS setup per request or per reconnect. It is only replaced
                # when the credentials are refused (e.g. an expired exec-plugin token).
                async with self.client.lease() as api_client:
                    try:
                        await self._stream(CustomObjectsApi(api_client), backoff)
                    except Refused:  # _stream raises only 401: load the credentials again
                        await self.client.retire(api_client)
                        raise
            except Refused as refused:
                self.failed(refused)
                if not self._credentials_reloaded:
                    self._credentials_reloaded = True
                    log.warning(
                        "The API server refused the credentials of connection %s to %s %s %s (%s); "
                        "loading them again",
                        target.conn_id,
                        refused.verb,
                        target.plural,
                        target.where,
                        refused,
                    )
                    continue
                delay = self.retry_delay(max(backoff.next_delay(), refused.retry_after or 0.0))
                log.warning(
                    "The API server still refuses the credentials of connection %s (%s); loading them "
                    "again in %.1fs",
                    target.conn_id,
                    refused,
                    delay,
                )
                await asyncio.sleep(delay)
            except Exception as exc:  # noqa: BLE001 - a broken config: reconnect later
                self.failed(exc)
                delay = backoff.next_delay()
                log.warning(
                    "Connection for the watch of %s %s failed (%s); reconnecting in %.1fs",
                    target.plural,
                    target.where,
                    describe_error(exc),
                    delay,
                )
                await asyncio.sleep(delay)

    async def _stream(self, api: Any, backoff: Backoff) -> None:
        """List, then watch from the list's resourceVersion until the next relist is due, forever (or poll
        while watching is refused); raises only on refused credentials (401)."""
        from aiohttp import ClientError

        while True:
            try:
                if self.polling_because is not None:
                    await self._poll(api)
                    continue
                if self.resource_version is None or time.monotonic() >= self.next_relist:
                    await self._list(api)
                started = time.monotonic()
                received = await self._watch(api, self._watch_timeout())
                if received:
                    backoff.reset()
                    self._expired_in_a_row = 0
                elif time.monotonic() - started < self.settings.min_healthy_stream_seconds:
                    # The server closed an empty stream at once: treat it as a dropped stream.
                    await asyncio.sleep(backoff.next_delay())
            except WatchGone:
                await self._relist_after_expiry(backoff)
            except Refused as refused:
                if refused.status == 401:
                    raise
                if refused.status == 410:
                    await self._relist_after_expiry(backoff)
                else:
                    await self._refused(refused, backoff)
            # A dropped stream, a cut-off JSON line, a timeout: retry from where we were.
            except (ClientError, OSError, ValueError, TimeoutError) as exc:
                await self._back_off(backoff, exc)

    async def _relist_after_expiry(self, backoff: Backoff) -> None:
        """410 Gone: the watch's resourceVersion is older than the server's history. Relist at once; only
        when that keeps happening without a healthy watch in between, relist with backoff."""
        log.info("Watch of %s %s expired (410 Gone); relisting", self.target.plural, self.target.where)
        self.resource_version = None
        if self._expired_in_a_row:
            await asyncio.sleep(backoff.next_delay())
        self._expired_in_a_row += 1

    async def _refused(self, refused: Refused, backoff: Backoff) -> None:
        """Any refusal but 401 and 410 (those are handled by the caller)."""
        target = self.target
        if refused.status == 403 and refused.verb == "watch" and self.polling_because is None:
            self._start_polling(refused)  # not a failure: the lists keep the cache current
            return
        self.failed(refused)
        delay = max(backoff.next_delay(), refused.retry_after or 0.0)
        if refused.status in (401, 403):
            delay = self.retry_delay(delay)
        if refused.status == 403:
            log.warning(
                "The API server refuses to %s %s %s (%s); retrying in %.1fs. Grant it to the user of "
                "connection %s (check: %s)",
                refused.verb,
                target.plural,
                target.where,
                refused,
                delay,
                target.conn_id,
                target.can_i(refused.verb),
            )
        else:
            log.warning(
                "%s of %s %s failed (%s); retrying in %.1fs from resourceVersion %s",
                refused.verb.capitalize(),
                target.plural,
                target.where,
                refused,
                delay,
                self.resource_version,
            )
        await asyncio.sleep(delay)

    def _start_polling(self, refused: Refused) -> None:
        now = time.monotonic()
        self.polling_because = refused
        self._watch_retry_at = now + self.settings.watch_retry_seconds
        self.refusals[self.target] = (refused, now)
        log.warning(
            "The API server refuses to watch %s %s (%s); listing them every %gs instead (check: %s)",
            self.target.plural,
            self.target.where,
            refused,
            self.settings.degraded_list_interval,
            self.target.can_i("watch"),
        )
        self.polling_started()

    def _watch_allowed(self) -> None:
        if self.polling_because is None:
            return
        self.polling_because = None
        self._watch_retry_at = math.inf
        self.refusals.pop(self.target, None)
        log.warning(
            "The API server lets connection %s watch %s %s again",
            self.target.conn_id,
            self.target.plural,
            self.target.where,
        )
        self.watching_again()

    async def _poll(self, api: Any) -> None:
        """One interval of polling: wait, then one request (a list; once the watch retry is due, a watch
        instead, which ends the polling if the API server allows it again). A loop that has not listed yet
        lists at once."""
        if self.resource_version is not None:
            await asyncio.sleep(self.retry_delay(self.settings.degraded_list_interval))
        if self.resource_version is None or time.monotonic() < self._watch_retry_at:
            await self._list(api)
            return
        try:
            await self._watch(api, self._watch_timeout())
        except Refused as refused:
            if refused.status != 403:
                raise
            now = time.monotonic()
            self._watch_retry_at = now + self.settings.watch_retry_seconds
            self.refusals[self.target] = (refused, now)

    def _watch_timeout(self) -> int:
        """Seconds the next watch may last: until the relist is due, at most the configured maximum."""
        remaining = self.next_relist - time.monotonic()
        return max(1, min(self.settings.watch_timeout_seconds, math.ceil(remaining)))

    async def _back_off(self, backoff: Backoff, exc: BaseException) -> None:
        self.failed(exc)
        delay = backoff.next_delay()
        log.warning(
            "Watch of %s %s failed (%s); retrying in %.1fs from resourceVersion %s",
            self.target.plural,
            self.target.where,
            describe_error(exc),
            delay,
            self.resource_version,
        )
        await asyncio.sleep(delay)

    def _succeeded(self) -> None:
        self._credentials_reloaded = False
        self.succeeded()

    async def _list(self, api: Any) -> None:
        """Replace the cache with a fresh list (``limit``/``continue``), applied page by page: one page's
        text at a time, not a namespace's (~70 MB for 30,000 RayJobs and Workloads, bench/README.md run
        AF). A continue token the server no longer knows (410 Expired) starts the list again."""
        restarts = 0
        token: str | None = None
        self.begin_list()
        while True:
            text = await self._list_page(api, token, may_restart=restarts < EXPIRED_RESTARTS)
            if text is None:
                log.info(
                    "Listing %s %s: continue token expired, again", self.target.plural, self.target.where
                )
                restarts, token = restarts + 1, None
                self.begin_list()
                continue
            body = ListBody(text)
            del text
            items = body.items()
            self.apply_page(items)
            for _ in items:  # what apply_page left unread: the list's metadata may follow the items
                pass
            token = continue_token(body.fields)
            if token is None:
                break
        # Once per list, not per page: readers waiting on the loop wake at its outcome, and a page is not one.
        self._succeeded()
        self.end_list()
        self.resource_version = body.resource_version
        # Jitter, so that a fleet of processes does not relist in lockstep.
        self.next_relist = time.monotonic() + self.resync_interval() * random.uniform(0.9, 1.0)
        self.listed.set()
        heap.trim_soon(self.settings.trim_after_list_seconds)

    async def _list_page(self, api: Any, token: str | None, *, may_restart: bool) -> str | None:
        """One page of the list, its text not yet decoded; None when its continue token expired (410) and
        the list may start again."""
        from kubernetes_asyncio.client.exceptions import ApiException

        paging: dict[str, Any] = {"limit": PAGE_SIZE}
        if token:
            paging["_continue"] = token
        try:
            # Not preloaded: the client would decode every full object at once (``kueue_ray.kube.listbody``).
            response = await self.target.request(
                api, _preload_content=False, _request_timeout=LIST_REQUEST_TIMEOUT_SECONDS, **paging
            )
        except ApiException as exc:
            raise Refused.from_api_exception("list", exc) from exc
        try:
            if response.status == 410 and token and may_restart:
                return None
            if response.status != 200:
                raise Refused.from_api_exception("list", await _as_api_exception(response))
            server_clock(self.target.conn_id).observe(server_time(getattr(response, "headers", None)))
            return (await response.content.read()).decode()
        finally:
            response.release()

    async def _watch(self, api: Any, timeout: int) -> bool:
        """Stream events until the server ends the watch (or ``timeout`` plus a grace passes); True if any
        event (one with a ``type``) arrived. Raises ``Refused`` when the server answers anything but 200."""
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            response = await self.target.request(
                api,
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=self.resource_version,
                timeout_seconds=timeout,
                # The cncf provider's ApiClient gives every request a 60 s total client timeout unless
                # told otherwise (``timeout_seconds`` only reaches the server): without this, each watch
                # would be cut after a minute and re-opened, two requests a minute for nothing.
                _request_timeout=timeout + 2 * SERVER_TIMEOUT_GRACE_SECONDS,
                _preload_content=False,
            )
        except ApiException as exc:
            raise Refused.from_api_exception("watch", exc) from exc
        received = False
        try:
            if response.status != 200:
                # Without preloading, the client hands over a 403 or 429 as if it were a stream of events.
                raise Refused.from_api_exception("watch", await _as_api_exception(response))
            server_clock(self.target.conn_id).observe(server_time(getattr(response, "headers", None)))
            self._succeeded()
            self._watch_allowed()
            async with asyncio.timeout(timeout + SERVER_TIMEOUT_GRACE_SECONDS):
                while True:
                    line = await response.content.readline()
                    if not line:
                        return received
                    if line.strip() and self._handle(json.loads(line)):
                        received = True
        except TimeoutError:
            return received
        finally:
            response.release()

    def _handle(self, event: dict) -> bool:
        """Apply one line of the stream; True for an event (it has a ``type``), False for anything else."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind is None:
            if event.get("kind") == "Status":  # a refusal where an event belongs
                raise Refused.from_status("watch", event)
            return False
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchGone()
            raise Refused.from_status("watch", obj)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        self.succeeded()
        if kind != "BOOKMARK":
            self.apply_event(kind, obj)
        return True
