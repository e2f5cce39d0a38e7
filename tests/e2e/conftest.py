"""One kubesim and one real Airflow (devtools.components, as `airflow standalone`) for the e2e session.

kubesim serves both queue setups at once (they share no names): the single ClusterQueue the text
classifier walkthrough needs and the team queues the 8-GPU Aurora and LLM pipelines need, plus the e2e-only
cluster in `cluster/`: nodes (a CPU node, a tainted GPU pool, a spot pool nothing tolerates) and queues
behind admission checks and on that spot pool. Kueue runs with `kueue-config.yaml` (waitForPodsReady with a
2-minute timeout). Airflow loads
the project's dags/ and, as a second DAG bundle, tests/e2e/dags/ (small DAGs only these tests use), and
reaches kubesim through the `kubernetes_default` connection, as in production.

Speed knobs: kubesim runs simulated time `E2E_TIME_SCALE` times faster (a 60 s RayJob takes 6 s), and the
triggerer heartbeats often so a restarted one takes over orphaned triggers in seconds, not half a minute.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from devtools.airflow import ROOT, start_airflow
from devtools.kubesim_process import ALL_SETUPS, start_kubesim
from devtools.postgres import metadata_database
from devtools.statsd import StatsdListener
from tests.conftest import GROUPS_RUN, SECOND_SHARED_AIRFLOW, handover_path, run_directory, xdist_group
from tests.e2e.harness import E2E, credential_leaks, wait_until

E2E_DIR = Path(__file__).resolve().parent
TIME_SCALE = float(os.environ.get("E2E_TIME_SCALE", "10"))
FULL = os.environ.get("E2E_FULL") == "1"
"""`make test-full`: the fault test runs its full load."""

PIPELINES = ["text_classifier_finetune", "aurora_finetune_and_serve", "llm_train_and_batch_inference"]
E2E_DAGS = ["e2e_rayjob", "e2e_on_worker", "e2e_retried", "e2e_guarded", "e2e_worker_death", "e2e_orphan"]
MAINTENANCE = ["kueue_ray_janitor"]


def dag_bundles() -> str:
    local = "airflow.dag_processing.bundles.local.LocalDagBundle"
    return json.dumps(
        [
            {"name": "dags-folder", "classpath": local, "kwargs": {"path": str(ROOT / "dags")}},
            {"name": "e2e", "classpath": local, "kwargs": {"path": str(E2E_DIR / "dags")}},
        ]
    )


def wait_for_dags_or_import_errors(airflow, dag_ids: list[str], timeout: float = 180) -> None:
    """Wait until every DAG is serialized; fail at once, with Airflow's message, on an import error."""

    def parsed() -> bool:
        errors = airflow.api("GET", "/importErrors").json().get("import_errors") or []
        if errors:
            details = "\n".join(f"{e['filename']}: {e['stack_trace'][-600:]}" for e in errors)
            raise AssertionError(f"Airflow cannot load the DAGs:\n{details}")
        return all(airflow.api("GET", f"/dags/{dag_id}").status_code == 200 for dag_id in dag_ids)

    wait_until(parsed, timeout=timeout, interval=1, what=f"DAGs {dag_ids} parsed")


@pytest.fixture(scope="session")
def kubesim(tmp_path_factory):
    sim = start_kubesim(
        tmp_path_factory.mktemp("kubesim"),
        queues=ALL_SETUPS,
        time_scale=TIME_SCALE,
        extra_apply=[E2E_DIR / "cluster"],
        kueue_config=E2E_DIR / "kueue-config.yaml",
        tls=True,  # as make run: kubectl sends the kubeconfig's token only over HTTPS
    )
    yield sim
    sim.stop()


@pytest.fixture(scope="session")
def database_url():
    with metadata_database() as url:
        yield url


@pytest.fixture(scope="session")
def statsd():
    """A StatsD listener that the session's Airflow sends its metrics to (Airflow's own and the queue
    metrics of kueue_ray.metrics), tags InfluxDB-style."""
    listener = StatsdListener()
    yield listener
    listener.stop()


@pytest.fixture(scope="session")
def airflow(kubesim, database_url, statsd, tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow")
    instance = start_airflow(
        home,
        kubeconfig=kubesim.kubeconfig,
        database_url=database_url,
        extra_env={
            **statsd.airflow_env(),
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": dag_bundles(),
            # Tests unpause what they run, so no scheduled run appears in another test's queue.
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "6",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL": "5",
        },
    )
    try:
        wait_for_dags_or_import_errors(instance, PIPELINES + MAINTENANCE + E2E_DAGS)
        for dag_id in E2E_DAGS:
            instance.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
        yield instance
    finally:
        instance.stop()


HARNESS = pytest.StashKey[E2E]()


@pytest.fixture(autouse=True, scope="module")
def _group_of_the_module(request):
    request.config.stash.setdefault(GROUPS_RUN, set()).add(xdist_group(request.node.nodeid))


@pytest.fixture(autouse=True, scope="module")
def scheduled_dags_paused_again(request):
    """Each module leaves the shared Airflow's DAGs paused as it found them (``E2E.pause_again``)."""
    yield
    if (harness := request.config.stash.get(HARNESS, None)) is not None:
        harness.pause_again()


@pytest.fixture(scope="session")
def e2e(request, airflow, kubesim, tmp_path_factory):
    from kubernetes import client, config

    api_client = config.new_client_from_config(config_file=str(kubesim.kubeconfig))
    harness = E2E(
        airflow=airflow,
        kubesim_url=kubesim.url,
        custom=client.CustomObjectsApi(api_client),
        kubesim_verify=kubesim.verify,
    )
    harness.clear_faults()
    harness.collect_requests()  # kubesim's own setup (--apply) is not the project's traffic
    request.config.stash[HARNESS] = harness
    yield harness
    api_client.close()
    if os.environ.get("PYTEST_XDIST_WORKER") and SECOND_SHARED_AIRFLOW in request.config.stash.get(
        GROUPS_RUN, set()
    ):
        hand_over_to_the_security_tests(harness, kubesim, run_directory(tmp_path_factory))


def hand_over_to_the_security_tests(harness: E2E, kubesim, run_dir: Path) -> None:
    """What tests/e2e/test_99_security.py judges of a session that runs in another xdist worker than it
    (``SECOND_SHARED_AIRFLOW``): the project's calls in its kubesim's request log, and its task logs'
    credential leaks (found here: the credentials stay in this session). Written whole and renamed into
    place: the security tests read it as soon as it exists."""
    logs, leaks = credential_leaks(harness.airflow, Path(kubesim.kubeconfig))
    path = handover_path(run_dir, SECOND_SHARED_AIRFLOW)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"requests": harness.requests, "task_logs": logs, "leaks": leaks}))
    partial.rename(path)


SUPERVISED = ("scheduler", "triggerer")


@pytest.fixture(autouse=True)
def _fresh_faults_and_request_log(request):
    """No fault outlives its test; the request log of every e2e test is kept for the RBAC test.

    Like a production supervisor, restart a scheduler or triggerer that died (standalone does not), with
    a warning: on SQLite (where no PostgreSQL server is found) the scheduler has crashed on runs deleted
    under it (StaleDataError on dag_run), and every later test would fail for that reason alone."""
    if "e2e" not in request.fixturenames:
        yield
        return
    harness: E2E = request.getfixturevalue("e2e")
    for component in SUPERVISED:
        if not harness.airflow.component_processes(component):
            warnings.warn(
                f"airflow {component} had died (see {harness.airflow.log_path}); restarted", stacklevel=1
            )
            harness.airflow.start_component(component)
    yield
    harness.clear_faults()
    harness.collect_requests()
