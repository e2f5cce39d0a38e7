"""`make run`'s decisions, without starting anything: which cluster, which queues, whether DAGs start
unpaused, how a taken port and a dead component are reported, and how a second start in the same
checkout gets a clean slate."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from devtools import run
from devtools.airflow import component_log_tail, component_of, port_user
from devtools.kubesim_process import ALL_SETUPS, KUEUE_MANIFESTS, local_queues, queue_setups, setup_manifests

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_are_kubesim_on_port_8080_in_real_time_with_dags_unpaused():
    settings = run.settings_from({})
    assert settings == run.Settings(
        port=8080, time_scale=1.0, cluster="kubesim", kubeconfig=None, unpause=True
    )


def test_an_exported_kubeconfig_alone_does_not_select_a_real_cluster(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\n")
    settings = run.settings_from({"KUBECONFIG": str(kubeconfig)})
    assert settings.cluster == "kubesim" and settings.kubeconfig is None and settings.unpause


def test_a_real_cluster_starts_with_dags_paused_unless_unpause_is_asked_for(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("apiVersion: v1\n")
    env = {"CLUSTER": "kubeconfig", "KUBECONFIG": str(kubeconfig)}
    paused = run.settings_from(env)
    assert (paused.cluster, paused.kubeconfig, paused.unpause) == ("kubeconfig", kubeconfig, False)
    assert run.settings_from({**env, "UNPAUSE": "1"}).unpause is True


def test_the_harness_s_real_control_plane_is_this_run_s_own_so_its_dags_start_unpaused():
    """CLUSTER=real starts a throwaway real control plane (devtools/realcluster.py), not someone's cluster:
    no KUBECONFIG is read, and the DAGs run at once as on kubesim."""
    settings = run.settings_from({"CLUSTER": "real", "KUBECONFIG": "/nowhere/config"})
    assert (settings.cluster, settings.kubeconfig, settings.unpause) == ("real", None, True)
    assert run.settings_from({"CLUSTER": "real", "UNPAUSE": "0"}).unpause is False


def test_multikueue_is_kubesim_as_a_manager_with_its_dags_unpaused():
    settings = run.settings_from({"CLUSTER": "multikueue", "KUBECONFIG": "/nowhere/config"})
    assert (settings.cluster, settings.kubeconfig, settings.unpause) == ("multikueue", None, True)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AIRFLOW_PORT": "80800"}, "AIRFLOW_PORT='80800'"),
        ({"AIRFLOW_PORT": "http"}, "AIRFLOW_PORT='http'"),
        ({"TIME_SCALE": "fast"}, "TIME_SCALE='fast'"),
        ({"TIME_SCALE": "0"}, "TIME_SCALE='0'"),
        ({"CLUSTER": "kind"}, "CLUSTER='kind'"),
        ({"UNPAUSE": "yes"}, "UNPAUSE='yes'"),
        ({"CLUSTER": "kubeconfig", "KUBECONFIG": "/nowhere/config"}, "/nowhere/config does not exist"),
        ({"CLUSTER": "kubeconfig", "KUBECONFIG": "/a:/b"}, "lists several files"),
    ],
)
def test_a_bad_knob_is_refused_naming_the_variable_and_value(env, named):
    with pytest.raises(run.RunError, match=named.replace("(", r"\(")):
        run.settings_from(env)


def test_the_banner_names_the_real_clusters_context_and_server(tmp_path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "current-context: prod\n"
        "contexts: [{name: prod, context: {cluster: big}}]\n"
        "clusters: [{name: big, cluster: {server: 'https://k8s.example.com'}}]\n"
    )
    assert run.describe_kubeconfig(kubeconfig) == "context prod, server https://k8s.example.com"


def test_make_run_installs_every_queue_setup_so_every_dag_default_queue_exists():
    """Each shipped DAG's default LocalQueue (its ``queue`` param) is one that make run's kubesim has."""
    from airflow.dag_processing.dagbag import DagBag
    from kueue_ray.params import NAMESPACE

    applied = setup_manifests(ALL_SETUPS)
    assert [p for p in applied if p.is_dir()] == [KUEUE_MANIFESTS / name for name in queue_setups()]
    assert len(queue_setups()) >= 2
    installed = set(local_queues(applied))
    dagbag = DagBag(dag_folder=str(ROOT / "dags"))
    defaults = {
        dag_id: f"{NAMESPACE}/{dag.params['queue']}"
        for dag_id, dag in dagbag.dags.items()
        if "queue" in dag.params
    }
    assert len(defaults) == 3
    assert {dag_id: queue for dag_id, queue in defaults.items() if queue not in installed} == {}


def test_one_queue_setup_is_the_base_files_and_that_folder():
    setup = queue_setups()[0]
    applied = setup_manifests(setup)
    assert applied[-1] == KUEUE_MANIFESTS / setup
    assert all(p.suffix == ".yaml" and p.parent == KUEUE_MANIFESTS for p in applied[:-1])
    with pytest.raises(ValueError, match="'nope' is not a folder"):
        setup_manifests("nope")


def test_a_taken_port_is_reported_with_the_process_holding_it():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        holder = port_user(port)
    assert holder is not None and f"pid {os.getpid()}" in holder
    assert port_user(port) is None


def test_standalone_components_are_recognised_by_command_line_or_process_title():
    assert component_of(["/venv/bin/python3", "/venv/bin/airflow", "scheduler"]) == "scheduler"
    assert component_of(["/venv/bin/python3", "/venv/bin/airflow", "triggerer", "--skip-serve-logs"]) == (
        "triggerer"
    )
    assert component_of(["/venv/bin/python3", "/venv/bin/airflow", "tasks", "scheduler"]) is None
    assert component_of(["airflow api_server -- host:127.0.0.1 port:8080", "", ""]) == "api-server"
    assert component_of(["airflow worker -- LocalExecutor: <idle>", ""]) is None
    assert component_of(["airflow serve-logs", ""]) is None


def test_a_components_log_tail_leaves_out_the_other_components(tmp_path):
    log = tmp_path / "standalone.log"
    log.write_text(
        "scheduler  | started\n"
        "api-server | ERROR: [Errno 98] address already in use\n"
        "triggerer  | started\n"
        "api-server | Application startup failed. Exiting.\n"
    )
    assert component_log_tail(log, "api-server") == (
        "api-server | ERROR: [Errno 98] address already in use\napi-server | Application startup failed. Exiting."
    )
    assert component_log_tail(log, "scheduler", lines=5) == "scheduler  | started"
    assert component_log_tail(tmp_path / "missing.log") == ""


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(run, "RUN_DIR", tmp_path)
    monkeypatch.setattr(run, "AIRFLOW_HOME", tmp_path / "airflow")
    monkeypatch.setattr(run, "PREVIOUS", tmp_path / "previous")
    monkeypatch.setattr(run, "CLI_STATE", tmp_path / "airflow-cli.json")
    monkeypatch.setattr(run, "LOCK", tmp_path / "make-run.lock")
    return tmp_path


def test_a_start_moves_the_previous_starts_state_aside(run_dir):
    (run_dir / "airflow").mkdir()
    (run_dir / "airflow" / "airflow.db").write_text("old runs of a cluster that is gone")
    (run_dir / "kubesim.log").write_text("kubesim listening on http://127.0.0.1:1\n")
    (run_dir / "kubesim.kubeconfig").write_text("server: http://127.0.0.1:1\n")
    (run_dir / "kubesim.worker1.kubeconfig").write_text("server: http://127.0.0.1:2\n")  # CLUSTER=multikueue
    (run_dir / "previous").mkdir()
    (run_dir / "previous" / "older.log").write_text("two starts ago")

    run.keep_previous()

    assert not (run_dir / "airflow").exists()
    assert not (run_dir / "kubesim.log").exists() and not (run_dir / "kubesim.kubeconfig").exists()
    assert not (run_dir / "kubesim.worker1.kubeconfig").exists()
    assert (
        run_dir / "previous" / "airflow" / "airflow.db"
    ).read_text() == "old runs of a cluster that is gone"
    assert (run_dir / "previous" / "kubesim.log").exists()
    assert not (run_dir / "previous" / "older.log").exists()


def test_a_second_make_run_in_the_same_checkout_is_refused_while_the_first_runs(run_dir):
    first = run.take_lock()
    try:
        with pytest.raises(run.RunError, match=f"already running in this checkout \\(pid {os.getpid()}\\)"):
            run.take_lock()
    finally:
        os.close(first)
    os.close(run.take_lock())  # free again once the first is gone


def test_a_port_the_previous_start_left_in_time_wait_counts_as_free():
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn, the api-server, does
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its port goes to TIME_WAIT
        client.close()
    assert port_user(port) is None


def test_no_component_starts_airflows_own_log_server_and_each_team_gets_a_triggerer():
    """Airflow 3.3.2's scheduler and triggerer would each start a log server on every interface; the
    loopback one of devtools.components serves their logs instead."""
    from devtools.components import component_commands

    commands = component_commands(["nlp", "platform"])
    for name, command in commands:
        if name in ("scheduler", "triggerer"):
            assert "--skip-serve-logs" in command, command
    triggerers = [
        command[command.index("--team-name") + 1] for name, command in commands if name == "triggerer"
    ]
    assert triggerers == ["nlp", "platform"]
    assert [name for name, _ in component_commands([])].count("triggerer") == 1
    assert commands[-1] == ("serve-logs", [sys.executable, "-m", "devtools.components", "--serve-logs"])


def test_the_multikueue_banner_names_the_managers_queue_and_each_workers_connection_and_kubeconfig(tmp_path):
    from devtools.kubesim_process import KubesimProcess

    workers = {name: tmp_path / f"kubesim.{name}.kubeconfig" for name in ("worker1", "worker2")}
    kubesim = KubesimProcess(
        url="https://127.0.0.1:1",
        kubeconfig=tmp_path / "kubesim.kubeconfig",
        process=None,
        log_path=tmp_path / "kubesim.log",
        token="t",
        workers=workers,
    )

    class FakeAirflow:
        url, home, log_path = "http://127.0.0.1:8080", tmp_path, tmp_path / "airflow.log"

    settings = run.settings_from({"CLUSTER": "multikueue"})
    text = run.banner(settings, kubesim, FakeAirflow(), "postgresql://x")
    assert "ray/multikueue-queue" in text.split("LocalQueues: ")[1].splitlines()[0]
    for name, path in workers.items():
        assert f"Worker {name}: Airflow connection kueue_worker_{name}, kubectl --kubeconfig" in text
        assert os.path.relpath(path) in text
