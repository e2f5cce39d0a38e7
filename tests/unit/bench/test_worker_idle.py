"""A benchmark worker counts as settled only once it is idle: kubesim quiet alone once let the "after
startup" snapshot come while 3,000 triggers were still busy logging (bench/README.md, run AJ)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from bench.harness.workers import Worker

BUSY_THEN_IDLE = """
import sys, time
while time.process_time() < 1.0:
    pass
open(sys.argv[1], "w").write("busy no more")
time.sleep(60)
"""


def worker_running(code: str, *args: str) -> Worker:
    """A Worker around a plain child process: ``idle`` reads only its process's CPU time."""
    worker = Worker.__new__(Worker)
    worker.process = subprocess.Popen([sys.executable, "-c", code, *args])
    return worker


def test_idle_returns_only_once_the_worker_stopped_using_the_cpu(tmp_path: Path):
    marker = tmp_path / "marker"
    worker = worker_running(BUSY_THEN_IDLE, str(marker))
    try:
        assert asyncio.run(worker.idle(window_s=0.3, timeout_s=30)) is True
        assert marker.exists(), "idle while the worker was still busy"
    finally:
        worker.process.kill()


def test_a_worker_that_never_rests_is_reported_busy():
    worker = worker_running("while True: pass")
    try:
        assert asyncio.run(worker.idle(window_s=0.3, timeout_s=1.5)) is False
    finally:
        worker.process.kill()
