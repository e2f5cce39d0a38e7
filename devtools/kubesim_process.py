"""Start kubesim as a separate process with the project's Kueue setup applied, the way `make run`,
`make demo` and the end-to-end tests need it: a real HTTP server that Airflow reaches through a kubeconfig.

It always runs with a fresh bearer token (`--token`), which only the kubeconfig it writes carries: a real
cluster refuses unauthenticated requests, so every request the project makes must be seen authenticating.
With ``tls`` it also serves HTTPS with its own CA (`--tls`), as `make run` does so that kubectl, which sends
a bearer token only over HTTPS, works with its kubeconfig.
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import signal
import ssl
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from kubesim.apiserver.clusters import worker_kubeconfig_path
from kubesim.apiserver.faults import DEFAULT_USER
from kubesim.testing import serve_command

ROOT = Path(__file__).resolve().parent.parent
KUEUE_MANIFESTS = ROOT / "include" / "manifests" / "kueue"
ALL_SETUPS = "all"
"""Every queue setup of ``KUEUE_MANIFESTS`` side by side (they share no names), as `make run` installs them."""
LISTENING = re.compile(r"kubesim listening on (https?://\S+)")


def queue_setups(manifests: Path = KUEUE_MANIFESTS) -> list[str]:
    """The queue setups of one cluster: the sub-folders of the Kueue manifests holding YAML (each a
    ClusterQueue/LocalQueue set). ``multikueue/`` holds folders for several clusters instead
    (``multikueue_manifests``), so it is none of them."""
    return sorted(p.name for p in manifests.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


def setup_manifests(queues: str = ALL_SETUPS, manifests: Path = KUEUE_MANIFESTS) -> list[Path]:
    """What to apply for ``queues`` (a setup folder's name, or ``all``): the shared base files (namespace,
    flavors, priority classes, RBAC), then the setup folder(s)."""
    setups = queue_setups(manifests)
    if queues == ALL_SETUPS:
        chosen = setups
    elif queues in setups:
        chosen = [queues]
    else:
        raise ValueError(
            f"queue setup {queues!r} is not a folder of {manifests}; use one of {setups} or {ALL_SETUPS!r}"
        )
    return [*sorted(manifests.glob("*.yaml")), *(manifests / name for name in chosen)]


def local_queues(paths: Iterable[Path]) -> list[str]:
    """``namespace/name`` of every LocalQueue the given manifest files and folders create."""
    found = []
    for path in paths:
        for file in sorted(path.glob("*.yaml")) if path.is_dir() else [path]:
            for doc in yaml.safe_load_all(file.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "LocalQueue":
                    metadata = doc.get("metadata") or {}
                    found.append(f"{metadata.get('namespace', 'default')}/{metadata.get('name')}")
    return found


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, for an error message ("" when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class KubesimProcess:
    url: str
    kubeconfig: Path
    process: subprocess.Popen
    log_path: Path
    token: str
    """The bearer token every API request needs (in the kubeconfig; ``headers`` for raw HTTP)."""
    workers: dict[str, Path] = field(default_factory=dict)
    """With ``workers``: each worker cluster's name (worker1, ...) and kubeconfig; this one is their
    MultiKueue manager."""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """What raw HTTP clients (httpx ``verify=``) need to trust kubesim: its CA when it serves HTTPS."""
        return trust(self.kubeconfig)

    def exited(self) -> int | None:
        """The exit code once kubesim has exited, else None."""
        return self.process.poll()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class KubesimStartError(RuntimeError):
    """kubesim exited or never answered; the message ends with the last lines of its log."""


def trust(kubeconfig: Path) -> ssl.SSLContext | bool:
    """An SSL context trusting the CA in ``kubeconfig`` (``certificate-authority-data``); True (the
    system's CAs, irrelevant for plain HTTP) when it names none."""
    cluster = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]
    ca = cluster.get("certificate-authority-data")
    if not ca:
        return True
    return ssl.create_default_context(cadata=base64.b64decode(ca).decode())


def service_account_token(user: str = DEFAULT_USER, lifetime_s: float = 7 * 86400) -> str:
    """A fresh bearer token shaped as `kubectl create token` mints one: a JWT naming its user (``sub``) and
    expiry (``exp``), so clients can tell whose it is and until when, as with a real cluster's. kubesim only
    compares it; the random signature is its secret."""

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    claims = {"iss": "kubesim", "sub": user, "exp": int(time.time() + lifetime_s)}
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.{secrets.token_hex(16)}"


def start_kubesim(
    workdir: Path,
    *,
    queues: str = ALL_SETUPS,
    time_scale: float = 1.0,
    extra_apply: list[Path] | None = None,
    kueue_config: Path | None = None,
    tls: bool = False,
    timeout: float = 60,
    workers: int = 0,
    worker_apply: list[Path] | None = None,
) -> KubesimProcess:
    """Start kubesim with the Kueue base manifests and ``queues`` applied; return once it answers.

    With ``workers``, it also serves that many worker clusters (``--workers``: worker1, ...), each with
    ``worker_apply`` created in it, and runs Kueue's MultiKueue on the first, their manager.

    Its log and kubeconfig in ``workdir`` are this start's own: both are replaced, so a previous start's
    URL (dead now) can never be mistaken for this one's.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    token = service_account_token()
    kubeconfig = workdir / "kubesim.kubeconfig"
    log_path = workdir / "kubesim.log"
    kubeconfig.unlink(missing_ok=True)
    command = serve_command(
        kubeconfig,
        time_scale=time_scale,
        apply=[*setup_manifests(queues), *(extra_apply or [])],
        kueue_config=kueue_config,
        token=token,
        tls=tls,
    )
    if workers:
        command += ["--workers", str(workers)]
        for path in worker_apply or []:
            command += ["--worker-apply", str(path)]
    worker_kubeconfigs = {
        f"worker{i}": worker_kubeconfig_path(kubeconfig, f"worker{i}") for i in range(1, workers + 1)
    }
    for path in worker_kubeconfigs.values():
        path.unlink(missing_ok=True)
    with log_path.open("wb") as log:
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
            raise KubesimStartError(
                f"kubesim exited with code {process.returncode}; last lines of {log_path}:\n{log_tail(log_path)}"
            )
        match = LISTENING.search(log_path.read_text(errors="replace"))
        if match and kubeconfig.exists() and all(path.exists() for path in worker_kubeconfigs.values()):
            url = match.group(1)
            try:
                if httpx.get(f"{url}/readyz", timeout=2, verify=trust(kubeconfig)).status_code == 200:
                    return KubesimProcess(
                        url=url,
                        kubeconfig=kubeconfig,
                        process=process,
                        log_path=log_path,
                        token=token,
                        workers=worker_kubeconfigs,
                    )
            except httpx.HTTPError:
                pass
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    raise KubesimStartError(
        f"kubesim did not answer within {timeout:g}s; last lines of {log_path}:\n{log_tail(log_path)}"
    )
