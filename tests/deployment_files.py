"""The deployment files read as a cluster would read them: include/manifests/rbac/rbac.yaml rendered for an
Airflow namespace (the README's `sed` substitution), the ServiceAccount each Airflow component runs as
under include/helm/values.yaml (the chart's own rules for which key applies), and the rights each account
ends up with through the Roles and ClusterRoles bound to it. Shared by the unit tests of the files and the
e2e RBAC test, which compares those rights with what the project did at kubesim."""

from __future__ import annotations

import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RBAC = ROOT / "include/manifests/rbac/rbac.yaml"
HELM_VALUES = ROOT / "include/helm/values.yaml"
NAMESPACE_PLACEHOLDER = "AIRFLOW_NAMESPACE"

Right = tuple[str, str, str]
"""(apiGroup, resource, verb), ``resource`` with its subresource as ``pods/log``."""


def render_rbac(airflow_namespace: str, text: str | None = None) -> list[dict]:
    """rbac.yaml for an Airflow namespace, as `sed 's/${AIRFLOW_NAMESPACE}/<ns>/g'` renders it: every
    placeholder replaced (a ``$`` that is not the placeholder raises, as a typo in it would ship)."""
    rendered = string.Template(RBAC.read_text() if text is None else text).substitute(
        {NAMESPACE_PLACEHOLDER: airflow_namespace}
    )
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def object_keys(docs: Iterable[dict]) -> set[tuple[str, str | None, str]]:
    """(kind, namespace, name) of every object: what a second `kubectl apply` would overwrite."""
    return {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs}


def rule_rights(rules: Iterable[dict]) -> set[Right]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@dataclass(frozen=True)
class Rights:
    """What one ServiceAccount may do: in each namespace (Roles), and cluster-wide (ClusterRoles)."""

    namespaced: dict[str, set[Right]]
    cluster: set[Right]

    def all(self) -> set[Right]:
        return self.cluster.union(*self.namespaced.values())


def rights_of(docs: list[dict], namespace: str, name: str) -> Rights:
    """The rights of ServiceAccount ``namespace/name`` through every binding in ``docs`` that names it."""
    roles = {(d["metadata"].get("namespace"), d["kind"], d["metadata"]["name"]): d for d in docs}
    namespaced: dict[str, set[Right]] = {}
    cluster: set[Right] = set()
    for doc in docs:
        if doc["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == name and s.get("namespace") == namespace
            for s in doc["subjects"]
        ):
            continue
        ref = doc["roleRef"]
        role_namespace = doc["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(role_namespace, ref["kind"], ref["name"])]  # a dangling roleRef fails here
        granted = rule_rights(role["rules"])
        if doc["kind"] == "ClusterRoleBinding":
            cluster |= granted
        else:
            namespaced.setdefault(doc["metadata"]["namespace"], set()).update(granted)
    return Rights(namespaced, cluster)


def load_values(path: Path = HELM_VALUES) -> dict:
    return yaml.safe_load(path.read_text())


def _service_account_name(account: dict | None, default: str) -> str:
    """The chart's airflow.serviceAccountName rule: ``name`` when set, else ``<release>-<component>`` when
    the chart creates it, else ``default``."""
    account = account or {}
    if account.get("name"):
        return account["name"]
    return default if account.get("create", True) else "default"


def component_service_accounts(values: dict, release: str = "airflow") -> dict[str, str]:
    """The ServiceAccount each cluster-calling component of the official chart runs as under ``values``.

    The Celery workers: chart versions that have ``workers.useWorkerDedicatedServiceAccounts`` take
    ``workers.celery.serviceAccount`` when it is true and ``workers.serviceAccount`` otherwise; older ones
    know only ``workers.serviceAccount``. The workers' account is the one every supported version would
    use, and a mismatch between the two keys is reported as such rather than guessed."""
    workers = values.get("workers") or {}
    dedicated = _service_account_name(
        (workers.get("celery") or {}).get("serviceAccount"), f"{release}-worker-celery"
    )
    shared = _service_account_name(workers.get("serviceAccount"), f"{release}-worker")
    if workers.get("useWorkerDedicatedServiceAccounts"):
        worker = dedicated  # chart versions without the switch would ignore it and run as `shared`
        if dedicated != shared:
            worker = f"{dedicated} (chart >= 1.21) / {shared} (older charts)"
    else:
        worker = shared
        if dedicated != shared:
            worker = f"{shared} (useWorkerDedicatedServiceAccounts false) / {dedicated} (when switched on)"
    return {
        "worker": worker,
        "triggerer": _service_account_name(
            (values.get("triggerer") or {}).get("serviceAccount"), f"{release}-triggerer"
        ),
        "api-server": _service_account_name(
            (values.get("apiServer") or {}).get("serviceAccount"), f"{release}-api-server"
        ),
    }
