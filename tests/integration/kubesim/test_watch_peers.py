"""GET /kubesim/stats names the client of every open watch (its address, the resource, the namespace), so a
test can count the watches one process holds from the server's side."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml


def open_watch(sim, path: str) -> socket.socket:
    """A raw HTTP/1.1 watch request, answered with its headers; the socket's local port is the peer."""
    url = urlsplit(sim.url)
    token = yaml.safe_load(Path(sim.kubeconfig).read_text())["users"][0]["user"]["token"]
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {token}\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def peer_watches(sim, peer: str) -> list[dict]:
    return [w for w in sim.stats()["open_watches"] if w["peer"] == peer]


def test_open_watches_are_listed_by_client_address_until_closed(kubesim_api):
    rayjobs = open_watch(kubesim_api, "/apis/ray.io/v1/namespaces/ray/rayjobs?watch=true")
    workloads = open_watch(kubesim_api, "/apis/kueue.x-k8s.io/v1beta2/workloads?watch=true")
    rayjobs_peer, workloads_peer = address(rayjobs), address(workloads)
    try:
        deadline = time.monotonic() + 10
        while not (peer_watches(kubesim_api, rayjobs_peer) and peer_watches(kubesim_api, workloads_peer)):
            assert time.monotonic() < deadline, kubesim_api.stats()["open_watches"]
            time.sleep(0.05)
        assert peer_watches(kubesim_api, rayjobs_peer) == [
            {
                "peer": rayjobs_peer,
                "resource": "rayjobs.ray.io",
                "namespace": "ray",
                "count": 1,
            }
        ]
        assert [(w["resource"], w["namespace"]) for w in peer_watches(kubesim_api, workloads_peer)] == [
            ("workloads.kueue.x-k8s.io", "")
        ]
    finally:
        rayjobs.close()
    deadline = time.monotonic() + 10
    while peer_watches(kubesim_api, rayjobs_peer):
        assert time.monotonic() < deadline, "a closed watch is still listed"
        time.sleep(0.05)
    assert peer_watches(kubesim_api, workloads_peer)
    workloads.close()
