"""kubesim as `make run`, `make demo` and the e2e tests start it: a second start in the same folder finds
its own URL, and a start that cannot work says why within seconds."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from devtools.airflow import AirflowStartError, start_airflow
from devtools.kubesim_process import KubesimStartError, start_kubesim


def test_a_second_start_in_the_same_folder_finds_its_own_url_not_the_previous_ones(tmp_path):
    (tmp_path / "kubesim.log").write_text("kubesim listening on http://127.0.0.1:1\n")
    (tmp_path / "kubesim.kubeconfig").write_text("stale: a previous start's\n")

    sim = start_kubesim(tmp_path, timeout=20)
    try:
        assert sim.url != "http://127.0.0.1:1"
        assert httpx.get(f"{sim.url}/version", headers=sim.headers).status_code == 200
        assert "127.0.0.1:1\n" not in (tmp_path / "kubesim.log").read_text()
        assert sim.url in sim.kubeconfig.read_text()
    finally:
        sim.stop()
    assert sim.exited() is not None


def test_kubesim_that_exits_at_start_is_reported_at_once_with_its_log(tmp_path):
    started = time.monotonic()
    with pytest.raises(KubesimStartError) as error:
        start_kubesim(tmp_path, extra_apply=[tmp_path / "missing.yaml"], timeout=60)
    assert time.monotonic() - started < 15
    assert "kubesim exited with code 2" in str(error.value)
    assert "missing.yaml" in str(error.value)


def test_airflow_on_a_taken_port_fails_before_starting_and_names_the_holder(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(AirflowStartError, match=f"port {port} is already in use \\(pid "):
            start_airflow(tmp_path / "airflow", kubeconfig=None, port=port)
    assert time.monotonic() - started < 5
    assert not (tmp_path / "airflow" / "airflow.log").exists()
