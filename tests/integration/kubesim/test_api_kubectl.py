"""kubectl 1.32 against kubesim: apply, get (server-side tables), describe, logs, delete."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from kubernetes import client

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH"),
]


def kubectl(sim, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    # A discovery cache of its own, beside the kubeconfig: kubectl's shared one (~/.kube/cache) is keyed
    # by host and port, and an earlier kubesim on the same port would answer discovery from it.
    cache = Path(sim.kubeconfig).parent / "kubectl-cache"
    result = subprocess.run(
        ["kubectl", "--kubeconfig", sim.kubeconfig, "--cache-dir", str(cache), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result


@pytest.fixture
def manifest(tmp_path, unique_name):
    path = tmp_path / "objects.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            apiVersion: v1
            kind: Namespace
            metadata:
              name: {unique_name}
            ---
            apiVersion: ray.io/v1
            kind: RayJob
            metadata:
              name: demo
              namespace: {unique_name}
            spec:
              entrypoint: python -c "print(1)"
            ---
            apiVersion: kueue.x-k8s.io/v1beta2
            kind: WorkloadPriorityClass
            metadata:
              name: {unique_name}
            value: 7
            """
        )
    )
    return path


def test_apply_get_describe_delete(kubesim_api, manifest, unique_name):
    created = kubectl(kubesim_api, "apply", "-f", str(manifest)).stdout
    assert "rayjob.ray.io/demo created" in created
    assert "unchanged" in kubectl(kubesim_api, "apply", "-f", str(manifest)).stdout

    table = kubectl(kubesim_api, "get", "rayjobs", "-n", unique_name).stdout
    assert table.splitlines()[0].split()[:5] == ["NAME", "JOB", "STATUS", "DEPLOYMENT", "STATUS"]
    assert table.splitlines()[1].startswith("demo ")
    assert "rayjob.ray.io/demo" in kubectl(kubesim_api, "get", "rayjobs,workloads", "-A").stdout
    assert "7" in kubectl(kubesim_api, "get", "wpc", unique_name).stdout.splitlines()[1].split()

    described = kubectl(kubesim_api, "describe", "rayjob", "demo", "-n", unique_name).stdout
    assert "Entrypoint:" in described and f"Namespace:    {unique_name}" in described

    kubectl(kubesim_api, "delete", "rayjob", "demo", "-n", unique_name)
    assert kubectl(kubesim_api, "get", "rayjob", "demo", "-n", unique_name, check=False).returncode == 1
    kubectl(kubesim_api, "delete", "wpc", unique_name)
    kubectl(kubesim_api, "delete", "namespace", unique_name)


def test_apply_reports_schema_errors(kubesim_api, tmp_path, unique_name):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: WorkloadPriorityClass\nmetadata:\n  name: {unique_name}\nvalue: high\n"
    )
    result = kubectl(kubesim_api, "apply", "-f", str(bad), check=False)
    assert result.returncode == 1
    assert "is invalid" in result.stderr and "value" in result.stderr


def test_logs_of_a_job_come_from_its_pod(kubesim_api, api_client, unique_name):
    labels = {"batch.kubernetes.io/job-name": unique_name}
    job = {
        "metadata": {"name": unique_name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "submitter", "image": "ray"}], "restartPolicy": "Never"},
            },
        },
    }
    created = client.BatchV1Api(api_client).create_namespaced_job("default", job)
    # The API server ties the Job's pods to it by uid (selector and template labels): the pod carries them
    # as the Job controller's pods do.
    pod = {
        "metadata": {"name": f"{unique_name}-x1", "labels": created.spec.template.metadata.labels},
        "spec": job["spec"]["template"]["spec"],
    }
    client.CoreV1Api(api_client).create_namespaced_pod("default", pod)
    kubesim_api.call(
        kubesim_api.cluster.logs.append, "default", f"{unique_name}-x1", "submitter", "job finished"
    )

    assert kubectl(kubesim_api, "logs", f"job/{unique_name}").stdout == "job finished\n"
    jobs = kubectl(kubesim_api, "get", "jobs", unique_name).stdout
    assert jobs.split()[:5] == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    kubectl(kubesim_api, "delete", "job", unique_name)
    kubectl(kubesim_api, "delete", "pod", f"{unique_name}-x1")


def test_kubectl_authenticates_only_over_tls(tmp_path):
    """kubectl sends a bearer token only over HTTPS: with --token alone it is refused (401) like any
    anonymous client; with --tls the kubeconfig carries kubesim's CA and kubectl is let in."""
    from devtools.kubesim_process import start_kubesim

    for tls, allowed in ((False, False), (True, True)):
        sim = start_kubesim(tmp_path / f"tls-{tls}", queues="single-queue", tls=tls)
        try:
            assert sim.url.startswith("https://" if tls else "http://")
            result = kubectl(sim, "-n", "ray", "get", "localqueues", "-o", "name", check=False)
            assert (result.returncode == 0) is allowed, result.stderr
            if allowed:
                assert result.stdout.split() == ["localqueue.kueue.x-k8s.io/user-queue"]
            else:
                assert "provide credentials" in result.stderr
        finally:
            sim.stop()
