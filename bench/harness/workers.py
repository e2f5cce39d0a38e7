"""The processes under measurement: children speaking the line protocol (``bench.harness.protocol``) of
``bench.trigger_worker`` / ``bench.polling_worker``, given a spec file and the ``kubernetes_default``
connection to kubesim, and one fresh kubesim per run that ends every worker still running when the run
ends or fails."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.harness.protocol import PREFIX
from kubesim.testing import run_kubesim

ROOT = Path(__file__).resolve().parents[2]
LOG_DIR = Path(tempfile.gettempdir()) / "bench-trigger"
"""Where each run's worker logs stay after it (``n<N>/trigger.log``, ``poll.log``, ``resync.log``, ...)."""
REPLY_TIMEOUT_S = 600.0

LIVE_WORKERS: list[Worker] = []
"""Every worker started, so `in_kubesim` can end them all if the harness fails half-way."""


class Worker:
    """A child process speaking the line protocol (``protocol``) of ``bench.trigger_worker`` /
    ``bench.polling_worker``."""

    def __init__(self, module: str, spec_path: Path, env: dict, log_path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, str(spec_path), str(log_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.fired: dict[str, tuple[float, str]] = {}
        self.hub_seen: dict[str, float] = {}
        self.stalls: list[tuple[float, float]] = []
        self.watch_opens: list[dict] = []
        self.watch_ends: list[dict] = []
        self.replies: asyncio.Queue[dict] = asyncio.Queue()
        LIVE_WORKERS.append(self)

    async def start(self) -> dict:
        loop = asyncio.get_running_loop()

        def read() -> None:
            for line in self.process.stdout:
                if not line.startswith(PREFIX):
                    continue
                record = json.loads(line[len(PREFIX) :])
                if "fired" in record:
                    self.fired[record["fired"]] = (record["t"], record["status"])
                elif "stall" in record:
                    self.stalls.append((record["stall"]["t"], record["stall"]["s"]))
                elif "hub_seen" in record:
                    self.hub_seen[record["hub_seen"]] = record["t"]
                elif "watch_open" in record:
                    self.watch_opens.append(record["watch_open"])
                elif "watch_end" in record:
                    self.watch_ends.append(record["watch_end"])
                else:
                    loop.call_soon_threadsafe(self.replies.put_nowait, record)

        # A daemon thread, not asyncio.to_thread: a worker that never exits must not hang the harness.
        threading.Thread(target=read, daemon=True).start()
        return await asyncio.wait_for(self.replies.get(), REPLY_TIMEOUT_S)

    async def usage(self) -> dict:
        """The worker's CPU and RSS so far; a busy loop (1,000 pollers) may take a while to answer."""
        self.process.stdin.write("usage\n")
        self.process.stdin.flush()
        return await asyncio.wait_for(self.replies.get(), REPLY_TIMEOUT_S)

    async def idle(
        self, *, window_s: float = 1.0, busy_below: float = 0.05, timeout_s: float = 120.0
    ) -> bool:
        """Until the worker used less than ``busy_below`` of a CPU over ``window_s`` (its triggers all wait):
        kubesim quiet alone is not enough, as a worker still busy telling thousands of log lines sends no
        request meanwhile. False if it never was within ``timeout_s``. Read from /proc, not asked."""
        process = psutil.Process(self.process.pid)
        deadline = time.monotonic() + timeout_s
        before = sum(process.cpu_times()[:2])
        while time.monotonic() < deadline:
            await asyncio.sleep(window_s)
            now = sum(process.cpu_times()[:2])
            if now - before < busy_below * window_s:
                return True
            before = now
        return False

    async def stop(self) -> dict:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        final = await asyncio.wait_for(self.replies.get(), REPLY_TIMEOUT_S)
        self.process.wait(timeout=60)
        return final

    def kill(self) -> None:
        """End the worker if it is still running (the harness failed half-way)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def statuses(self) -> dict[str, int]:
        """How many triggers fired with each status."""
        counts: dict[str, int] = {}
        for _, status in self.fired.values():
            counts[status] = counts.get(status, 0) + 1
        return counts

    def latencies(self, seen: dict[str, float]) -> list[float]:
        """Each fired trigger's event time minus when a raw watch ``seen`` its object's terminal status."""
        return [self.fired[name][0] - seen[name] for name in self.fired if name in seen]

    def stalled(self, since: float, until: float) -> dict:
        """The event loop's passes longer than ``STALL_REPORT_S`` that ended between two wall times: how
        many, their total and the longest, in seconds."""
        within = [s for t, s in self.stalls if since <= t <= until]
        return {"count": len(within), "total_s": round(sum(within), 2), "max_s": max(within, default=0.0)}

    def detection_parts(self, seen: dict[str, float]) -> tuple[list[float], list[float]]:
        """``latencies`` in two parts, for the triggers that fired: a raw watch ``seen`` → this worker's hub
        saw the terminal status (delivery), and the hub saw it → the TriggerEvent (the trigger's part)."""
        both = [name for name in self.fired if name in seen and name in self.hub_seen]
        return (
            [self.hub_seen[name] - seen[name] for name in both],
            [self.fired[name][0] - self.hub_seen[name] for name in both],
        )


def log_warnings(log_path: Path, limit: int = 40) -> dict:
    """WARNING and ERROR lines of a worker's log (the first ``limit``), for the result JSON."""
    if not log_path.exists():
        return {"count": 0, "lines": []}
    lines = [
        line
        for line in log_path.read_text(errors="replace").splitlines()
        if " WARNING " in line or " ERROR " in line
    ]
    return {"count": len(lines), "lines": lines[:limit]}


def kubeconfig_for(kubeconfig: str, token: str, path: Path) -> str:
    """A copy of ``kubeconfig`` whose user presents ``token`` instead: a worker of its own identity in
    kubesim's request log (``POST /kubesim/users`` names it), so its requests can be told from the others'."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return str(path)


def worker_env(kubeconfig: str, *, plugins: Path | None = ROOT / "plugins") -> dict:
    """This environment with the ``kubernetes_default`` connection to kubesim, and the plugin code under
    test on the path (``plugins`` None: the caller sets ``PYTHONPATH`` per worker)."""
    env = {
        **os.environ,
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
        ),
    }
    if plugins is not None:
        env["PYTHONPATH"] = f"{plugins}:{ROOT}"
    return env


def fresh_workdir(log_dir: Path, name: str) -> Path:
    """``log_dir``/``name``, emptied: the run's spec files and worker logs, kept after it."""
    workdir = Path(log_dir) / name
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    return workdir


def in_kubesim(measure: Callable[[str, str], Coroutine[Any, Any, dict]], *, time_scale: float = 1.0) -> dict:
    """``measure(url, kubeconfig)`` against a fresh kubesim subprocess; every worker still running at the
    end (the harness failed half-way) is killed."""
    try:
        with run_kubesim(mode="subprocess", time_scale=time_scale) as sim:
            return asyncio.run(measure(sim.url, sim.kubeconfig))
    finally:
        while LIVE_WORKERS:
            LIVE_WORKERS.pop().kill()
