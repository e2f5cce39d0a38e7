"""Start kubesim as a separate process with the project's Kueue setup applied, the way `make run`,
`make demo` and the end-to-end tests need it: a real HTTP server that Airflow reaches through a kubeconfig.

It always runs with a fresh bearer token (`--token`), which only the kubeconfig it writes carries: a real
cluster refuses unauthenticated requests, so every request the project makes must be seen authenticating.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
KUEUE_MANIFESTS = ROOT / "include" / "manifests" / "kueue"
QUEUE_SETUPS = {"single": "single-queue", "team": "team-queues"}


def setup_manifests(queues: str) -> list[Path]:
    """The manifests for one queue setup: the shared base files, then the chosen setup's folder."""
    if queues not in QUEUE_SETUPS:
        raise SystemExit(f"QUEUES={queues!r} is not a queue setup; use one of {sorted(QUEUE_SETUPS)}")
    base = sorted(p for p in KUEUE_MANIFESTS.glob("*.yaml"))
    return [*base, KUEUE_MANIFESTS / QUEUE_SETUPS[queues]]


@dataclass
class KubesimProcess:
    url: str
    kubeconfig: Path
    process: subprocess.Popen
    token: str
    """The bearer token every API request needs (in the kubeconfig; ``headers`` for raw HTTP)."""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_kubesim(
    workdir: Path,
    *,
    queues: str = "single",
    time_scale: float = 1.0,
    extra_apply: list[Path] | None = None,
    timeout: float = 60,
) -> KubesimProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    kubeconfig = workdir / "kubesim.kubeconfig"
    log_path = workdir / "kubesim.log"
    command = [
        sys.executable,
        "-m",
        "kubesim",
        "serve",
        "--port",
        "0",
        "--kubeconfig-out",
        str(kubeconfig),
        "--time-scale",
        str(time_scale),
        "--token",
        token,
    ]
    for path in [*setup_manifests(queues), *(extra_apply or [])]:
        command += ["--apply", str(path)]
    log = log_path.open("ab")
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kubesim exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        match = re.search(r"listening on (http://\S+)", log_path.read_text())
        if match and kubeconfig.exists():
            url = match.group(1)
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    return KubesimProcess(url=url, kubeconfig=kubeconfig, process=process, token=token)
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise TimeoutError(f"kubesim not ready within {timeout}s; see {log_path}")
