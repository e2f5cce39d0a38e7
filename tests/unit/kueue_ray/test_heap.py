"""Giving freed memory back to the system after a list (``kueue_ray.kube.heap``)."""

import asyncio
import sys
from pathlib import Path

import pytest
from kueue_ray.kube import heap


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim, /proc")
def test_trim_returns_memory_freed_between_kept_objects():
    """What a list leaves: many objects freed, every tenth kept, so no free memory is at the heap's top.
    The process keeps it until trimmed."""
    objects = [bytes(4000) + str(i).encode() for i in range(10_000)]
    kept = objects[::10]
    del objects
    before = rss_mib()
    assert heap.trim()
    assert before - rss_mib() > 15, "the ~35 MiB freed among the kept objects went back to the system"
    assert len(kept) == 1_000


def test_trims_due_meanwhile_are_one():
    """The lists of a process's resources end together: one trim after the first, not one per list."""
    trims: list[float] = []

    async def scenario():
        loop = asyncio.get_running_loop()
        for _ in range(3):
            heap.trim_soon(0.05, lambda: trims.append(loop.time()))
        await asyncio.sleep(0.1)
        assert len(trims) == 1
        heap.trim_soon(0.05, lambda: trims.append(loop.time()))  # a later list: a later trim
        await asyncio.sleep(0.1)

    asyncio.run(scenario())
    assert len(trims) == 2


def test_no_delay_means_no_trim():
    trims: list[int] = []

    async def scenario():
        heap.trim_soon(None, lambda: trims.append(1))
        await asyncio.sleep(0.01)

    asyncio.run(scenario())
    assert trims == []
