"""The Kueue controller's one way to act: write a fresh copy of an object, record an Event, wake up later.

Every part of the controller (job sync, eviction, admission cycle, admission checks, waitForPodsReady,
queue status) is handed the same ``Writer``, as Kueue's own parts are handed the manager's client and
event recorder: none of them reaches into another to write. It also keeps what conditions cannot say
precisely (when a reservation or an admission happened, below the second), which several parts read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

from kubesim.clock import parse_time
from kubesim.errors import ApiError
from kubesim.events import record_event
from kubesim.jsoncopy import fast_copy
from kubesim.kueue.conditions import find_condition


class Writer:
    """Writes through the store on behalf of the controller, and wakes its loop (``wake``) when a pass is
    due: after a conflicting write (the next pass re-reads) or once a simulated time has passed."""

    def __init__(self, store, clock, wake: asyncio.Event) -> None:
        self.store = store
        self.clock = clock
        self.wake = wake
        # Precise quota-reservation times: conditions only keep seconds, but preemption prefers the most
        # recently admitted candidate, so two admissions within one second must stay ordered.
        self.reserved_at: dict[str, float] = {}
        # Precise admission times (the Admitted condition keeps whole seconds), for waitForPodsReady.
        self.admitted_at: dict[str, datetime] = {}
        self._wake_handles: dict[int, asyncio.TimerHandle] = {}

    def mutate(self, key: str, obj: dict, change: Callable[[dict], None], *, status: bool) -> dict | None:
        """Re-read ``obj``, apply ``change`` to the fresh copy, write it if it changed.

        Returns what is stored afterwards, or None when the object is gone or changed meanwhile (a
        conflict wakes the loop, so the next pass decides again on the fresh object)."""
        meta = obj["metadata"]
        try:
            fresh = self.store.get(key, meta["name"], namespace=meta.get("namespace"))
        except ApiError:
            return None
        updated = fast_copy(fresh)
        change(updated)
        if updated == fresh:
            return fresh
        try:
            return self.store.update(key, updated, subresource="status" if status else None)
        except ApiError as err:
            if err.code in (404, 409):
                self.wake.set()
                return None
            raise

    def event(self, obj: dict, type_: str, reason: str, message: str, component: str) -> None:
        record_event(self.store, obj, type_, reason, message, component)

    def wake_after(self, simulated_seconds: float) -> None:
        """Run a pass once ``simulated_seconds`` have passed (a timeout or a backoff falls due then, with
        no object changing to wake the controller). One timer per real second is enough."""
        delay = max(0.0, self.clock.real_seconds(simulated_seconds)) + 0.01
        loop = asyncio.get_running_loop()
        slot = int(loop.time() + delay)
        if slot not in self._wake_handles:
            self._wake_handles[slot] = loop.call_later(delay, self._wake_from_timer, slot)

    def _wake_from_timer(self, slot: int) -> None:
        self._wake_handles.pop(slot, None)
        self.wake.set()

    def note_reserved(self, wl: dict) -> None:
        """Quota was reserved for ``wl`` just now."""
        self.reserved_at[wl["metadata"]["uid"]] = self.clock.now().timestamp()

    def note_admitted(self, wl: dict) -> None:
        """``wl`` was admitted just now."""
        self.admitted_at[wl["metadata"]["uid"]] = self.clock.now()

    def reserved_moment(self, wl: dict) -> datetime:
        """When the current quota reservation was made, as precisely as known."""
        at = self.reserved_at.get(wl["metadata"]["uid"])
        if at is not None:
            return datetime.fromtimestamp(at, UTC)
        condition = find_condition(wl, "QuotaReserved") or {}
        return (
            parse_time(condition["lastTransitionTime"])
            if condition.get("lastTransitionTime")
            else self.clock.now()
        )

    def admitted_moment(self, wl: dict) -> datetime:
        """When the Workload was last admitted (``Admitted=True``), as precisely as known."""
        condition = find_condition(wl, "Admitted") or {}
        at = self.admitted_at.get(wl["metadata"]["uid"])
        stamp = condition.get("lastTransitionTime")
        if at is not None and (not stamp or abs((at - parse_time(stamp)).total_seconds()) < 2):
            return at
        return parse_time(stamp) if stamp else self.clock.now()
