"""A kubesim and a real Airflow of their own for the browser tests, and headless Chromium.

Why not the e2e session's Airflow: these tests need two users who may read different DAGs. The simple
auth manager (Airflow's default, which the e2e Airflow uses) gives roles to users for all DAGs alike; only
its teams tell DAGs apart, by DAG bundle. So this Airflow runs in multi-team mode:

* bundle ``dags-folder`` (the project's dags/) belongs to team ``ml-platform``;
* bundle ``sandbox`` (tests/browser/dags/: the one DAG ``sandbox_rayjob``) belongs to team ``sandbox``;
* user ``ops`` (viewer, teams ml-platform and sandbox) may read every DAG; user ``outsider`` (viewer,
  team sandbox) may read ``sandbox_rayjob`` only; ``admin`` drives the runs through the REST API.

A team's deferred tasks are run by a triggerer of that team, so one ``airflow triggerer --team-name
ml-platform`` runs beside the global one.

The fixtures are package-scoped. `make test` runs this package in an xdist worker of its own, beside the
other groups of tests/conftest.py (``BROWSER_AIRFLOW``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from devtools.airflow import ROOT, airflow_environment, component_command, free_port, start_airflow
from devtools.chromium import Browser, ChromiumUnavailable, ensure_chromium
from devtools.kubesim_process import KUEUE_MANIFESTS, start_kubesim
from devtools.postgres import metadata_database
from tests.conftest import BROWSER_REQUEST_LOG, CLUSTER_REQUEST_LOGS, run_directory
from tests.e2e.harness import E2E

BROWSER_DIR = Path(__file__).resolve().parent
TIME_SCALE = 10.0
TEAMS = {"dags-folder": "ml-platform", "sandbox": "sandbox"}
USERS = {"ops": "viewer:ml-platform|sandbox", "outsider": "viewer:sandbox"}
SANDBOX_DAG = "sandbox_rayjob"


def multi_team_environment() -> dict[str, str]:
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    bundles = [
        {"name": "dags-folder", "classpath": local, "kwargs": {"path": str(ROOT / "dags")}},
        {"name": "sandbox", "classpath": local, "kwargs": {"path": str(BROWSER_DIR / "dags")}},
    ]
    users = ",".join(["admin:admin", *(f"{name}:{grant}" for name, grant in USERS.items())])
    return {
        "AIRFLOW__CORE__MULTI_TEAM": "True",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
            [{**b, "team_name": TEAMS[b["name"]]} for b in bundles]
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": users,
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
    }


@pytest.fixture(scope="package")
def chromium_binaries():
    """Chromium and chromedriver, installed with apt-get when absent; skipped only where impossible."""
    try:
        return ensure_chromium()
    except ChromiumUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="package", autouse=True)
def _hand_the_request_log_to_the_rbac_test(request, tmp_path_factory):
    """When the package ends, write what ``keep_request_log`` kept to ``BROWSER_REQUEST_LOG`` (an empty
    list if no kubesim ran) for tests/e2e/test_99_security.py, which may run in another xdist worker.
    Written whole and renamed into place: the RBAC test reads it as soon as it exists."""
    yield
    path = run_directory(tmp_path_factory) / BROWSER_REQUEST_LOG
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(request.config.stash.get(CLUSTER_REQUEST_LOGS, [])))
    partial.rename(path)


@pytest.fixture(scope="package")
def ui_kubesim(tmp_path_factory, request):
    sim = start_kubesim(
        tmp_path_factory.mktemp("ui-kubesim"),
        queues="single-queue",
        time_scale=TIME_SCALE,
        extra_apply=[KUEUE_MANIFESTS / "team-queues"],
    )
    yield sim
    if sim.process.poll() is None:
        keep_request_log(request.config, sim)
        sim.stop()


def keep_request_log(config: pytest.Config, sim) -> None:
    """Hand kubesim's request log to the RBAC test (tests/e2e/test_99_security.py) before it goes.

    kubesim logs a request when its answer ends, and a watch ends only when a side closes it: the Kueue
    pages' watches (ClusterQueues change rarely) may still be open. Ending every open watch once first, as
    an API server restart would, puts them in the log; the clients open them again, and are logged too."""
    import time

    import httpx

    httpx.post(f"{sim.url}/kubesim/faults", json={"drop_watches": True}, timeout=30).raise_for_status()
    time.sleep(1.0)
    log = httpx.get(f"{sim.url}/kubesim/requests", timeout=30).json()
    httpx.delete(f"{sim.url}/kubesim/requests", timeout=30).raise_for_status()
    config.stash.setdefault(CLUSTER_REQUEST_LOGS, []).extend(log)


@pytest.fixture(scope="package")
def ui_airflow(chromium_binaries, ui_kubesim, tmp_path_factory):
    home = tmp_path_factory.mktemp("ui-airflow")
    extra = multi_team_environment()
    port = free_port()
    with metadata_database() as database_url:
        env = airflow_environment(
            home, port=port, kubeconfig=ui_kubesim.kubeconfig, database_url=database_url, extra=extra
        )
        # Teams must exist before the dag-processor syncs the bundles that name them: the database is
        # migrated and the teams added in one process, as devtools.components does for `--team`.
        teams = sorted(set(TEAMS.values()))
        prepare = f"from devtools.components import prepare_database; prepare_database({teams!r})"
        subprocess.run(
            [sys.executable, "-c", prepare], env=env, check=True, capture_output=True, timeout=300, cwd=home
        )
        airflow = start_airflow(
            home, kubeconfig=ui_kubesim.kubeconfig, port=port, database_url=database_url, extra_env=extra
        )
        try:
            log = (home / "triggerer-ml-platform.log").open("ab")
            airflow.extra_processes.append(
                subprocess.Popen(
                    component_command("triggerer", "--team-name", "ml-platform"),
                    env=airflow.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=home,
                )
            )
            airflow.wait_for_dags(["text_classifier_finetune", SANDBOX_DAG], timeout=180)
            yield airflow
        finally:
            airflow.stop()


@pytest.fixture(scope="package")
def ui(ui_airflow, ui_kubesim):
    """The REST-level helpers of the e2e harness, for this Airflow and kubesim."""
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(ui_kubesim.kubeconfig))
    yield E2E(airflow=ui_airflow, kubesim_url=ui_kubesim.url, custom=client.CustomObjectsApi(api_client))
    api_client.close()


@pytest.fixture(scope="package")
def passwords(ui_airflow) -> dict[str, str]:
    """The simple auth manager generated the users' passwords into its passwords file."""
    return json.loads((ui_airflow.home / "passwords.json").read_text())


OPENED: dict[tuple[str, str], Browser] = {}
"""The package's Chromiums (``browsers``), by (user, window)."""


@pytest.fixture(scope="package")
def browsers(chromium_binaries, ui_airflow, passwords):
    """``browsers("ops")``: a Chromium signed in as that user, kept for the package; ``browsers("ops",
    "second")`` another window (own Chromium) of the same user."""

    def get(user: str, window: str = "main") -> Browser:
        if (user, window) not in OPENED:
            browser = Browser(chromium_binaries, ui_airflow.url, f"{user}-{window}")
            browser.sign_in(user, passwords[user])
            OPENED[(user, window)] = browser
        return OPENED[(user, window)]

    yield get
    for browser in OPENED.values():
        browser.quit()
    OPENED.clear()


@pytest.fixture(scope="module", autouse=True)
def _park_the_browsers_when_the_module_ends():
    """Every module opens the pages it looks at; a page left open by an earlier module would keep
    polling Airflow and kubesim (a Kueue page refreshes by itself) and take CPU from the timing the next
    module watches. So each Chromium goes to about:blank, signed in still, when its module ends."""
    yield
    for browser in OPENED.values():
        with contextlib.suppress(Exception):  # a browser that died is the test's own failure
            browser.driver.switch_to.default_content()
            browser.driver.get("about:blank")
            browser.frame_title = None
