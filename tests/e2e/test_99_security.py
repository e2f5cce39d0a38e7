"""The RBAC in include/manifests grants exactly what the project did during these tests (kubesim's
request log), and no credential reaches a task log.

The e2e session's last module (file order): it judges what every module before it did, and what the
sessions of the other xdist workers hand over when they end (tests/conftest.py's groups): the browser
tests' request log, and the second shared Airflow's request log and task-log findings. Run last, it waits
for them little.

The tests' own cluster reads are all-namespaces lists of namespaced resources, which the project never
makes; they are left out of "what the project did". The browser tests (tests/browser) run a kubesim of
their own, where the Kueue pages are viewed; its request log is judged here too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    BROWSER_REQUEST_LOG,
    GROUPS_RUN,
    SECOND_SHARED_AIRFLOW,
    handover_path,
    run_directory,
    xdist_group,
)
from tests.deployment_files import render_rbac, rule_rights
from tests.e2e.harness import credential_leaks, wait_until

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


@pytest.fixture(scope="module")
def handovers(request, tmp_path_factory) -> tuple[list[dict], dict[str, Any] | None]:
    """What the sessions of other xdist workers in this run hand over when they end: the browser tests'
    request log (``[]`` when they are not in the run) and the second shared Airflow's hand-over (``None``
    when its modules are not in the run or ran in this session). `make test` runs them beside this module,
    a worker per group: wait until each has ended and written its part (once, for both tests)."""
    items = request.session.items
    run_dir = run_directory(tmp_path_factory)
    expected = {}
    if any(item.get_closest_marker("browser") for item in items):
        expected["browser"] = run_dir / BROWSER_REQUEST_LOG
    if (
        os.environ.get("PYTEST_XDIST_WORKER")
        and any(xdist_group(item.nodeid) == SECOND_SHARED_AIRFLOW for item in items)
        and SECOND_SHARED_AIRFLOW not in request.config.stash.get(GROUPS_RUN, set())
    ):
        expected["second"] = handover_path(run_dir, SECOND_SHARED_AIRFLOW)
    wait_until(
        lambda: all(path.exists() for path in expected.values()),
        timeout=1100,
        interval=2,
        what=lambda: (
            "the sessions beside this one to end and write "
            + ", ".join(str(path) for path in expected.values() if not path.exists())
            + " (each group needs a worker of its own: tests/conftest.py)"
        ),
    )
    read = {name: json.loads(path.read_text()) for name, path in expected.items()}
    return read.get("browser", []), read.get("second")


@pytest.mark.timeout(1200)  # may wait for the sessions running beside this module
def test_rbac_grants_exactly_what_the_project_used(e2e, request, handovers):
    e2e.collect_requests()
    browser_requests, second = handovers
    used = exercised(e2e.requests + browser_requests + (second["requests"] if second else []))
    allowed = granted()

    assert used - allowed == set(), "calls the RBAC would forbid"
    ran = {Path(str(item.fspath)).stem[:7] for item in request.session.items}
    if not ran >= ALL_ITEMS:
        pytest.skip(f"the 'nothing more' half needs every e2e item in the session; ran {sorted(ran)}")
    if not browser_requests:
        pytest.skip("the 'nothing more' half needs the browser tests (tests/browser) in the session too")
    assert allowed - used - USED_ON_A_MULTIKUEUE_MANAGER == set(), "rights no test exercised"


@pytest.mark.timeout(1200)  # may wait for the sessions running beside this module
def test_no_token_or_kubeconfig_secret_in_any_task_log(e2e, kubesim, handovers):
    logs, leaks = credential_leaks(e2e.airflow, Path(kubesim.kubeconfig))
    _, second = handovers
    if second:
        logs += second["task_logs"]
        leaks |= second["leaks"]

    assert logs, "no task logs to check"
    assert leaks == {}
