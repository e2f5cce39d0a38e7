"""Start a cluster and its HTTP server on the running loop; write the kubeconfig clients load.

Shared by the CLI and the in-process test harness so both boot in the same order: controllers installed,
manifests applied (through the admission hooks), then the port opened, so a client that can connect
sees a ready cluster.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from aiohttp import web

from kubesim.api import make_app
from kubesim.cluster import Cluster

KUBECONFIG_TOKEN = "kubesim-token"
"""What the kubeconfig carries when kubesim runs without ``--token`` (any token is then accepted)."""


@dataclass
class RunningServer:
    cluster: Cluster
    runner: web.AppRunner
    url: str

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.cluster.stop()


async def start_server(
    cluster: Cluster, *, host: str, port: int, apply: Iterable[str | Path] = (), token: str | None = None
) -> RunningServer:
    """``token``: require ``Authorization: Bearer <token>`` on every API request (``faults.Auth``)."""
    await cluster.start()
    try:
        for path in apply:
            cluster.apply(path)
        # Open watches and log follows never finish on their own: give them little time on shutdown.
        runner = web.AppRunner(
            make_app(cluster, token=token), access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await cluster.stop()
        raise
    bound_port = runner.addresses[0][1]
    return RunningServer(cluster, runner, f"http://{host}:{bound_port}")


def kubeconfig(url: str, token: str | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesim", "cluster": {"server": url}}],
        "users": [{"name": "kubesim", "user": {"token": token or KUBECONFIG_TOKEN}}],
        "contexts": [
            {"name": "kubesim", "context": {"cluster": "kubesim", "user": "kubesim", "namespace": "default"}}
        ],
        "current-context": "kubesim",
        "preferences": {},
    }


def write_kubeconfig(path: str | Path, url: str, token: str | None = None) -> Path:
    """Write atomically: a client polling for the file (or re-reading it for fresh credentials) never
    reads half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(kubeconfig(url, token), fh, sort_keys=False)
    os.replace(tmp, target)
    return target
