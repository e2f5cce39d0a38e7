"""`python -m kubesim serve` as a developer runs it, and run_kubesim(mode="subprocess")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from kubesim.__main__ import main
from kubesim.testing import run_kubesim, stop_process

ROOT = Path(__file__).resolve().parents[3]

MANIFEST = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: user-queue
  namespace: team-a
spec:
  clusterQueue: cluster-queue
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
"""


@pytest.fixture
def manifests(tmp_path) -> Path:
    directory = tmp_path / "manifests"
    directory.mkdir()
    (directory / "queues.yaml").write_text(MANIFEST)
    return directory


def test_serve_refuses_a_missing_apply_path(tmp_path, capsys):
    assert main(["serve", "--apply", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_cli_serves_applies_and_writes_a_kubeconfig(manifests):
    """run_kubesim(mode="subprocess") runs `python -m kubesim serve` and, on leaving, checks that it
    exited 0 on SIGTERM."""
    with run_kubesim(mode="subprocess", apply=[manifests], time_scale=10) as sim:
        assert sim.cluster is None
        assert sim.url.startswith("http://127.0.0.1:")
        written = yaml.safe_load(Path(sim.kubeconfig).read_text())
        assert written["current-context"] == "kubesim"
        assert written["clusters"][0]["cluster"]["server"] == sim.url

        api = config.new_client_from_config(config_file=sim.kubeconfig)
        queue = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", "team-a", "localqueues", "user-queue"
        )
        assert queue["spec"]["clusterQueue"] == "cluster-queue"
        assert client.VersionApi(api).get_code().git_version.startswith("v1.32.")
        api.close()

        assert sim.stats()["requests"]["get localqueues.kueue.x-k8s.io"] == 1
        assert sim.set_faults(latency_ms=5)["latency_ms"] == 5
        assert sim.reset_faults()["latency_ms"] == 0


def test_cli_serves_a_manager_and_its_workers_each_with_its_own_kubeconfig(manifests, tmp_path):
    """`serve --workers 2 --tls --token T` prints one line per cluster and writes a kubeconfig for each
    beside the manager's (with its own CA and the token); `--worker-apply` goes to the workers only; each
    is its own cluster."""
    kubeconfig = tmp_path / "kubesim.kubeconfig"
    command = [
        sys.executable,
        "-m",
        "kubesim",
        "serve",
        "--workers",
        "2",
        "--kubeconfig-out",
        str(kubeconfig),
    ]
    command += ["--worker-apply", str(manifests), "--tls", "--token", "t0ken"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        lines = [process.stdout.readline().strip() for _ in range(3)]
        assert lines[0].startswith("kubesim listening on https://127.0.0.1:")
        assert [line.split()[:3] for line in lines[1:]] == [
            ["kubesim", "worker", "worker1"],
            ["kubesim", "worker", "worker2"],
        ]
        urls = {line.split()[-1] for line in lines}
        assert len(urls) == 3
        servers = {}
        for name in ("", "worker1", "worker2"):
            path = tmp_path / (f"kubesim.{name}.kubeconfig" if name else "kubesim.kubeconfig")
            written = yaml.safe_load(path.read_text())
            servers[name] = written["clusters"][0]["cluster"]["server"]
            # What MultiKueue accepts in a worker's Secret: the CA inline, a token, no insecure flag.
            assert written["clusters"][0]["cluster"]["certificate-authority-data"]
            assert written["users"][0]["user"]["token"] == "t0ken"
        assert set(servers.values()) == urls
        for name, url in servers.items():
            path = tmp_path / (f"kubesim.{name}.kubeconfig" if name else "kubesim.kubeconfig")
            api = config.new_client_from_config(config_file=str(path))
            namespaces = {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}
            assert ("team-a" in namespaces) == bool(name), (name, url)  # only the workers got --worker-apply
            api.close()
    finally:
        stop_process(process)
        process.stdout.close()
    assert process.returncode == 0
