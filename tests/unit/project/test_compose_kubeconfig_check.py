"""airflow-init's kubeconfig check, run as the command docker-compose.yaml gives it (no Docker engine here).

The command is read from the compose file, interpolated the way compose does (``${VAR:-default}``, ``$$``),
its container paths mapped to this checkout and a temporary kubeconfig, and run with bash: what a user's
``docker compose up airflow-init`` would print and exit with.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CONTAINER_KUBECONFIG = "/opt/airflow/kube/config"


def init_check_command() -> str:
    """The kubeconfig check line of airflow-init's script, as written in docker-compose.yaml."""
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    script = compose["services"]["airflow-init"]["command"][-1]
    (line,) = [line.strip() for line in script.splitlines() if "kueue_ray.kubeconfig_check" in line]
    return line


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation: ${VAR}, ${VAR:-default}; $$ is a literal $."""

    def value(match: re.Match) -> str:
        name, default = match.group(1), match.group(3)
        return env.get(name) or (default if default is not None else "")

    text = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}", value, text.replace("$$", "\0"))
    return text.replace("\0", "$")


def run_init_check(kubeconfig: Path, compose_env: dict[str, str]) -> subprocess.CompletedProcess:
    command = interpolate(init_check_command(), compose_env)
    command = command.replace("/opt/airflow/plugins", str(ROOT / "plugins"))
    command = command.replace(CONTAINER_KUBECONFIG, str(kubeconfig))
    env = {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "HOME": str(kubeconfig.parent),
    }
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=60)


def other_uid() -> int:
    return 50000 if os.getuid() != 50000 else 50001


def write_kubeconfig(path: Path, *, server: str, user: dict, mode: int) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kind-ray", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": user}],
                "contexts": [{"name": "kind-ray", "context": {"cluster": "kind-ray", "user": "me"}}],
                "current-context": "kind-ray",
            }
        )
    )
    path.chmod(mode)
    return path


def test_the_check_runs_before_airflow_starts_and_stops_airflow_init():
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    script = compose["services"]["airflow-init"]["command"][-1]
    assert script.index("kueue_ray.kubeconfig_check") < script.index("exec /entrypoint")
    assert init_check_command().endswith("|| exit 1")
    for service in ("airflow-scheduler", "airflow-worker", "airflow-triggerer", "airflow-apiserver"):
        depends = compose["services"][service]["depends_on"]["airflow-init"]
        assert depends == {"condition": "service_completed_successfully"}


def test_exec_plugin_loopback_server_and_unreadable_file_give_the_three_fixes(tmp_path):
    kubeconfig = write_kubeconfig(
        tmp_path / "config",
        server="https://127.0.0.1:41234",
        user={
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "kubelogin",
                "args": ["get-token"],
            }
        },
        mode=0o600,
    )
    uid = other_uid()

    result = run_init_check(kubeconfig, {"AIRFLOW_UID": str(uid), "KUBECONFIG_FILE": "~/.kube/aks-config"})

    assert result.returncode == 1, result.stdout + result.stderr
    report = result.stderr
    assert "3 problem(s)" in report
    # 1. the exec plugin: named, and how to do without it (or build it in)
    assert "users[me].user.exec.command: is an exec credential plugin that is not in the image" in report
    assert "KUBELOGIN_VERSION" in report and "include/docker/mint-kubeconfig.sh airflow.kubeconfig" in report
    # 2. the loopback server: named, and an address a container reaches
    assert "clusters[kind-ray].cluster.server: is a loopback address" in report
    assert "--server https://host.docker.internal:<port>" in report
    # 3. the 0600 file: which uid the containers run as, and the AIRFLOW_UID that reads it
    assert f"run as uid {uid}, gid 0 and cannot read this file (owner uid {os.getuid()}" in report
    assert f"AIRFLOW_UID={os.getuid()} in .env" in report
    assert "from ~/.kube/aks-config" in report


def test_a_token_kubeconfig_for_the_files_owner_passes(tmp_path):
    kubeconfig = write_kubeconfig(
        tmp_path / "config",
        server="https://aks-ray.hcp.westeurope.azmk8s.io:443",
        user={"token": "t"},
        mode=0o600,
    )
    result = run_init_check(kubeconfig, {"AIRFLOW_UID": str(os.getuid())})
    assert result.returncode == 0, result.stderr
    assert "usable by the Airflow containers" in result.stdout


def test_the_offline_profile_kubeconfig_passes(tmp_path):
    result = run_init_check(ROOT / "include/docker/kubesim.kubeconfig", {})
    assert result.returncode == 0, result.stderr
