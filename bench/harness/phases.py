"""The phases of a benchmark run: wall-clock boundaries with kubesim's CPU at each, so the result says
where the time went and in which phase each watch ended; and the harness's one way to wait."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], *, timeout_s: float, interval_s: float = 0.5
) -> None:
    """Poll ``predicate`` every ``interval_s`` until it holds; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(interval_s)


def kubesim_cpu_s() -> float | None:
    """CPU seconds used so far by the kubesim child of this process (None if it cannot be found): the
    server's side of each phase, to tell where a slow phase spends its time."""
    tick = os.sysconf("SC_CLK_TCK")
    for children in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                if b"kubesim" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            return round((int(fields[11]) + int(fields[12])) / tick, 2)
    return None


class Phases:
    """Wall-clock boundaries of the run's phases, with kubesim's CPU at each.

    >>> phases = Phases()
    >>> phases.mark("setup")
    >>> list(phases.durations())
    ['setup']
    """

    def __init__(self) -> None:
        self.marks: list[tuple[str, float, float, float | None]] = []
        self.mark("start")

    def mark(self, name: str) -> None:
        """``name`` ends now."""
        self.marks.append((name, time.monotonic(), time.time(), kubesim_cpu_s()))

    def durations(self) -> dict:
        return {
            name: {
                "s": round(t - prev_t, 1),
                "kubesim_cpu_s": None if cpu is None or prev_cpu is None else round(cpu - prev_cpu, 1),
            }
            for (_, prev_t, _, prev_cpu), (name, t, _, cpu) in zip(self.marks, self.marks[1:], strict=False)
        }

    def at(self, wall: float) -> str:
        """The phase a wall time falls in."""
        for (_, _, prev_wall, _), (name, _, wall_end, _) in zip(self.marks, self.marks[1:], strict=False):
            if prev_wall <= wall < wall_end:
                return name
        return "after"
