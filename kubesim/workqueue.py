"""What every kubesim controller's loop is made of, as controller-runtime and client-go give every real
controller: watches that map events to keys, a de-duplicating work queue, one reconcile at a time, and
timers on the simulated clock.

The KubeRay operator (``kubesim.kuberay.operator``) and the Job controller (``kubesim.batch.controller``)
both run on these pieces: ``WorkQueue.run`` is their whole run loop, ``Timers.call_after`` is how
anything that takes time (a pod starting, a backoff, a deadline) comes back, never a loop polling every
object. ``Moments`` keeps the precise instants behind the whole-second timestamps a controller writes,
so simulated durations measured from them stay exact at a high ``--time-scale``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable, Mapping
from datetime import datetime
from typing import Generic, TypeVar

from kubesim.clock import Clock, format_time, parse_time
from kubesim.errors import ApiError
from kubesim.watch import WatchEvent

CONFLICT_RETRY = 0.1
"""Simulated seconds before retrying a reconcile that lost a write race or missed a child (409 / 404)."""
ERROR_RETRY = 3.0
"""Simulated seconds before retrying a reconcile that failed otherwise (KubeRay's requeue period)."""


class Timers:
    """Synchronous store-only steps run once a simulated duration has passed; all cancelled by ``close``."""

    def __init__(self, clock: Clock, log: logging.Logger) -> None:
        self.clock = clock
        self._log = log
        self._handles: set[asyncio.TimerHandle] = set()

    def call_after(self, simulated_seconds: float, action: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle | None = None

        def fire() -> None:
            self._handles.discard(handle)
            try:
                action()
            except Exception:  # a timer must never take the event loop down with it
                self._log.exception("timer failed")

        handle = loop.call_later(max(0.0, self.clock.real_seconds(simulated_seconds)), fire)
        self._handles.add(handle)

    def close(self) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()


class Moments:
    """Kubernetes timestamps have whole seconds, far too coarse for simulated durations at a high
    ``--time-scale``: this remembers the precise moment behind each timestamp a controller wrote."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._moments: dict[tuple[str, str], tuple[str, datetime]] = {}

    def stamp(self, uid: str, field: str) -> str:
        """Now as a Kubernetes timestamp for ``field`` of object ``uid``; the precise moment is remembered."""
        moment = self.clock.now()
        text = format_time(moment)
        self._moments[(uid, field)] = (text, moment)
        return text

    def simulated_since(self, uid: str, field: str, timestamp: str) -> float:
        """Simulated seconds since ``timestamp``: precise if we wrote it, else from its whole second."""
        remembered = self._moments.get((uid, field))
        moment = remembered[1] if remembered and remembered[0] == timestamp else parse_time(timestamp)
        return self.clock.simulated_since(moment)


K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """Keys waiting for ``reconcile(key)``; a key already waiting is not queued twice (level-triggered:
    a reconcile reads the current state, so one run covers every event that queued it)."""

    def __init__(self, reconcile: Callable[[K], None], timers: Timers, log: logging.Logger) -> None:
        self._reconcile = reconcile
        self._timers = timers
        self._log = log
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()

    def enqueue(self, key: K) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def requeue_after(self, key: K, simulated_seconds: float) -> None:
        """Reconcile ``key`` again once ``simulated_seconds`` have passed."""
        self._timers.call_after(simulated_seconds, lambda: self.enqueue(key))

    async def run(self, store, watches: Mapping[str, Callable[[WatchEvent], None]]) -> None:
        """Watch each resource with its handler and work the queue, until cancelled."""
        tasks = [asyncio.create_task(self.watch(store, key, handler)) for key, handler in watches.items()]
        tasks.append(asyncio.create_task(self._work()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def watch(self, store, key: str, handler: Callable[[WatchEvent], None]) -> None:
        """List+watch forever; a fresh watch replays every object as ADDED, so nothing is missed. The
        handlers only read what they are given (shared, frozen objects)."""
        while True:
            watcher = store.watch(key, copy_objects=False)
            try:
                async for event in watcher:
                    if event.type == "ERROR":
                        break
                    if event.type != "BOOKMARK":
                        handler(event)
            finally:
                watcher.close()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            try:
                self._reconcile(key)
            except ApiError as exc:
                if exc.code in (404, 409):  # a child vanished or someone wrote first: look again shortly
                    self.requeue_after(key, CONFLICT_RETRY)
                else:
                    self._log.warning("reconcile %s failed: %s", key, exc)
                    self.requeue_after(key, ERROR_RETRY)
            except Exception:
                self._log.exception("reconcile %s crashed", key)
                self.requeue_after(key, ERROR_RETRY)
            await asyncio.sleep(0)  # let the API server and the other controllers breathe
