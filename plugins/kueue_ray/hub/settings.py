"""The hub's tunables (``HubSettings``): tests shorten them, production keeps the defaults.

Apart from ``kueue_ray.hub.watchhub`` because the scope's watch loops and the subscriptions read them
without needing the hub itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from kueue_ray.kube.watch_target import LIST_REQUEST_TIMEOUT_SECONDS, ListWatchSettings


@dataclass
class HubSettings(ListWatchSettings):
    """Tunables; tests shorten them, production keeps the defaults (the loop's own in ``ListWatchSettings``)."""

    first_list_budget_seconds: float = 2 * LIST_REQUEST_TIMEOUT_SECONDS
    """How long a read waits for its loop's first list before reading by itself: longer than that list's
    own request timeout, so a slow first list (a large namespace, a throttled API server) is waited for by
    every subscriber, not replaced by a GET each. A first list that fails makes the loop failing, and the
    reads wait on its retries (``kueue_ray.hub.reads``)."""
    pending_workloads_ttl_seconds: float = 5.0
    """How long one visibility read of a LocalQueue answers every trigger asking for a queue position."""
    refusal_timeout: float | None = None
    """Seconds of 401/403 in a row to a read a wait needs before the wait fails; None: ``[kueue_ray]
    refusal_timeout`` (``kueue_ray.kube.refusals.refusal_timeout``)."""
    gauge_interval: float = 10.0
    """Seconds between two reports of the ``kueue_ray.tasks_waiting`` gauge (StatsD's usual flush)."""
