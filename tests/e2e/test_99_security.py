"""The RBAC in include/manifests grants exactly what the project did during these tests (kubesim's
request log), and no credential reaches a task log.

The e2e session's last module (file order): it judges what every module before it did, and it needs the
browser tests' request log, which their package writes when it ends in the other xdist worker; run last,
it rarely waits for it (run earlier, it held the shared e2e Airflow's worker idle for minutes).

The tests' own cluster reads are all-namespaces lists of namespaced resources, which the project never
makes; they are left out of "what the project did". The browser tests (tests/browser) run a kubesim of
their own, where the Kueue pages are viewed; its request log is judged here too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import BROWSER_REQUEST_LOG, run_directory
from tests.deployment_files import render_rbac, rule_rights
from tests.e2e.harness import wait_until

CLUSTER_SCOPED = {
    "clusterqueues",
    "workloadpriorityclasses",
    "cohorts",
    "resourceflavors",
    "namespaces",
    "admissionchecks",
    "multikueueconfigs",
}
USED_ON_A_MULTIKUEUE_MANAGER = {("kueue.x-k8s.io", "multikueueconfigs", "get")}
"""Rights only a MultiKueue manager's preflight uses, which the e2e cluster is not (it is one cluster):
tests/integration/kueue_ray/test_multikueue.py::test_the_preflight_on_a_manager_and_its_workers_stays_within_the_worker_accounts_grants
proves them used, and within the worker account's grants."""
ALL_ITEMS = {path.stem[:7] for path in Path(__file__).parent.glob("test_0[1-7]_*.py")}
"""The e2e modules that run before this one and exercise the rights; `make demo`'s walkthrough runs in the
browser tests, whose requests are counted too (their package writes them to ``BROWSER_REQUEST_LOG``)."""


def granted() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) from every Role and ClusterRole of the project's RBAC, rendered for
    namespace `airflow`: together, the components' accounts (which component holds which is
    tests/unit/project/test_helm_values.py's)."""
    return rule_rights(
        rule
        for doc in render_rbac("airflow")
        if doc["kind"] in ("Role", "ClusterRole")
        for rule in doc["rules"]
    )


def exercised(records: list[dict]) -> set[tuple[str, str, str]]:
    rights = set()
    for record in records:
        resource = record["resource"]
        if not resource:
            continue  # discovery (/api, /apis, /version): open to every authenticated user
        if not record["namespace"] and resource not in CLUSTER_SCOPED:
            continue  # an all-namespaces read: the tests' own observation
        if record["subresource"]:
            resource = f"{resource}/{record['subresource']}"
        rights.add((record["group"], resource, record["verb"]))
    return rights


def browser_request_log(request, tmp_path_factory) -> list[dict]:
    """The browser tests' kubesim request log, when they are in this run. `make test` runs them in the
    other xdist worker at the same time as this module: wait until their package has ended and written it."""
    if not any(item.get_closest_marker("browser") for item in request.session.items):
        return []
    path = run_directory(tmp_path_factory) / BROWSER_REQUEST_LOG
    wait_until(path.exists, timeout=1100, interval=2, what=f"the browser tests to end and write {path}")
    return json.loads(path.read_text())


@pytest.mark.timeout(1200)  # may wait for the browser tests running beside this module
def test_rbac_grants_exactly_what_the_project_used(e2e, request, tmp_path_factory):
    e2e.collect_requests()
    browser_requests = browser_request_log(request, tmp_path_factory)
    used = exercised(e2e.requests + browser_requests)
    allowed = granted()

    assert used - allowed == set(), "calls the RBAC would forbid"
    ran = {Path(str(item.fspath)).stem[:7] for item in request.session.items}
    if not ran >= ALL_ITEMS:
        pytest.skip(f"the 'nothing more' half needs every e2e item in the session; ran {sorted(ran)}")
    if not browser_requests:
        pytest.skip("the 'nothing more' half needs the browser tests (tests/browser) in the session too")
    assert allowed - used - USED_ON_A_MULTIKUEUE_MANAGER == set(), "rights no test exercised"


def test_no_token_or_kubeconfig_secret_in_any_task_log(e2e, kubesim):
    kubeconfig = yaml.safe_load(Path(kubesim.kubeconfig).read_text())
    secrets = {user["user"]["token"] for user in kubeconfig["users"] if user["user"].get("token")}
    secrets.add(e2e.airflow.client.headers["Authorization"].removeprefix("Bearer "))
    logs = [p for p in (e2e.airflow.home / "logs").rglob("*.log*") if "dag_id=" in str(p)]

    assert logs, "no task logs to check"
    leaks = {str(p): [s[:6] + "..." for s in secrets if s in p.read_text(errors="replace")] for p in logs}
    assert {p: found for p, found in leaks.items() if found} == {}
