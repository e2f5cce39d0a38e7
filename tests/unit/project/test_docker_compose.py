"""docker-compose.yaml cannot be run here (no Docker engine), so its structure is checked instead: the
services of Airflow's official layout, our image and mounts, and the optional offline kubesim service."""

from pathlib import Path

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
    assert "requirements.txt" in dockerfile


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
