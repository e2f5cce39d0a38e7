"""The API server's clock, as seen from this process: one clock for every duration a wait measures.

Kueue's and KubeRay's timestamps (a RayJob's ``creationTimestamp``, a Workload's ``lastTransitionTime``)
are written on the control plane's clock; a queue or run timeout subtracts them from "now". Taking "now"
from the triggerer's or worker's own clock shifts every timeout by the skew between the two (a laptop's
docker-compose against a remote cluster can be minutes off). So every answer's ``Date`` header (the
server's time when it answered, whole seconds) updates the offset between the two clocks, and a wait's
"now" is this process's time corrected by it (``ServerClock.now``). Durations on Airflow's own clock
(``execution_timeout``) stay on the local clock (``ServerClock.local``).

Pure bookkeeping: the list+watch loop (``kueue_ray.kube.listwatch``) and the hooks report what they saw.

Example::

    >>> from datetime import UTC, datetime
    >>> clock = ServerClock()
    >>> clock.observe(datetime(2026, 12, 4, 11, 0, 0, tzinfo=UTC), received=datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC))
    >>> clock.offset_s
    -3599.5
    >>> clock.now(datetime(2026, 12, 4, 12, 0, 10, tzinfo=UTC))
    datetime.datetime(2026, 12, 4, 11, 0, 10, 500000, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kueue_ray.kube.api import utcnow

DATE_RESOLUTION_S = 1.0
"""The ``Date`` header has whole seconds: the server's time was somewhere in the second it names."""


class ServerClock:
    """The offset (server minus local, seconds) from the latest answer, and "now" corrected by it."""

    def __init__(self) -> None:
        self.offset_s = 0.0
        self.known = False

    def observe(self, server_time: datetime | None, *, received: datetime | None = None) -> None:
        """An answer that carried ``Date: server_time`` arrived at local time ``received`` (now)."""
        if server_time is None:
            return
        received = received or utcnow()
        # The middle of the named second: the best estimate, off by at most half a second.
        self.offset_s = (server_time - received).total_seconds() + DATE_RESOLUTION_S / 2
        self.known = True

    def now(self, local: datetime | None = None) -> datetime:
        """The server's time now (or at local time ``local``)."""
        return (local or utcnow()) + timedelta(seconds=self.offset_s)

    def local(self, server_time: datetime) -> datetime:
        """A moment on the server's clock, on this process's clock."""
        return server_time - timedelta(seconds=self.offset_s)


_CLOCKS: dict[str, ServerClock] = {}


def server_clock(conn_id: str) -> ServerClock:
    """The clock of the API server behind Airflow connection ``conn_id`` (one per process)."""
    return _CLOCKS.setdefault(conn_id, ServerClock())
