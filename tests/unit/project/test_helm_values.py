"""include/helm/values.yaml, checked offline: no helm and no chart download here, so the values are checked
against the chart's own schema entries (include/helm/chart-value-paths.yaml, recorded from the chart version
the values name) and the RBAC they rely on against include/manifests/kueue/rbac.yaml as it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from kueue_ray.params import NAMESPACE as RAYJOB_NAMESPACE

ROOT = Path(__file__).resolve().parents[3]
VALUES = ROOT / "include/helm/values.yaml"
CHART_PATHS = ROOT / "include/helm/chart-value-paths.yaml"
RBAC = ROOT / "include/manifests/kueue/rbac.yaml"
KUEUE_MANIFESTS = ROOT / "include/manifests/kueue"
JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}
CLUSTER_CLIENTS = ("triggerer", "workers.celery", "apiServer")
"""The components whose pods call the Kubernetes API through the plugin."""


def load_values() -> dict:
    return yaml.safe_load(VALUES.read_text())


@pytest.fixture(scope="module")
def values() -> dict:
    return load_values()


@pytest.fixture(scope="module")
def chart() -> dict:
    return yaml.safe_load(CHART_PATHS.read_text())


def set_paths(value, path: str = ""):
    """(path, value) for everything values.yaml sets: mappings and lists too, list items as ``name[]``."""
    if path:
        yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from set_paths(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for item in value:
            yield from set_paths(item, f"{path}[]")


def json_type(value) -> str:
    return "null" if value is None else JSON_TYPES[type(value)]


def schema_violations(values: dict, declared: dict) -> list[str]:
    """What the chart's schema would refuse, or ignore because it does not know the path."""
    problems = []
    for path, value in set_paths(values):
        entry = declared.get(path)
        if entry is None:
            problems.append(f"{path}: not a value of the chart")
            continue
        kind = json_type(value)
        if kind not in entry["type"] and not (kind == "integer" and "number" in entry["type"]):
            problems.append(f"{path}: {kind}, the chart wants {entry['type']}")
        if "enum" in entry and value not in entry["enum"]:
            problems.append(f"{path}: {value!r} not in {entry['enum']}")
        if "pattern" in entry and not re.search(entry["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {entry['pattern']}")
    return problems


def install_command(text: str) -> str:
    (command,) = re.findall(
        r"helm upgrade --install airflow apache-airflow/airflow[^\n]*(?:\\\n[^\n]*)*", text
    )
    return command


def option(command: str, name: str) -> str:
    return re.search(rf"{name}[ =](\S+)", command).group(1)


def rbac_documents() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(RBAC.read_text()) if doc]


def bound_subjects(kind: str, role_kind: str, role_rules_resource: str) -> set[tuple[str, str]]:
    """(namespace, name) of the ServiceAccounts bound by ``kind`` bindings to a ``role_kind`` whose rules
    cover ``role_rules_resource``."""
    docs = rbac_documents()
    roles = {
        (doc["metadata"].get("namespace"), doc["metadata"]["name"])
        for doc in docs
        if doc["kind"] == role_kind and any(role_rules_resource in rule["resources"] for rule in doc["rules"])
    }
    subjects = set()
    for doc in docs:
        ref = doc.get("roleRef") or {}
        namespace = doc["metadata"].get("namespace") if role_kind == "Role" else None
        if doc["kind"] == kind and ref.get("kind") == role_kind and (namespace, ref["name"]) in roles:
            subjects |= {
                (s["namespace"], s["name"]) for s in doc["subjects"] if s["kind"] == "ServiceAccount"
            }
    return subjects


def service_account(values: dict, component: str) -> dict:
    node = values
    for part in component.split("."):
        node = node[part]
    return node["serviceAccount"]


# ----- the values against the chart -------------------------------------------------------------


def test_values_parse_and_name_the_chart_version_they_were_checked_against(values, chart):
    assert isinstance(values, dict) and values
    assert chart["chart"] == "airflow" and chart["licence"] == "Apache-2.0"
    command = install_command(VALUES.read_text())
    assert option(command, "--version") == chart["version"]
    assert option(install_command((ROOT / "README.md").read_text()), "--version") == chart["version"]


def test_every_value_set_is_a_value_of_that_chart_version_with_its_type(values, chart):
    assert schema_violations(values, chart["paths"]) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda v: v["triggerer"].update(replica=2), "triggerer.replica: not a value of the chart"),
        (lambda v: v["workers"].update(serviceAcount={}), "workers.serviceAcount: not a value of the chart"),
        (
            lambda v: v["triggerer"].update(replicas="2"),
            "triggerer.replicas: string, the chart wants ['integer']",
        ),
        (
            lambda v: v["images"]["airflow"].update(pullPolicy="always"),
            "not in ['Always', 'Never', 'IfNotPresent']",
        ),
        (lambda v: v.update(executor="Celery"), "executor: 'Celery' does not match"),
    ],
)
def test_the_check_refuses_what_the_chart_would_not_take(chart, mutate, expected):
    values = load_values()
    mutate(values)
    assert any(expected in problem for problem in schema_violations(values, chart["paths"]))


def test_image_is_the_projects_and_matches_the_airflow_version(values):
    dockerfile = (ROOT / "include/docker/Dockerfile").read_text()
    assert f"FROM apache/airflow:{values['airflowVersion']}-" in dockerfile
    for folder in ("dags", "plugins", "include"):
        assert f"COPY --chown=airflow:0 {folder}/ /opt/airflow/{folder}/" in dockerfile
    assert "pip install --no-cache-dir -r /tmp/requirements.txt" in dockerfile
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    image = compose["x-airflow-common"]["image"]
    assert image.endswith(
        f"{values['images']['airflow']['repository']}:{values['images']['airflow']['tag']}}}"
    )


def test_celery_executor_and_at_least_two_triggerers(values):
    assert values["executor"] == "CeleryExecutor"
    assert values["triggerer"]["replicas"] >= 2
    assert (
        values["triggerer"]["podDisruptionBudget"]["config"]["maxUnavailable"]
        < values["triggerer"]["replicas"]
    )


def test_kubernetes_default_connection_is_in_cluster(values, monkeypatch):
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    env = {item["name"]: item["value"] for item in values["env"]}
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    hook = KubernetesHook(conn_id="kubernetes_default")
    assert hook._get_field("in_cluster") is True
    assert hook._get_field("kube_config_path") is None and hook._get_field("kube_config") is None
    assert json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])["conn_type"] == "kubernetes"


# ----- the values against the project's RBAC ----------------------------------------------------


@pytest.fixture(scope="module")
def airflow_service_account(values) -> str:
    """The one ServiceAccount every cluster-calling component uses; the chart must not create it."""
    accounts = [service_account(values, component) for component in CLUSTER_CLIENTS]
    assert all(account["create"] is False for account in accounts)
    (name,) = {account["name"] for account in accounts}
    return name


@pytest.fixture(scope="module")
def install_namespace() -> str:
    """The namespace the README (and the values' header) install the release into."""
    readme = option(install_command((ROOT / "README.md").read_text()), "--namespace")
    assert option(install_command(VALUES.read_text()), "--namespace") == readme
    return readme


def test_airflow_is_installed_beside_no_default_local_queue(install_namespace):
    """Kueue 0.19 queues every ownerless pod of a namespace that has a LocalQueue named `default`: Airflow's
    own pods must live where no such queue is, and apart from the RayJobs."""
    assert install_namespace != RAYJOB_NAMESPACE
    local_queues = [
        (doc["metadata"].get("namespace"), doc["metadata"]["name"])
        for path in sorted(KUEUE_MANIFESTS.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "LocalQueue"
    ]
    assert local_queues, "no LocalQueue found: the check would prove nothing"
    assert (install_namespace, "default") not in local_queues


def test_rbac_yaml_creates_and_binds_the_service_account_of_the_release_namespace(
    airflow_service_account, install_namespace
):
    subject = (install_namespace, airflow_service_account)
    defined = {
        (doc["metadata"].get("namespace"), doc["metadata"]["name"])
        for doc in rbac_documents()
        if doc["kind"] == "ServiceAccount"
    }
    assert subject in defined, f"rbac.yaml creates {defined}, the release uses {subject}"
    # Submitting and watching RayJobs in `ray`, and the preflight's cluster-scoped queue reads.
    assert subject in bound_subjects("RoleBinding", "Role", "rayjobs")
    assert subject in bound_subjects("ClusterRoleBinding", "ClusterRole", "clusterqueues")
    role_namespaces = {doc["metadata"]["namespace"] for doc in rbac_documents() if doc["kind"] == "Role"}
    assert role_namespaces == {RAYJOB_NAMESPACE}
