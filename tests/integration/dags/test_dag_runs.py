"""Each DAG end to end with ``dag.test()`` against kubesim with our Kueue manifests applied.

``dag.test()`` needs a migrated metadata DB and reads Airflow's configuration once per process, so each
run happens in a fresh interpreter with its own AIRFLOW_HOME (reference airflow-3.3.md §6, §11). The
``kubernetes_default`` connection points at kubesim's kubeconfig, as in production.

Each test gets a fresh kubesim (behind the same kubeconfig path): the Aurora service runs until deleted and
holds team-a's quota, which must not decide whether another DAG's RayJobs are admitted. Tasks run without
retries, so a failure ends the run at once instead of waiting out minutes of retry delay; a run that still
does not finish is stopped and reported with what kubesim shows, instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kubesim.testing import run_kubesim

ROOT = Path(__file__).resolve().parents[3]
KUEUE_DIR = ROOT / "include" / "manifests" / "kueue"
AIRFLOW = Path(sys.executable).parent / "airflow"
TIME_SCALE = 100
"""A 120 s simulated fine-tune takes 1.2 s."""
RUN_TIMEOUT_S = 120
"""A run takes 5-25 s (the first in a process mostly starts Airflow); past this, something hangs."""


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kubesim") / "kubeconfig"


@pytest.fixture
def cluster(kubeconfig):
    """A fresh kubesim with the shared base and both queue setups (the DAGs pick their LocalQueue)."""
    apply = [*sorted(KUEUE_DIR.glob("*.yaml")), KUEUE_DIR / "single-queue", KUEUE_DIR / "team-queues"]
    with run_kubesim(apply=apply, time_scale=TIME_SCALE, kubeconfig_path=kubeconfig) as sim:
        yield sim


@pytest.fixture(scope="module")
def airflow_env(kubeconfig, tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow_home")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        ),
        "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
    }
    subprocess.run([str(AIRFLOW), "db", "migrate"], env=env, check=True, capture_output=True, timeout=180)
    return env


def dag_test(cluster, env: dict, dag_id: str, *confs: dict) -> list[dict]:
    """Run one DAG with dag.test() once per conf, in order, in one interpreter (Airflow's in-process
    execution API starts once, which is most of a run's time); return per run
    {"state": ..., "tasks": {task_id: state}, "log": ...}."""
    code = f"""
import json
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder={str(ROOT / "dags")!r}).dags[{dag_id!r}]
for task in dag.tasks:
    task.retries = 0
for conf in {list(confs)!r}:
    print("RUN " + json.dumps(conf), flush=True)
    run = dag.test(run_conf=conf)
    tis = run.get_task_instances()
    states = {{ti.task_id: str(ti.state) for ti in tis}}
    print("RESULT " + json.dumps({{"state": str(run.state), "tasks": states}}), flush=True)
"""
    try:
        result = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=RUN_TIMEOUT_S * len(confs),
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or b"").decode(errors="replace")
        pytest.fail(
            f"{dag_id} did not finish within {RUN_TIMEOUT_S}s a run. kubesim shows:\n{cluster_state(cluster)}\n"
            f"last output:\n{output[-3000:]}"
        )
    outcomes = []
    for chunk in ("\n" + result.stdout).split("\nRUN ")[1:]:
        lines = [line for line in chunk.splitlines() if line.startswith("RESULT ")]
        assert lines, f"dag.test crashed:\n{chunk[-5000:]}"
        outcomes.append({**json.loads(lines[-1].removeprefix("RESULT ")), "log": chunk})
    assert len(outcomes) == len(confs), f"dag.test crashed:\n{result.stdout[-5000:]}"
    return outcomes


def explain(outcome: dict, cluster) -> str:
    """Why a run failed: the task states, kubesim's view and the end of the log."""
    return f"tasks: {outcome['tasks']}\nkubesim shows:\n{cluster_state(cluster)}\n{outcome['log'][-4000:]}"


def custom_objects(cluster, plural: str, group: str = "ray.io", version: str = "v1", label: str = ""):
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        return client.CustomObjectsApi(api).list_namespaced_custom_object(
            group, version, "ray", plural, label_selector=label
        )["items"]
    finally:
        api.close()


def cluster_state(cluster) -> str:
    """One line per RayJob, RayService and Workload in namespace ray: what a stuck run is waiting for."""
    lines = []
    for job in custom_objects(cluster, "rayjobs"):
        status = job.get("status") or {}
        lines.append(
            f"RayJob {job['metadata']['name']}: {status.get('jobDeploymentStatus')!r} "
            f"{status.get('reason') or ''} {status.get('message') or ''}".rstrip()
        )
    for service in custom_objects(cluster, "rayservices"):
        status = service.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        pending = status.get("pendingServiceStatus") or {}
        lines.append(
            f"RayService {service['metadata']['name']}: Ready={ready.get('status')} {ready.get('reason')}; "
            f"suspend={(service['spec'].get('rayClusterConfig') or {}).get('suspend')}; pending RayCluster "
            f"{pending.get('rayClusterName')} state={(pending.get('rayClusterStatus') or {}).get('state')}"
        )
    for workload in custom_objects(cluster, "workloads", "kueue.x-k8s.io", "v1beta2"):
        conditions = {c["type"]: c for c in (workload.get("status") or {}).get("conditions") or []}
        admitted = conditions.get("Admitted") or conditions.get("QuotaReserved") or {}
        lines.append(
            f"Workload {workload['metadata']['name']}: {admitted.get('type')}={admitted.get('status')} "
            f"{admitted.get('reason')}: {admitted.get('message')}"
        )
    return "\n".join(lines) or "(no RayJobs, RayServices or Workloads in namespace ray)"


def test_text_classifier_runs_at_the_requested_priority(cluster, airflow_env):
    [outcome] = dag_test(
        cluster, airflow_env, "text_classifier_finetune", {"priority": "prod-priority", "epochs": 1}
    )
    assert outcome["state"].endswith("success"), explain(outcome, cluster)
    assert set(outcome["tasks"].values()) == {"success"}
    jobs = custom_objects(cluster, "rayjobs", label="airflow.apache.org/dag-id=text_classifier_finetune")
    assert [j["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] for j in jobs] == ["prod-priority"]
    assert jobs[0]["status"]["jobDeploymentStatus"] == "Complete"


def test_aurora_fine_tunes_publishes_and_serves(cluster, airflow_env):
    # serve_ready_timeout: the service is Ready within a second at this time scale; a stuck one fails the
    # deploy_serve task with its Ready condition instead of waiting the production default of 30 minutes.
    [outcome] = dag_test(
        cluster, airflow_env, "aurora_finetune_and_serve", {"queue": "team-a", "serve_ready_timeout": 10}
    )
    assert outcome["state"].endswith("success"), explain(outcome, cluster)
    assert set(outcome["tasks"].values()) == {"success"}
    # The deploy task's log says what Serve reported when it began serving.
    assert "serves aurora-forecast: every application RUNNING, every deployment HEALTHY" in outcome["log"]


def test_llm_trains_then_infers_and_can_infer_alone(cluster, airflow_env):
    trained, alone = dag_test(
        cluster,
        airflow_env,
        "llm_train_and_batch_inference",
        {"queue": "team-b"},
        {"queue": "team-b", "train": False},
    )
    assert trained["state"].endswith("success"), explain(trained, cluster)
    assert set(trained["tasks"].values()) == {"success"}
    assert alone["state"].endswith("success"), explain(alone, cluster)
    assert alone["tasks"]["train"] == "skipped" and alone["tasks"]["wait_inference"] == "success"
    published, used = (run["log"].partition("Using model ")[2].split(" ", 1)[0] for run in (trained, alone))
    assert published and used == published, "inference alone must use the model the training run published"
