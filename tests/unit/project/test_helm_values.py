"""include/helm/values.yaml, checked offline (no helm, no chart download here): validated against the chart's
own values.schema.json, vendored verbatim in tests/schemas/ for the chart version the values install; then
what no schema can say: which ServiceAccount each component runs as under the chart's rules, what the
project's RBAC lets that account do, that the signing keys come from Secrets created once, and that no
secret ships in the file."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from kueue_ray.params import NAMESPACE as RAYJOB_NAMESPACE

from tests.deployment_files import (
    HELM_VALUES as VALUES,
)
from tests.deployment_files import (
    component_service_accounts,
    load_values,
    render_rbac,
    rights_of,
)

ROOT = Path(__file__).resolve().parents[3]
KUEUE_MANIFESTS = ROOT / "include/manifests/kueue"
CHART_SCHEMA = ROOT / "tests/schemas/airflow-chart-values.schema.json"
CHART_VERSION = re.search(r"CHART_VERSION:-([0-9.]+)", (ROOT / "tests/schemas/refresh.sh").read_text()).group(
    1
)
"""The chart version whose schema tests/schemas/ vendors (its refresh script's default)."""
READS = {"get", "list", "watch"}


@pytest.fixture(scope="module")
def values() -> dict:
    return load_values()


@pytest.fixture(scope="module")
def chart_schema() -> dict:
    if not CHART_SCHEMA.exists():
        pytest.skip(
            f"{CHART_SCHEMA.relative_to(ROOT)} is not vendored yet: apache/airflow chart/values.schema.json at "
            f"tag helm-chart/{CHART_VERSION} (tests/schemas/refresh.sh fetches it)"
        )
    return json.loads(CHART_SCHEMA.read_text())


def schema_errors(values: dict, schema: dict) -> list[str]:
    """What `helm install` would refuse, as ``path: message``."""
    validator = jsonschema.Draft7Validator(schema)
    return sorted(
        f"{'.'.join(str(p) for p in error.absolute_path) or '(top)'}: {error.message}"
        for error in validator.iter_errors(values)
    )


def install_command(text: str) -> str:
    (command,) = re.findall(
        r"helm upgrade --install airflow apache-airflow/airflow[^\n]*(?:\\\n[^\n]*)*", text
    )
    return command


def option(command: str, name: str) -> str:
    return re.search(rf"{name}[ =](\S+)", command).group(1)


# ----- the values against the chart -------------------------------------------------------------


def test_values_install_the_chart_version_whose_schema_is_vendored():
    assert option(install_command(VALUES.read_text()), "--version") == CHART_VERSION
    assert option(install_command((ROOT / "README.md").read_text()), "--version") == CHART_VERSION


def test_values_validate_against_the_charts_schema(values, chart_schema):
    assert schema_errors(values, chart_schema) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda v: v["triggerer"].update(replica=2), "'replica' was unexpected"),
        (lambda v: v["workers"].update(serviceAcount={}), "'serviceAcount' was unexpected"),
        (lambda v: v["triggerer"].update(replicas="2"), "triggerer.replicas: '2' is not of type"),
        (lambda v: v["images"]["airflow"].update(pullPolicy="always"), "'always' is not one of"),
        (lambda v: v["apiServer"].update(serviceAcount={}), "'serviceAcount' was unexpected"),
    ],
)
def test_the_schema_refuses_a_misspelt_or_mistyped_copy_of_the_values(chart_schema, mutate, expected):
    mutated = copy.deepcopy(load_values())
    mutate(mutated)
    errors = schema_errors(mutated, chart_schema)
    assert any(expected in error for error in errors), errors


def unknown_top_level_keys(values: dict, schema: dict) -> set[str]:
    """The chart's schema allows any top-level key (no ``additionalProperties: false`` there), so helm
    would silently ignore a misspelt one such as ``jwtSecretNme``: checked here against its properties."""
    return set(values) - set(schema["properties"])


def test_every_top_level_key_is_one_the_chart_declares(values, chart_schema):
    assert schema_errors({"jwtSecretNme": "x"}, chart_schema) == [], "the schema itself lets it through"
    assert unknown_top_level_keys(values, chart_schema) == set()
    assert unknown_top_level_keys({**values, "jwtSecretNme": "x"}, chart_schema) == {"jwtSecretNme"}


def test_image_is_the_projects_and_matches_the_airflow_version(values):
    dockerfile = (ROOT / "include/docker/Dockerfile").read_text()
    assert f"FROM apache/airflow:{values['airflowVersion']}-" in dockerfile
    for folder in ("dags", "plugins", "include"):
        assert f"COPY --chown=airflow:0 {folder}/ /opt/airflow/{folder}/" in dockerfile
    assert "pip install --no-cache-dir -r /tmp/requirements-runtime.txt" in dockerfile
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


# ----- the values against the project's RBAC ----------------------------------------------------


@pytest.fixture(scope="module")
def accounts(values) -> dict[str, str]:
    """The ServiceAccount each cluster-calling component runs as, by the chart's rules."""
    return component_service_accounts(values)


@pytest.fixture(scope="module")
def rbac(install_namespace) -> list[dict]:
    """rbac.yaml as the README applies it for the release namespace."""
    return render_rbac(install_namespace)


def test_each_component_runs_as_its_own_account_which_the_chart_does_not_create(values, accounts):
    assert accounts == {
        "worker": "kueue-ray-worker",
        "triggerer": "kueue-ray-triggerer",
        "api-server": "kueue-ray-api-server",
    }
    for key in ("workers", "workers.celery", "triggerer", "apiServer"):
        node = values
        for part in key.split("."):
            node = node[part]
        assert node["serviceAccount"]["create"] is False, f"{key}: rbac.yaml creates the account"


@pytest.mark.parametrize(
    ("workers", "expected"),
    [
        (
            {"serviceAccount": {"create": False, "name": "w"}, "celery": {"serviceAccount": {"name": "w"}}},
            "w",
        ),
        # Only the Celery key (what the values once did): older charts and the switch's default ignore it.
        (
            {"celery": {"serviceAccount": {"create": False, "name": "w"}}},
            "ambiguous: shared airflow-worker, merged w",
        ),
        # Only the old key: chart 1.22.0 takes it too (nothing to merge over it), the switch would not.
        ({"serviceAccount": {"create": False, "name": "w"}}, "w"),
        (
            {"useWorkerDedicatedServiceAccounts": True, "serviceAccount": {"name": "w"}},
            "ambiguous: merged w, dedicated airflow-worker-celery",
        ),
    ],
)
def test_the_worker_account_follows_the_charts_rules(workers, expected):
    assert component_service_accounts({"workers": workers})["worker"] == expected


def test_every_components_account_is_created_and_bound_in_the_release_namespace(
    rbac, accounts, install_namespace
):
    created = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in rbac if d["kind"] == "ServiceAccount"
    }
    for component, account in accounts.items():
        assert (install_namespace, account) in created, (
            f"{component} runs as {account}, which rbac.yaml lacks"
        )
        assert rights_of(rbac, install_namespace, account).all(), (
            f"{component}: {account} is bound to nothing"
        )
    roles = {d["metadata"]["namespace"] for d in rbac if d["kind"] in ("Role", "RoleBinding")}
    assert roles == {RAYJOB_NAMESPACE}


def test_api_server_only_reads_what_the_kueue_pages_cache_watches(rbac, accounts, install_namespace):
    """Derived from the cache's code: one list+watch per resource it watches, and a GET of the visibility
    API path it calls; nothing more."""
    from kueue_ray.ui.cache import CLUSTER_QUEUE_PENDING_PATH, watched_resources

    from kubesim.apiserver.paths import parse_target

    rights = rights_of(rbac, install_namespace, accounts["api-server"])
    watched = watched_resources("kubernetes_default", [RAYJOB_NAMESPACE])
    expected_ns = {(t.group, t.plural, verb) for t in watched if t.namespace for verb in ("list", "watch")}
    expected_cluster = {
        (t.group, t.plural, verb) for t in watched if not t.namespace for verb in ("list", "watch")
    }
    pending = parse_target(CLUSTER_QUEUE_PENDING_PATH.format(name="q"))
    expected_cluster.add((pending.group, f"{pending.plural}/{pending.subresource}", "get"))
    # Beyond the cache: a starting cluster's pods (ui/pods.py) and the priority change (ui/priority_edit.py).
    expected_ns |= {("", "pods", "list"), ("ray.io", "rayjobs", "patch")}
    assert rights.namespaced == {RAYJOB_NAMESPACE: expected_ns}
    assert rights.cluster == expected_cluster


def test_triggerer_reads_and_deletes_and_watches_what_its_hub_watches(rbac, accounts, install_namespace):
    from kueue_ray.hub.resources import RAYJOBS, RAYSERVICES, WORKLOADS

    rights = rights_of(rbac, install_namespace, accounts["triggerer"])
    verbs = {verb for _, _, verb in rights.all()}
    assert verbs <= READS | {"delete"}, "the triggerer never creates, patches or updates"
    for watched in (RAYJOBS, RAYSERVICES, WORKLOADS):
        for verb in ("list", "watch"):
            assert (watched.group, watched.plural, verb) in rights.namespaced[RAYJOB_NAMESPACE]
    # "Why still queued": the ClusterQueue behind a LocalQueue, and its cohort's (trigger_story.py).
    assert rights.cluster == {
        ("kueue.x-k8s.io", "clusterqueues", "get"),
        ("kueue.x-k8s.io", "clusterqueues", "list"),
    }


def test_only_the_worker_creates_or_changes(rbac, accounts, install_namespace):
    """And the api-server patches a RayJob's priority label, for a user the auth manager lets edit the DAG
    (the Kueue tab's priority change): nothing else."""
    writes = {"create", "patch", "update"}
    writers = {
        component
        for component, account in accounts.items()
        if {verb for _, _, verb in rights_of(rbac, install_namespace, account).all()} & writes
    }
    assert writers == {"worker", "api-server"}
    api_server = rights_of(rbac, install_namespace, accounts["api-server"]).all()
    assert {right for right in api_server if right[2] in writes} == {("ray.io", "rayjobs", "patch")}
    worker = rights_of(rbac, install_namespace, accounts["worker"]).namespaced[RAYJOB_NAMESPACE]
    assert {("ray.io", "rayjobs", "create"), ("ray.io", "rayjobs", "patch")} <= worker


def test_the_api_servers_patch_is_held_to_the_priority_label_by_an_admission_policy(
    rbac, accounts, install_namespace
):
    """RBAC grants verbs, not fields: the policy that limits the api-server's patch must name the account the
    values give the api-server, and deny (tests/integration/kueue_ray/test_api_server_rights.py proves it
    on a real API server)."""
    [policy] = [d for d in rbac if d["kind"] == "ValidatingAdmissionPolicy"]
    [binding] = [d for d in rbac if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    account = f"system:serviceaccount:{install_namespace}:{accounts['api-server']}"
    assert [c["expression"] for c in policy["spec"]["matchConditions"]] == [
        f"request.userInfo.username == '{account}'"
    ]
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["rayjobs"]
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


# ----- secrets and identity ---------------------------------------------------------------------

SECRET_VALUES = {
    "jwtSecretName": "jwt-secret",
    "apiSecretKeySecretName": "api-secret-key",
    "fernetKeySecretName": "fernet-key",
}
"""The chart's values naming a Secret, and the key the chart reads from it."""


@pytest.mark.parametrize(("value", "key"), SECRET_VALUES.items())
def test_signing_keys_come_from_secrets_the_readme_creates_once(values, value, key):
    name = values[value]
    readme = (ROOT / "README.md").read_text()
    creates = re.findall(
        rf"kubectl -n (\S+) create secret generic {re.escape(name)} --from-literal={key}=", readme
    )
    assert creates == [option(install_command(readme), "--namespace")], (
        f"README creates {name} with key {key}"
    )


def test_no_secret_value_ships_in_the_values(values):
    literal_keys = {"fernetKey", "jwtSecret", "apiSecretKey", "webserverSecretKey", "defaultUser"}
    assert not literal_keys & set(values), "a key set in values.yaml is in every clone and every helm history"
    text = VALUES.read_text().lower()
    for placeholder in ("change-me", "changeme", "password:", "secret:"):
        assert placeholder not in text


def test_deployment_identity_is_the_release_namespace_and_name(values):
    (item,) = yaml.safe_load(values["extraEnv"])
    assert item["name"] == "AIRFLOW__KUEUE_RAY__DEPLOYMENT"
    assert item["value"] == "{{ .Release.Namespace }}-{{ .Release.Name }}"
    rendered = (
        item["value"].replace("{{ .Release.Namespace }}", "airflow").replace("{{ .Release.Name }}", "airflow")
    )
    assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?", rendered), "a label value"
    assert "AIRFLOW__KUEUE_RAY__DEPLOYMENT" not in {e["name"] for e in values["env"]}


@pytest.mark.parametrize("component", ["triggerer", "workers", "workers.celery"])
def test_log_volumes_are_sized_on_purpose(values, component):
    node = values
    for part in component.split("."):
        node = node[part]
    size = node["persistence"]["size"]
    assert re.fullmatch(r"\d+Gi", size) and int(size[:-2]) <= 20, "the chart's 100Gi per pod is left alone"
