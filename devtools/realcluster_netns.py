"""A network namespace of the real-stack harness's own, where pod IPs are routable.

KubeRay dials a Ray head's dashboard (its Service's name resolves to the head pod's IP,
devtools/realcluster.py ``kuberay_command``) and its Serve proxy at the pod's IP; the API server dials the
node's kubelet for pod logs. The pod driver gives pods addresses in ``POD_CIDR``; inside this namespace that whole
range is local (``ip route add local 10.244.0.0/16 dev lo``), so a listener bound to a head pod's IP
answers there and nowhere else. The namespace has no other interface: nothing in it reaches the machine's
network, and nothing outside reaches in, except through ``relay`` (the API server's port, to the caller).

    with NetworkNamespace() as netns:
        subprocess.Popen(netns.wrap(["kube-apiserver", ...]))    # runs inside
        loop = netns.loop()                                       # an asyncio loop whose new sockets are inside
        port = netns.relay(api_port)                              # 127.0.0.1:port outside -> 127.0.0.1:api_port inside

This needs CAP_SYS_ADMIN (``unshare --net``, ``setns``), as the harness's mount namespace already does.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import socket
import subprocess
import threading

POD_CIDR = "10.244.0.0/16"
NODE_IP = "10.0.0.10"
"""The fake node's address, local in the namespace too: the API server reads pod logs from its kubelet."""
CLONE_NEWNET = 0x40000000
_SETUP = (
    f"ip link set lo up && ip route add local {POD_CIDR} dev lo && ip route add local {NODE_IP}/32 dev lo"
    " && echo ready && exec sleep infinity"
)


class NetworkNamespace:
    """A namespace held open by a ``sleep`` process; processes join it with ``nsenter`` and the
    harness's own sockets through a thread that ``setns``-ed into it (``loop``)."""

    def __init__(self) -> None:
        self._holder: subprocess.Popen | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> NetworkNamespace:
        self._holder = subprocess.Popen(
            ["unshare", "--net", "sh", "-c", _SETUP],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if self._holder.stdout.readline().strip() != "ready":
            self._holder.wait()
            raise OSError(f"`unshare --net` failed: {self._holder.stderr.read().strip()}")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self.call(_cancel_others(), timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        self._holder.kill()
        self._holder.wait()

    @property
    def path(self) -> str:
        return f"/proc/{self._holder.pid}/ns/net"

    def wrap(self, argv: list) -> list:
        """``argv`` run inside the namespace."""
        return ["nsenter", f"--net={self.path}", *argv]

    def loop(self) -> asyncio.AbstractEventLoop:
        """An event loop running in a thread of this process that joined the namespace: every socket its
        coroutines open (listeners on pod IPs, connections to 127.0.0.1 inside) belongs to the namespace.
        Sockets opened elsewhere and handed to it stay in theirs (``relay``'s listener)."""
        if self._loop is None:
            ready: dict = {}
            started = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(ready, started), name="netns", daemon=True
            )
            self._thread.start()
            started.wait()
            if "error" in ready:
                raise OSError(ready["error"], f"setns into {self.path}: {os.strerror(ready['error'])}")
            self._loop = ready["loop"]
        return self._loop

    def _run(self, ready: dict, started: threading.Event) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:  # this thread only: the rest of the process stays outside
                ready["error"] = ctypes.get_errno()
                started.set()
                return
        finally:
            os.close(fd)
        loop = asyncio.new_event_loop()
        ready["loop"] = loop
        started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    def call(self, coro, timeout: float = 30.0):
        """Run ``coro`` on ``loop()`` and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop()).result(timeout)

    def relay(self, port: int) -> int:
        """A port on the caller's 127.0.0.1 whose connections are relayed to ``port`` on the namespace's
        127.0.0.1 (the API server's, for clients outside: tests, Airflow, the pod driver)."""
        listener = socket.socket()  # opened here, outside the namespace
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.setblocking(False)
        self.call(_serve_relay(listener, port))
        return listener.getsockname()[1]


async def _cancel_others() -> None:
    """Ends the relayed connections still open (watches) before the loop stops."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _serve_relay(listener: socket.socket, port: int) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            inner_reader, inner_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, inner_writer), _pipe(inner_reader, writer))
        except asyncio.CancelledError:
            pass  # the stack stops (_cancel_others): ending here keeps asyncio's stream callback quiet
        finally:
            for each in (writer, inner_writer):
                with contextlib.suppress(RuntimeError):  # the loop already closed under a last connection
                    each.close()

    await asyncio.start_server(handle, sock=listener)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
            else:
                writer.close()
