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


def worker_service_accounts(values: dict, release: str = "airflow") -> dict[str, str]:
    """The Celery workers' ServiceAccount under each rule the official chart has had for it:

    * ``shared``: charts before the split, and charts with ``workers.useWorkerDedicatedServiceAccounts``
      false (its default), take ``workers.serviceAccount``;
    * ``merged``: chart 1.22.0 as vendored (tests/schemas/) merges the non-null ``workers.celery`` values
      over ``workers`` for the Celery workers, so ``workers.celery.serviceAccount`` wins where it is set;
    * ``dedicated``: charts with the switch on take ``workers.celery.serviceAccount`` alone.
    """
    workers = values.get("workers") or {}
    shared_sa = workers.get("serviceAccount") or {}
    celery_sa = (workers.get("celery") or {}).get("serviceAccount") or {}
    merged_sa = {**shared_sa, **{k: v for k, v in celery_sa.items() if v is not None}}
    rules = {
        "shared": _service_account_name(shared_sa, f"{release}-worker"),
        "merged": _service_account_name(merged_sa, f"{release}-worker"),
    }
    if workers.get("useWorkerDedicatedServiceAccounts"):
        rules["dedicated"] = _service_account_name(celery_sa, f"{release}-worker-celery")
        del rules["shared"]
    return rules


def component_service_accounts(values: dict, release: str = "airflow") -> dict[str, str]:
    """The ServiceAccount each cluster-calling component of the official chart runs as under ``values``.
    The workers' is the one every chart rule agrees on; where they disagree it is ``"ambiguous: ..."``
    (the values would run the workers as different accounts in different chart versions)."""
    workers = worker_service_accounts(values, release)
    names = set(workers.values())
    worker = (
        names.pop() if len(names) == 1 else "ambiguous: " + ", ".join(f"{k} {v}" for k, v in workers.items())
    )
    return {
        "worker": worker,
        "triggerer": _service_account_name(
            (values.get("triggerer") or {}).get("serviceAccount"), f"{release}-triggerer"
        ),
        "api-server": _service_account_name(
            (values.get("apiServer") or {}).get("serviceAccount"), f"{release}-api-server"
        ),
    }
