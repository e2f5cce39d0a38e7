"""Start a cluster and its HTTP server on the running loop; write the kubeconfig clients load.

Shared by the CLI and the in-process test harness so both boot in the same order: controllers installed,
manifests applied (through the admission hooks), then the port opened, so a client that can connect
sees a ready cluster.
"""

from __future__ import annotations

import base64
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from aiohttp import web

from kubesim.apiserver.app import make_app
from kubesim.apiserver.tls import issue
from kubesim.cluster import Cluster

KUBECONFIG_TOKEN = "kubesim-token"
"""What the kubeconfig carries when kubesim runs without ``--token`` (any token is then accepted)."""


@dataclass
class RunningServer:
    cluster: Cluster
    runner: web.AppRunner
    url: str
    ca_pem: bytes | None = None
    """With TLS: the CA clients must trust (``certificate-authority-data`` of the kubeconfig)."""

    async def stop(self) -> None:
        await self.runner.cleanup()
        await self.cluster.stop()


async def start_server(
    cluster: Cluster,
    *,
    host: str,
    port: int,
    apply: Iterable[str | Path] = (),
    token: str | None = None,
    tls: bool = False,
) -> RunningServer:
    """``token``: require ``Authorization: Bearer <token>`` on every API request (``faults.Auth``).
    ``tls``: serve HTTPS with a certificate from a CA made for this start (``kubesim.apiserver.tls``)."""
    certificate = issue(host) if tls else None
    await cluster.start()
    try:
        for path in apply:
            cluster.apply(path)
        # Open watches and log follows never finish on their own: give them little time on shutdown.
        runner = web.AppRunner(
            make_app(cluster, token=token), access_log=None, handle_signals=False, shutdown_timeout=1.0
        )
        await runner.setup()
        ssl_context = certificate.server_context() if certificate is not None else None
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
    except BaseException:
        await cluster.stop()
        raise
    bound_port = runner.addresses[0][1]
    scheme = "https" if certificate is not None else "http"
    return RunningServer(
        cluster,
        runner,
        f"{scheme}://{host}:{bound_port}",
        ca_pem=certificate.ca_pem if certificate is not None else None,
    )


def kubeconfig(url: str, token: str | None = None, ca_pem: bytes | None = None) -> dict:
    cluster: dict = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubesim", "cluster": cluster}],
        "users": [{"name": "kubesim", "user": {"token": token or KUBECONFIG_TOKEN}}],
        "contexts": [
            {"name": "kubesim", "context": {"cluster": "kubesim", "user": "kubesim", "namespace": "default"}}
        ],
        "current-context": "kubesim",
        "preferences": {},
    }


def write_kubeconfig(
    path: str | Path, url: str, token: str | None = None, ca_pem: bytes | None = None
) -> Path:
    """Write atomically: a client polling for the file (or re-reading it for fresh credentials) never
    reads half of it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    with os.fdopen(fd, "w") as fh:
        yaml.safe_dump(kubeconfig(url, token, ca_pem), fh, sort_keys=False)
    os.replace(tmp, target)
    return target
