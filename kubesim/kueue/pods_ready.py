"""waitForPodsReady: Kueue v0.19 evicts an admitted Workload whose pods do not all become ready in time.

On by default in Kueue v0.19 (``kubesim.kueue.config.KueueConfig``). An admitted Workload whose
``PodsReady`` condition is not True ``timeout`` after its admission (``WaitForStart``), or ``recoveryTimeout``
after a pod failed (``WaitForRecovery``), is evicted with Kueue's exact words:

* ``Evicted=True``, reason ``PodsReadyTimeout``, message ``Exceeded the PodsReady timeout <ns>/<name>``;
* ``schedulingStats.evictions`` counts ``{reason: PodsReadyTimeout, underlyingCause: WaitForStart}``;
* ``requeueState{count: n, requeueAt: now + base * 2^(n-1)}`` (capped at ``backoffMaxSeconds``).

The job is suspended and, once inactive, the quota released (``Requeued=False`` / ``PodsReadyTimeout``).
The Workload is not scheduled before ``requeueAt``; then ``Requeued=True`` / ``BackoffFinished`` ("The
workload backoff was finished"), ``requeueAt`` is cleared (the count stays) and it queues again, ordered by
its eviction time. With ``backoffLimitCount`` set, the eviction that would exceed it deactivates the
Workload instead (``DeactivationTarget`` / ``RequeuingLimitExceeded``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from kubesim.clock import format_time, parse_time
from kubesim.kueue.conditions import (
    BACKOFF_REQUEUE_REASONS,
    MSG_BACKOFF_FINISHED,
    condition_true,
    find_condition,
    is_evicting,
    is_finished,
    requeue_at,
    set_condition,
)
from kubesim.kueue.config import KueueConfig
from kubesim.kueue.eviction import Eviction
from kubesim.kueue.jobs import WORKLOAD_KEY
from kubesim.kueue.writer import Writer

if TYPE_CHECKING:
    from kubesim.kueue.cache import ClusterView

REASON = "PodsReadyTimeout"
MSG_REQUEUING_LIMIT = "exceeding the maximum number of re-queuing retries"


@dataclass(eq=False)
class PodsReady:
    """The waitForPodsReady half of Kueue's workload controller, run once per Kueue controller pass."""

    writer: Writer
    view: ClusterView
    eviction: Eviction
    config: KueueConfig
    backing_off: set[tuple[str, str]] = field(default_factory=set, init=False)
    """Queued Workloads (namespace, name) with a ``requeueAt`` to wait out (all queued ones are looked
    at on a full pass, so one evicted before a restart of kubesim is found too)."""

    def reconcile(self, full: bool) -> None:
        self._time_out_unready()
        self._finish_backoffs(full)

    # -------------------------------------------------------------------------------- timeouts

    def _time_out_unready(self) -> None:
        for held in list(self.view.index.holders.values()):
            for ident, wl in list(held.items()):
                if (
                    is_finished(wl)
                    or is_evicting(wl)
                    or not condition_true(wl, "Admitted")
                    or not (wl.get("spec") or {}).get("active", True)
                ):
                    continue
                self._check(ident, wl)

    def _check(self, ident: tuple[str, str], wl: dict) -> None:
        """``reconcileNotReadyTimeout``: wait, evict, or (past ``backoffLimitCount``) deactivate."""
        writer, config, clock = self.writer, self.config, self.writer.clock
        pods_ready = find_condition(wl, "PodsReady") or {}
        if pods_ready.get("status") == "True":
            return
        if not pods_ready or pods_ready.get("reason") in ("WaitForStart", "PodsReady"):
            cause, since, timeout = "WaitForStart", writer.admitted_moment(wl), config.pods_ready_timeout
        elif pods_ready.get("reason") == "WaitForRecovery":
            since = parse_time(pods_ready["lastTransitionTime"])
            cause, timeout = "WaitForRecovery", config.effective_recovery_timeout
        else:
            return
        waited = clock.simulated_since(since)
        if waited < timeout:
            writer.wake_after(timeout - waited)
            return
        count = int(((wl.get("status") or {}).get("requeueState") or {}).get("count") or 0)
        if config.backoff_limit_count is not None and count + 1 > config.backoff_limit_count:
            self.eviction.set_deactivation_target(wl, "RequeuingLimitExceeded", MSG_REQUEUING_LIMIT)
            return
        wait_until = clock.now() + timedelta(seconds=clock.real_seconds(config.requeue_backoff(count + 1)))

        def prepare(obj: dict) -> None:
            state = obj.setdefault("status", {}).setdefault("requeueState", {})
            current = parse_time(state["requeueAt"]) if state.get("requeueAt") else None
            if current is None or current < wait_until:
                state["requeueAt"] = format_time(wait_until)
            state["count"] = count + 1

        message = f"Exceeded the PodsReady timeout {ident[0]}/{ident[1]}"
        self.eviction.evict(wl, REASON, message, underlying_cause=cause, prepare=prepare)
        self.backing_off.add(ident)

    # -------------------------------------------------------------------------------- backoff

    def _finish_backoffs(self, full: bool) -> None:
        """A released Workload whose ``requeueAt`` passed queues again: ``Requeued=True`` /
        ``BackoffFinished`` and no ``requeueAt``."""
        clock = self.writer.clock
        queued = self.view.index.queued
        if full:
            self.backing_off |= {ident for ident, wl in queued.items() if requeue_at(wl) is not None}
        now = clock.now()
        for ident in sorted(self.backing_off):
            wl = self.view.get(WORKLOAD_KEY, *ident)
            if wl is None:
                self.backing_off.discard(ident)
                continue
            if ident not in queued:
                continue  # still being evicted: the quota is released first
            requeued = find_condition(wl, "Requeued") or {}
            if requeued.get("status") != "False" or requeued.get("reason") not in BACKOFF_REQUEUE_REASONS:
                self.backing_off.discard(ident)
                continue
            at = requeue_at(wl)
            if at is not None and at > now:
                self.writer.wake_after((at - now).total_seconds() * clock.time_scale)
                continue
            stamp = clock.timestamp()

            def change(obj: dict, stamp: str = stamp) -> None:
                (obj["status"].get("requeueState") or {}).pop("requeueAt", None)
                set_condition(obj, "Requeued", "True", "BackoffFinished", MSG_BACKOFF_FINISHED, stamp)

            self.writer.mutate(WORKLOAD_KEY, wl, change, status=True)
            self.backing_off.discard(ident)
