"""Benchmark-only DAG (``bench.task_end``): the peer, the cncf-kubernetes provider's own Kueue job operator.

``KubernetesStartKueueJobOperator`` as its documentation shows it: a suspended batch/v1 Job in the same
LocalQueue as the RayJobs of ``task_end.py`` (``user-queue``, ``dev-priority``), one pod asking for what
the text classifier's head asks for (2 CPU, 8G, 1 GPU: the queue's single GPU keeps one job of either
kind running at a time), running ``sleep 5`` like their RayJobs; ``wait_until_job_complete=True``,
``deferrable=True`` and the provider's default poll interval (10 s). One task both submits and waits,
as the operator does; its ``execute_complete`` resumes on a worker.

Unlike the pipelines' DAGs this file imports ``kubernetes`` at parse time: the operator's module does,
and its documentation builds ``container_resources`` from ``kubernetes.client.models``.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.cncf.kubernetes.operators.kueue import KubernetesStartKueueJobOperator
from airflow.sdk import DAG
from kubernetes.client import models as k8s

with DAG(
    dag_id="bench_provider_kueue_job",
    description="bench: the provider's KubernetesStartKueueJobOperator, deferrable, in the same LocalQueue",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["bench"],
):
    KubernetesStartKueueJobOperator(
        task_id="kueue_job",
        queue_name="user-queue",
        namespace="ray",
        name="bench-peer",
        image="busybox:1.36",
        cmds=["sleep", "5"],
        labels={"kueue.x-k8s.io/priority-class": "dev-priority"},
        container_resources=k8s.V1ResourceRequirements(
            requests={"cpu": "2", "memory": "8G", "nvidia.com/gpu": "1"},
            limits={"memory": "8G", "nvidia.com/gpu": "1"},
        ),
        parallelism=1,
        wait_until_job_complete=True,
        deferrable=True,
    )
