"""include/docker/mint-kubeconfig.sh writes a kubeconfig the Airflow containers can use, and it works.

Run on the host with the user's own kubeconfig (here kubesim's). kubesim serves no TokenRequest, so the
token comes from --token-file (the option for a token issued elsewhere); `kubectl create token`, the
default, is what a real cluster answers and is not exercised here.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
MINT = ROOT / "include/docker/mint-kubeconfig.sh"

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


def mint(source_kubeconfig: Path, output: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["bash", str(MINT), *args, str(output)],
        env={**os.environ, "KUBECONFIG": str(source_kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result


def init_check(kubeconfig: Path) -> subprocess.CompletedProcess:
    """airflow-init's check, for containers running as this uid (the uid the script tells .env to use)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kueue_ray.kubeconfig_check",
            "--uid",
            str(os.getuid()),
            "--gid",
            "0",
            str(kubeconfig),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "plugins")},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_minted_kubeconfig_passes_the_check_and_reaches_the_cluster(kubesim_api, tmp_path):
    token = tmp_path / "token"
    token.write_text(
        yaml.safe_load(Path(kubesim_api.kubeconfig).read_text())["users"][0]["user"]["token"] + "\n"
    )
    output = tmp_path / "airflow.kubeconfig"

    result = mint(Path(kubesim_api.kubeconfig), output, "--token-file", str(token))

    assert stat.S_IMODE(output.stat().st_mode) == 0o600
    assert f"AIRFLOW_UID={os.getuid()}" in result.stderr
    minted = yaml.safe_load(output.read_text())
    assert minted["current-context"] == "airflow"
    assert "exec" not in minted["users"][0]["user"]
    # The loopback server stays (the test client runs on this host), so the check names only that.
    check = init_check(output)
    assert check.returncode == 1 and "1 problem(s)" in check.stderr and "loopback" in check.stderr
    listing = subprocess.run(
        ["kubectl", "--kubeconfig", str(output), "get", "namespaces", "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    assert "namespace/default" in listing.stdout.split()


def test_server_override_keeps_tls_valid_and_passes_the_check(tmp_path):
    """A kind-like kubeconfig (https on 127.0.0.1, CA by file path): the minted one embeds the CA, names
    host.docker.internal and verifies the certificate against the original host."""
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    source = tmp_path / "kind.kubeconfig"
    source.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "kind-ray",
                        "cluster": {"server": "https://127.0.0.1:41234", "certificate-authority": str(ca)},
                    }
                ],
                "users": [
                    {
                        "name": "kind-ray",
                        "user": {"client-certificate-data": "eA==", "client-key-data": "eA=="},
                    }
                ],
                "contexts": [{"name": "kind-ray", "context": {"cluster": "kind-ray", "user": "kind-ray"}}],
                "current-context": "kind-ray",
            }
        )
    )
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.e30.c2ln")
    output = tmp_path / "airflow.kubeconfig"

    mint(source, output, "--server", "https://host.docker.internal:41234", "--token-file", str(token))

    cluster = yaml.safe_load(output.read_text())["clusters"][0]["cluster"]
    assert cluster["server"] == "https://host.docker.internal:41234"
    assert cluster["tls-server-name"] == "127.0.0.1"
    assert "certificate-authority" not in cluster and cluster["certificate-authority-data"]
    check = init_check(output)
    assert check.returncode == 0, check.stderr


def test_renewing_rewrites_the_file_in_place_so_running_containers_see_the_new_token(kubesim_api, tmp_path):
    """docker compose bind-mounts the file (its inode): a renewal that replaced it would go unseen."""
    token = tmp_path / "token"
    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjF9.b2xk\n")
    output = tmp_path / "airflow.kubeconfig"
    mint(Path(kubesim_api.kubeconfig), output, "--token-file", str(token))
    inode = output.stat().st_ino

    token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJleHAiOjJ9.bmV3\n")  # the platform issued a new one
    renewing = subprocess.Popen(
        ["bash", str(MINT), "--renew-every", "1", "--token-file", str(token), str(output)],
        env={**os.environ, "KUBECONFIG": str(kubesim_api.kubeconfig)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while "bmV3" not in output.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert renewing.poll() is None, "--renew-every keeps running"
    finally:
        renewing.kill()
        renewing.wait()

    assert yaml.safe_load(output.read_text())["users"][0]["user"]["token"].endswith(".bmV3")
    assert output.stat().st_ino == inode
    assert stat.S_IMODE(output.stat().st_mode) == 0o600
