"""docker-compose.yaml cannot be run here (no Docker engine), so it is validated against the Compose
Specification's JSON schema (vendored in tests/schemas/) and its structure is checked: the services of
Airflow's official layout, our image and mounts, the optional offline kubesim service, and what keeps it safe
by default (loopback only, keys generated once, no placeholder secret)."""

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_has_the_official_services(compose):
    services = set(compose["services"])
    assert {
        "postgres",
        "redis",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-worker",
        "airflow-triggerer",
        "airflow-init",
    } <= services


@pytest.mark.parametrize(
    ("service", "command"),
    [
        ("airflow-apiserver", "api-server"),
        ("airflow-scheduler", "scheduler"),
        ("airflow-dag-processor", "dag-processor"),
        ("airflow-worker", "celery worker"),
        ("airflow-triggerer", "triggerer"),
    ],
)
def test_components_run_their_airflow_command(compose, service, command):
    assert compose["services"][service]["command"] == command


def test_image_is_airflow_332_plus_our_lock(compose):
    dockerfile = (ROOT / compose["x-airflow-common"]["build"]["dockerfile"]).read_text()
    assert "FROM apache/airflow:3.3.2" in dockerfile
    assert "COPY requirements-runtime.txt" in dockerfile


def test_mounts_dags_plugins_include_and_a_kubeconfig(compose):
    volumes = compose["services"]["airflow-worker"]["volumes"]
    targets = {v.rsplit(":", 2)[1] for v in volumes}
    assert {
        "/opt/airflow/dags",
        "/opt/airflow/plugins",
        "/opt/airflow/include",
        "/opt/airflow/kube/config",
    } <= targets
    env = compose["services"]["airflow-triggerer"]["environment"]
    assert "/opt/airflow/kube/config" in env["AIRFLOW_CONN_KUBERNETES_DEFAULT"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"


def test_worker_is_scalable(compose):
    worker = compose["services"]["airflow-worker"]
    assert "container_name" not in worker and "ports" not in worker


def test_kubesim_is_an_optional_profile_reachable_by_the_shipped_kubeconfig(compose):
    kubesim = compose["services"]["kubesim"]
    assert kubesim["profiles"] == ["offline"]
    assert "6443" in " ".join(kubesim["entrypoint"])
    kubeconfig = yaml.safe_load((ROOT / "include/docker/kubesim.kubeconfig").read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "http://kubesim:6443"
    entrypoint = kubesim["entrypoint"]
    token = entrypoint[entrypoint.index("--token") + 1]
    assert kubeconfig["users"][0]["user"]["token"] == token, "the kubeconfig authenticates to the service"
    for path in [p for p in kubesim["entrypoint"] if p.startswith("/opt/airflow/include/")]:
        assert (ROOT / path.removeprefix("/opt/airflow/")).exists(), path


# ----- the file against the Compose Specification's schema ------------------------------------------

COMPOSE_SCHEMA = ROOT / "tests/schemas/compose-spec.json"


def compose_errors(document: dict) -> list[str]:
    """What `docker compose config` would refuse, as ``path: message`` (the vendored compose-spec schema)."""
    validator = jsonschema.Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text()))
    return sorted(
        f"{'.'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
        for error in validator.iter_errors(document)
    )


def test_compose_file_validates_against_the_compose_spec(compose):
    assert compose_errors(compose) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda c: c["services"]["redis"].update(helthcheck=c["services"]["redis"].pop("healthcheck")),
            "'helthcheck'",
        ),
        (
            lambda c: c["services"]["airflow-apiserver"].update(port=["127.0.0.1:8080:8080"]),
            "'port' does not match any of the regexes",
        ),
        (lambda c: c["services"]["postgres"].update(restart=["always"]), "services.postgres.restart"),
        (lambda c: c.update(volume={}), "'volume' does not match any of the regexes"),
    ],
)
def test_the_schema_refuses_a_misspelt_or_mistyped_copy(mutate, expected):
    mutated = copy.deepcopy(yaml.safe_load((ROOT / "docker-compose.yaml").read_text()))
    mutate(mutated)
    errors = compose_errors(mutated)
    assert any(expected in error for error in errors), errors


# ----- safe by default ------------------------------------------------------------------------------


def test_every_published_port_listens_on_loopback_only(compose):
    published = {
        name: service["ports"] for name, service in compose["services"].items() if service.get("ports")
    }
    assert published, "nothing published: the check would prove nothing"
    for name, ports in published.items():
        for port in ports:
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), f"{name} publishes {port!r}"


KEY_OPTIONS = ("AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY")
"""The Airflow options holding keys: every component must share them, and none may ship in the file."""


def test_no_signing_key_or_placeholder_ships_and_init_generates_them_once(compose):
    env = compose["x-airflow-common"]["environment"]
    for option in KEY_OPTIONS:
        assert option not in env, f"{option} would be a value in every clone"
        command = env[f"{option}_CMD"].split()
        assert command[0] == "cat" and command[1].startswith("/opt/airflow/keys/")
    text = (ROOT / "docker-compose.yaml").read_text().lower()
    assert "change-me" not in text and "changeme" not in text
    keys_mount = "airflow-keys:/opt/airflow/keys"
    assert keys_mount in compose["x-airflow-common"]["volumes"] and "airflow-keys" in compose["volumes"]
    init = "\n".join(compose["services"]["airflow-init"]["command"])
    for option in KEY_OPTIONS:
        path = env[f"{option}_CMD"].split()[1]
        # Generated only when absent, so a restart keeps the key the database and running tasks use.
        assert f"[[ -s {path} ]] || python -c" in init and f"> {path}" in init
    assert init.index("/opt/airflow/keys/fernet_key") < init.index("exec /entrypoint")


def test_the_generators_airflow_init_runs_make_valid_keys():
    """The one-liners airflow-init runs, run here: a Fernet key Fernet accepts, a long random JWT secret."""
    from cryptography.fernet import Fernet

    init = "\n".join(
        yaml.safe_load((ROOT / "docker-compose.yaml").read_text())["services"]["airflow-init"]["command"]
    )
    generators = dict(
        (path, code) for code, path in re.findall(r"python -c '([^']+)' > (/opt/airflow/keys/\w+)", init)
    )
    outputs = {
        path: subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for path, code in generators.items()
    }
    Fernet(outputs["/opt/airflow/keys/fernet_key"].encode())
    assert len(outputs["/opt/airflow/keys/jwt_secret"]) >= 64


def test_deployment_identity_is_the_project_name_unless_set(compose):
    env = compose["x-airflow-common"]["environment"]
    assert env["AIRFLOW__KUEUE_RAY__DEPLOYMENT"] == "${AIRFLOW_DEPLOYMENT:-${COMPOSE_PROJECT_NAME}}"


def test_airflow_init_keeps_the_keys_it_generated_across_restarts(tmp_path):
    """airflow-init's key block, run twice by bash against a directory standing in for the volume: the
    second start keeps both keys, and only their owner may read them."""
    init = "\n".join(
        yaml.safe_load((ROOT / "docker-compose.yaml").read_text())["services"]["airflow-init"]["command"]
    )
    start = init.index("(\n")
    block = init[start : init.index(") || exit 1", start) + len(") || exit 1")]
    block = block.replace("/opt/airflow/keys", str(tmp_path)).replace(
        ':-50000}:0"', f':-50000}}:{os.getgid()}"'
    )
    env = {
        **os.environ,
        "AIRFLOW_UID": str(os.getuid()),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }

    def start_airflow_init() -> dict[str, str]:
        subprocess.run(["bash", "-euc", block], check=True, env=env)
        return {p.name: p.read_text() for p in tmp_path.iterdir()}

    first = start_airflow_init()
    assert set(first) == {"jwt_secret", "fernet_key", "api_secret_key"} and all(first.values())
    assert start_airflow_init() == first
    assert {oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()} == {"0o600"}
