"""The walkthrough through Airflow against the real control plane: real Kueue v0.19.2 queues the dev
backfill, preempts a running dev RayJob for the prod run, and every run completes.

`make demo`'s steps (devtools.demo.walkthrough: a three-day backfill of `text_classifier_finetune` at
dev priority, then a manual prod run once a backfill RayJob runs) on an Airflow of this test's own whose
`kubernetes_default` connection is the real stack of devtools/realcluster.py (etcd, kube-apiserver,
kube-controller-manager, Kueue, the KubeRay operator) with include/manifests/kueue/'s single-queue setup.
KubeRay submits each Ray job through its K8sJobMode submitter to the head's dashboard and reads its
state there, at the head Service's name; what the Ray job does there is kubesim's simulation
(realcluster/README.md).

Skipped, saying why, where the real stack's binaries are not built (`make realcluster`, needs Go) or
namespaces cannot be made.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from devtools import demo
from devtools.airflow import running_airflow
from devtools.kubesim_process import setup_manifests
from devtools.postgres import metadata_database
from devtools.realcluster import RealClusterUnavailable, apply_manifests, run_realcluster

pytestmark = pytest.mark.timeout(900)

TIME_SCALE = 10.0
DEADLINE_SECONDS = 600


@pytest.fixture(scope="module")
def real_stack(tmp_path_factory):
    try:
        stack = run_realcluster(tmp_path_factory.mktemp("realcluster"), time_scale=TIME_SCALE)
        real = stack.__enter__()
    except RealClusterUnavailable as exc:
        pytest.skip(str(exc))
    try:
        apply_manifests(real.kubeconfig, setup_manifests("single-queue"))
        yield real
    finally:
        stack.__exit__(None, None, None)


def test_the_walkthrough_runs_through_airflow_on_real_kueue(real_stack, tmp_path):
    deadline = time.monotonic() + DEADLINE_SECONDS
    with (
        metadata_database() as database_url,
        running_airflow(
            tmp_path / "airflow", kubeconfig=real_stack.kubeconfig, database_url=database_url
        ) as airflow,
    ):
        airflow.wait_for_dags([demo.DAG_ID])
        first_day = datetime.now(UTC).date() - timedelta(days=3)
        done = demo.walkthrough(
            airflow, real_stack.kubeconfig, first_day=first_day, deadline=deadline, say=lambda line: None
        )
        rows = demo.timeline_rows(airflow, sorted(done.runs.values(), key=lambda r: r["dag_run_id"]))

    assert demo.matches_walkthrough(rows) == [], rows
    prod = next(row for row in rows if row["priority"] == "prod-priority")
    assert prod["result"] == "success" and prod["preemptions"] == 0
