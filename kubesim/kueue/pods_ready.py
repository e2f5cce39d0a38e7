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

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from kubesim.clock import format_time, parse_time
from kubesim.kueue.conditions import condition_true, is_evicting, is_finished, set_condition
from kubesim.kueue.jobs import WORKLOAD_KEY

if TYPE_CHECKING:
    from kubesim.kueue.config import KueueConfig
    from kubesim.kueue.controller import KueueController

REASON = "PodsReadyTimeout"
BACKOFF_REQUEUE_REASONS = ("PodsReadyTimeout", "AdmissionCheck")
"""Evictions whose Workload waits out ``requeueState.requeueAt`` and is then ordered by eviction time."""
MSG_BACKOFF_FINISHED = "The workload backoff was finished"
MSG_REQUEUING_LIMIT = "exceeding the maximum number of re-queuing retries"


def _condition(wl: dict, type_: str) -> dict:
    for condition in (wl.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_:
            return condition
    return {}


def requeue_at(wl: dict) -> datetime | None:
    value = ((wl.get("status") or {}).get("requeueState") or {}).get("requeueAt")
    return parse_time(value) if value else None


def backing_off(wl: dict, now: datetime) -> bool:
    """The Workload waits out a requeue backoff: the scheduler must not consider it yet."""
    at = requeue_at(wl)
    return at is not None and at > now


def queue_order_timestamp(wl: dict) -> str | None:
    """Kueue's queue-order time (``requeuingStrategy.timestamp: Eviction``): a Workload evicted for its pods
    or an admission check queues by the eviction's time, everything else by its creation."""
    evicted = _condition(wl, "Evicted")
    if evicted.get("status") == "True" and evicted.get("reason") in BACKOFF_REQUEUE_REASONS:
        return evicted.get("lastTransitionTime")
    return wl["metadata"].get("creationTimestamp")


class PodsReady:
    """The waitForPodsReady half of Kueue's workload controller, run once per Kueue controller pass."""

    def __init__(self, controller: KueueController, config: KueueConfig) -> None:
        self.controller = controller
        self.config = config
        self.backing_off: set[tuple[str, str]] = set()
        """Queued Workloads (namespace, name) with a ``requeueAt`` to wait out (all queued ones are looked
        at on a full pass, so one evicted before a restart of kubesim is found too)."""

    def reconcile(self, full: bool) -> None:
        self._time_out_unready()
        self._finish_backoffs(full)

    # -------------------------------------------------------------------------------- timeouts

    def _time_out_unready(self) -> None:
        controller = self.controller
        for held in list(controller.view.index.holders.values()):
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
        controller, config = self.controller, self.config
        pods_ready = _condition(wl, "PodsReady")
        if pods_ready.get("status") == "True":
            return
        if not pods_ready or pods_ready.get("reason") in ("WaitForStart", "PodsReady"):
            cause, since, timeout = "WaitForStart", controller.admitted_moment(wl), config.pods_ready_timeout
        elif pods_ready.get("reason") == "WaitForRecovery":
            since = parse_time(pods_ready["lastTransitionTime"])
            cause, timeout = "WaitForRecovery", config.effective_recovery_timeout
        else:
            return
        waited = controller.clock.simulated_since(since)
        if waited < timeout:
            controller.wake_after(timeout - waited)
            return
        count = int(((wl.get("status") or {}).get("requeueState") or {}).get("count") or 0)
        if config.backoff_limit_count is not None and count + 1 > config.backoff_limit_count:
            controller.set_deactivation_target(wl, "RequeuingLimitExceeded", MSG_REQUEUING_LIMIT)
            return
        clock = controller.clock
        wait_until = clock.now() + timedelta(seconds=clock.real_seconds(config.requeue_backoff(count + 1)))

        def prepare(obj: dict) -> None:
            state = obj.setdefault("status", {}).setdefault("requeueState", {})
            current = parse_time(state["requeueAt"]) if state.get("requeueAt") else None
            if current is None or current < wait_until:
                state["requeueAt"] = format_time(wait_until)
            state["count"] = count + 1

        message = f"Exceeded the PodsReady timeout {ident[0]}/{ident[1]}"
        controller._evict(wl, REASON, message, underlying_cause=cause, prepare=prepare)
        self.backing_off.add(ident)

    # -------------------------------------------------------------------------------- backoff

    def _finish_backoffs(self, full: bool) -> None:
        """A released Workload whose ``requeueAt`` passed queues again: ``Requeued=True`` /
        ``BackoffFinished`` and no ``requeueAt``."""
        controller = self.controller
        queued = controller.view.index.queued
        if full:
            self.backing_off |= {ident for ident, wl in queued.items() if requeue_at(wl) is not None}
        now = controller.clock.now()
        for ident in sorted(self.backing_off):
            wl = controller.view.get(WORKLOAD_KEY, *ident)
            if wl is None:
                self.backing_off.discard(ident)
                continue
            if ident not in queued:
                continue  # still being evicted: the quota is released first
            requeued = _condition(wl, "Requeued")
            if requeued.get("status") != "False" or requeued.get("reason") not in BACKOFF_REQUEUE_REASONS:
                self.backing_off.discard(ident)
                continue
            at = requeue_at(wl)
            if at is not None and at > now:
                controller.wake_after((at - now).total_seconds() * controller.clock.time_scale)
                continue
            stamp = controller.clock.timestamp()

            def change(obj: dict, stamp: str = stamp) -> None:
                (obj["status"].get("requeueState") or {}).pop("requeueAt", None)
                set_condition(obj, "Requeued", "True", "BackoffFinished", MSG_BACKOFF_FINISHED, stamp)

            controller._mutate(WORKLOAD_KEY, wl, change, status=True)
            self.backing_off.discard(ident)
