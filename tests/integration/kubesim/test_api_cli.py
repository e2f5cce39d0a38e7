"""`python -m kubesim serve` as a developer runs it, and run_kubesim(mode="subprocess")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from kubesim.__main__ import main
from kubesim.testing import run_kubesim

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
