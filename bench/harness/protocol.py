"""The line protocol between a benchmark and its measured worker processes (``bench.trigger_worker``,
``bench.polling_worker``), the worker's side: records to the parent on the real stdout, each line marked
with ``PREFIX`` (everything else the process writes goes to its log file), commands from the parent on
stdin, and the process's own CPU and memory. ``bench.harness.workers`` is the parent's side.

Imports nothing of Airflow or the plugin: a worker's figures start from what it measures.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
from pathlib import Path

DONE = frozenset({"Complete", "Failed"})
"""A RayJob's terminal ``status.jobDeploymentStatus`` values, as every benchmark's raw watch and poller
tell them."""


def usage() -> dict:
    """CPU seconds (user + system) and RSS of this process, current and peak, from /proc.

    The peak is ``VmHWM``, not getrusage's ``ru_maxrss``: Linux carries a process's high-water mark across
    ``execve`` from the memory it had before, which a child starts with its parent's whole RSS, so every
    worker the three-triggerer benchmark started after its first side (its parent then held ~1 GiB)
    reported a peak of 1,061.5 MiB (bench/README.md, run AG)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    kib = {"VmRSS:": 0, "VmHWM:": 0}
    for line in Path("/proc/self/status").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] in kib:
            kib[fields[0]] = int(fields[1])
    return {
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 2),
        "peak_rss_mib": round(kib["VmHWM:"] / 1024, 1),
        "rss_mib": round(kib["VmRSS:"] / 1024, 1),
    }


PREFIX = "@bench "
"""Marks protocol lines; anything else on the channel (a library printing) is ignored by the parent."""
_channel = sys.stdout


def take_stdout(log_path: str) -> None:
    """Keep the real stdout for the protocol and send everything else written to fd 1 or 2 (Airflow's
    structlog prints trigger logs to stdout) into the log file."""
    global _channel
    _channel = os.fdopen(os.dup(1), "w")
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = sys.stderr = open(log_path, "a")  # noqa: SIM115 - lives as long as the process


def emit(record: dict) -> None:
    _channel.write(PREFIX + json.dumps(record) + "\n")
    _channel.flush()


def read_commands(loop: asyncio.AbstractEventLoop, commands: asyncio.Queue) -> None:
    """Feed stdin lines into ``commands`` (from a thread); EOF means quit."""
    for line in sys.stdin:
        loop.call_soon_threadsafe(commands.put_nowait, line.strip())
    loop.call_soon_threadsafe(commands.put_nowait, "quit")
