"""run_kubesim(): a kubesim for a test, in a thread of this process or as a subprocess.

"thread" is fast and exposes the in-process Cluster for white-box checks; "subprocess" runs exactly
what a developer runs (`python -m kubesim serve`), so the CLI and the kubeconfig it writes are tested too.
Either way the caller gets a URL and a kubeconfig path and talks HTTP through the official clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubesim.apiserver.clusters import start_clusters
from kubesim.apiserver.server import start_server, write_kubeconfig
from kubesim.cluster import CONTROLLERS, Cluster
from kubesim.resources import CRDS_DIR

READY_TIMEOUT_S = 60.0


@dataclass
class Kubesim:
    """A running kubesim. ``cluster`` is the in-process Cluster (thread mode) or None (subprocess);
    ``token`` the bearer token it requires (None: it accepts any request)."""

    url: str
    kubeconfig: str
    cluster: Cluster | None = None
    token: str | None = None
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)

    def stats(self) -> dict:
        return self._request("GET", "/kubesim/stats")

    def requests(self) -> list[dict]:
        return self._request("GET", "/kubesim/requests")

    def clear_requests(self) -> None:
        self._request("DELETE", "/kubesim/requests")

    def set_faults(self, **settings) -> dict:
        return self._request("POST", "/kubesim/faults", settings)

    def reset_faults(self) -> dict:
        return self._request("DELETE", "/kubesim/faults")

    def refuse(self, code: int, *, verbs=(), resources=(), **rule) -> dict:
        """Answer matching requests with ``code`` from now on: one ``faults.FaultRule`` (with
        ``namespace``, ``count``, ``seconds``, ``retry_after_s``, ``user``, ``message``) replacing the rules
        set before; ``set_faults(rules=[...])`` sets several."""
        return self.set_faults(
            rules=[{"code": code, "verbs": list(verbs), "resources": list(resources), **rule}]
        )

    def require_token(self, token: str | None) -> None:
        """The server now requires ``token`` (None: accepts anyone): clients still holding the old one
        are answered 401, as after a credential rotation. The kubeconfig is left as it is
        (``write_kubeconfig_token`` gives clients the new one)."""
        self._request("POST", "/kubesim/auth", {"token": token})
        self.token = token

    def add_user(self, token: str, user: str) -> None:
        """Requests carrying ``token`` authenticate as ``user`` (e.g. ``system:serviceaccount:ns:name``),
        which the request log then names."""
        self._request("POST", "/kubesim/users", {token: user})

    def write_kubeconfig_token(self, token: str | None) -> None:
        """Rewrite the kubeconfig with ``token`` (None: the default one), as a credential plugin or a
        Secret rotation refreshes what clients load."""
        write_kubeconfig(self.kubeconfig, self.url, token)

    def call(self, fn: Callable, *args):
        """Run ``fn(*args)`` on the cluster's event loop (thread mode): the store is not thread-safe."""
        if self._loop is None:
            raise RuntimeError("call() needs mode='thread'")

        async def invoke():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(invoke(), self._loop).result(timeout=30)

    def _request(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())


@contextlib.contextmanager
def run_kubesim(
    *,
    crds_dir: str | Path | None = CRDS_DIR,
    apply: Iterable[str | Path] = (),
    time_scale: float = 1.0,
    mode: str = "thread",
    kubeconfig_path: str | Path | None = None,
    controllers: Iterable[str] = CONTROLLERS,
    kueue_config: str | Path | None = None,
    token: str | None = None,
) -> Iterator[Kubesim]:
    """Start kubesim, wait until GET /readyz answers, yield it, stop it.

    ``controllers`` (thread mode only) lets API-level tests run the bare API server with no controller
    reacting to their objects; the subprocess always runs the CLI, which runs them all. ``kueue_config``
    is a Kueue Configuration file (``--kueue-config``), e.g. a short waitForPodsReady timeout. ``token``
    makes every API request need that bearer token (the kubeconfig carries it), as ``--token`` does.
    """
    with contextlib.ExitStack() as stack:
        if kubeconfig_path is None:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="kubesim-"))
            kubeconfig_path = Path(directory) / "kubeconfig"
        if mode == "thread":
            server = _run_in_thread(
                crds_dir,
                list(apply),
                time_scale,
                Path(kubeconfig_path),
                tuple(controllers),
                kueue_config,
                token,
            )
        elif mode == "subprocess":
            if tuple(controllers) != CONTROLLERS:
                raise ValueError("mode='subprocess' runs the CLI, which always runs every controller")
            server = _run_subprocess(
                crds_dir, list(apply), time_scale, Path(kubeconfig_path), kueue_config, token
            )
        else:
            raise ValueError(f"mode must be 'thread' or 'subprocess', not {mode!r}")
        yield stack.enter_context(server)


@contextlib.contextmanager
def _run_in_thread(
    crds_dir,
    apply: list,
    time_scale: float,
    kubeconfig_path: Path,
    controllers: tuple[str, ...],
    kueue_config,
    token: str | None,
) -> Iterator[Kubesim]:
    from kubesim.kueue.config import KueueConfig

    config = KueueConfig.load(kueue_config) if kueue_config else None

    async def start():
        cluster = Cluster(
            crds_dir=crds_dir, time_scale=time_scale, controllers=controllers, kueue_config=config
        )
        return await start_server(cluster, host="127.0.0.1", port=0, apply=apply, token=token)

    with _in_thread(start) as (server, loop):
        write_kubeconfig(kubeconfig_path, server.url, token)
        _wait_ready(server.url, deadline=time.monotonic() + READY_TIMEOUT_S)
        yield Kubesim(server.url, str(kubeconfig_path), server.cluster, token, loop)


@contextlib.contextmanager
def _in_thread(start: Callable[[], Awaitable[Any]]) -> Iterator[tuple[Any, asyncio.AbstractEventLoop]]:
    """Run what ``start()`` starts (a server, or a manager and its workers: anything with an async
    ``stop``) on an event loop in a thread of its own; yield it and its loop once started; stop it on exit."""
    loop = asyncio.new_event_loop()
    started: Future = Future()
    stopping = asyncio.Event()

    async def main() -> None:
        try:
            running = await start()
        except BaseException as exc:
            started.set_exception(exc)
            return
        started.set_result(running)
        try:
            await stopping.wait()
        finally:
            await running.stop()
            await _cancel_leftover_tasks()  # e.g. handlers of watches a client left open, as asyncio.run does

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), name="kubesim", daemon=True)
    thread.start()
    try:
        yield started.result(timeout=READY_TIMEOUT_S), loop
    finally:
        if not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout=30)
        if not thread.is_alive():
            loop.close()


@dataclass
class KubesimClusters:
    """A MultiKueue manager and its workers (``kubesim.apiserver.clusters``), each a ``Kubesim``."""

    manager: Kubesim
    workers: dict[str, Kubesim]


@contextlib.contextmanager
def run_kubesim_clusters(
    *,
    workers: int = 2,
    apply: Iterable[str | Path] = (),
    worker_apply: Iterable[str | Path] = (),
    time_scale: float = 1.0,
    kueue_config: str | Path | None = None,
    token: str | None = None,
    tls: bool = False,
) -> Iterator[KubesimClusters]:
    """Start a manager and ``workers`` workers in a thread of this process, each with its own kubeconfig
    (the workers' beside the manager's: ``kubesim.worker1.kubeconfig``, ...), wait until all answer
    /readyz, yield them, stop them. ``apply`` goes to the manager, ``worker_apply`` to every worker; ``token``
    and ``tls`` are every cluster's, as ``--token`` and ``--tls``."""
    from kubesim.apiserver.clusters import worker_kubeconfig_path
    from kubesim.kueue.config import KueueConfig

    config = KueueConfig.load(kueue_config) if kueue_config else None

    async def start():
        return await start_clusters(
            workers=workers,
            time_scale=time_scale,
            kueue_config=config,
            apply=list(apply),
            worker_apply=list(worker_apply),
            token=token,
            tls=tls,
        )

    with tempfile.TemporaryDirectory(prefix="kubesim-") as directory, _in_thread(start) as (running, loop):
        path = Path(directory) / "kubesim.kubeconfig"
        handles = {}
        for name, server in {"": running.manager, **running.workers}.items():
            target = worker_kubeconfig_path(path, name) if name else path
            write_kubeconfig(target, server.url, token, server.ca_pem)
            if server.ca_pem is None:
                _wait_ready(server.url, deadline=time.monotonic() + READY_TIMEOUT_S)
            handles[name] = Kubesim(server.url, str(target), server.cluster, token, loop)
        manager = handles.pop("")
        yield KubesimClusters(manager, handles)


def serve_command(
    kubeconfig_out: str | Path,
    *,
    time_scale: float,
    crds_dir: str | Path | None = None,
    apply: Iterable[str | Path] = (),
    kueue_config: str | Path | None = None,
    token: str | None = None,
    tls: bool = False,
) -> list[str]:
    """The ``python -m kubesim serve`` command line on a free port, for whoever runs kubesim as a process.

    >>> serve_command("k.yaml", time_scale=10, token="t")[3:]
    ['serve', '--port', '0', '--kubeconfig-out', 'k.yaml', '--time-scale', '10', '--token', 't']
    """
    command = [
        sys.executable,
        "-m",
        "kubesim",
        "serve",
        "--port",
        "0",
        "--kubeconfig-out",
        str(kubeconfig_out),
    ]
    command += ["--time-scale", str(time_scale)]
    if crds_dir is not None:
        command += ["--crds", str(crds_dir)]
    for path in apply:
        command += ["--apply", str(path)]
    if kueue_config is not None:
        command += ["--kueue-config", str(kueue_config)]
    if token is not None:
        command += ["--token", token]
    if tls:
        command.append("--tls")
    return command


def stop_process(process: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM, then SIGKILL if ``process`` has not exited within ``grace_s``; returns once it is gone."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def _run_subprocess(
    crds_dir, apply: list, time_scale: float, kubeconfig_path: Path, kueue_config, token: str | None
) -> Iterator[Kubesim]:
    """Run the CLI; on a clean exit of the ``with`` body, also require a clean exit of kubesim on SIGTERM."""
    command = serve_command(
        kubeconfig_path,
        time_scale=time_scale,
        crds_dir=crds_dir,
        apply=apply,
        kueue_config=kueue_config or None,
        token=token,
    )
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1]
    )
    try:
        line = process.stdout.readline()
        if not line.startswith("kubesim listening on "):
            process.wait(timeout=10)
            raise RuntimeError(f"kubesim did not start (exit {process.returncode}): {line!r}")
        url = line.split()[-1]
        _wait_ready(url, deadline=time.monotonic() + READY_TIMEOUT_S)
        yield Kubesim(url, str(kubeconfig_path), token=token)
    finally:
        stop_process(process)
        process.stdout.close()
    if process.returncode != 0:
        raise RuntimeError(f"kubesim exited with code {process.returncode} on SIGTERM")


async def _cancel_leftover_tasks() -> None:
    leftover = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in leftover:
        task.cancel()
    await asyncio.gather(*leftover, return_exceptions=True)


def _wait_ready(url: str, *, deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)
