"""Simulated durations.

Timestamps written into objects are real wall-clock UTC, so that Airflow (which runs on the real clock)
and kubesim agree on when things happened. Only durations are simulated: a RayJob that "runs for 30 s"
with ``--time-scale 10`` finishes after 3 real seconds.

``offset_s`` shifts the whole cluster's clock (timestamps in objects and the HTTP ``Date`` header), as a
control plane whose clock is off from the machine running Airflow (a laptop's docker-compose against a
remote cluster): ``POST /kubesim/faults {"clock_offset_s": -3600}``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta


class Clock:
    def __init__(self, time_scale: float = 1.0) -> None:
        if time_scale <= 0:
            raise ValueError(f"--time-scale must be > 0, got {time_scale}")
        self.time_scale = time_scale
        self.offset_s = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.offset_s)

    def timestamp(self) -> str:
        """The current time as Kubernetes writes it (RFC 3339, second precision, Z)."""
        return format_time(self.now())

    def real_seconds(self, simulated: float) -> float:
        return simulated / self.time_scale

    def simulated_since(self, start: datetime) -> float:
        """Simulated seconds elapsed since ``start``."""
        return (self.now() - start).total_seconds() * self.time_scale

    async def sleep(self, simulated: float) -> None:
        await asyncio.sleep(max(0.0, self.real_seconds(simulated)))


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
