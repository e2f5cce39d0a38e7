"""batch/v1 Jobs over HTTP with the ``kubernetes`` client: served and validated by the API server, run by
the Job controller, queued, admitted and evicted by Kueue's batch/job integration."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.integration.kubesim.test_kueue_http import KUEUE, condition, eventually, queues, rayjob, submit


@pytest.fixture
def namespace(api, request):
    name = request.node.name.replace("_", "-")[:40].strip("-")
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name


def job(name: str, command: str, *, queue: str | None = "q", restart_policy: str | None = "Never") -> dict:
    pod_spec = {
        "containers": [
            {
                "name": "base",
                "image": "busybox",
                "command": ["sh", "-c", command],
                "resources": {"requests": {"cpu": "1"}},
            }
        ]
    }
    if restart_policy:
        pod_spec["restartPolicy"] = restart_policy
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"template": {"spec": pod_spec}}}


def test_the_api_server_refuses_a_job_whose_pods_restart_always(api, namespace):
    with pytest.raises(ApiException) as refused:
        client.BatchV1Api(api).create_namespaced_job(namespace, job("pi", "sleep 1", restart_policy=None))
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["message"] == (
        'Job.batch "pi" is invalid: spec.template.spec.restartPolicy: Unsupported value: "Always": '
        'supported values: "OnFailure", "Never"'
    )


def test_a_queued_job_is_admitted_onto_its_flavor_and_completes(api, namespace):
    custom = client.CustomObjectsApi(api)
    queues(custom, namespace, f"{namespace}-cq", flavor_labels={"pool": "cpu"})
    batch = client.BatchV1Api(api)
    created = batch.create_namespaced_job(namespace, job("pi", "echo done; sleep 5"))
    assert created.spec.suspend is True

    # Every change since the creation, in order (Kueue may have admitted it before this watch starts).
    stream = watch.Watch()
    seen = []
    changes = stream.stream(
        batch.list_namespaced_job,
        namespace,
        resource_version=created.metadata.resource_version,
        timeout_seconds=20,
    )
    for event in changes:
        job_ = event["object"]
        seen.append((job_.spec.suspend, [c.type for c in job_.status.conditions or [] if c.status == "True"]))
        if "Complete" in seen[-1][1]:
            stream.stop()
    assert seen[-1] == (False, ["SuccessCriteriaMet", "Complete"])

    done = batch.read_namespaced_job_status("pi", namespace)
    assert done.spec.template.spec.node_selector == {"pool": "cpu"}
    assert done.status.succeeded == 1 and done.status.completion_time is not None

    def finished():
        workload = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"][0]
        return workload if condition(workload, "Finished") else False

    workload = eventually(finished)
    assert workload["metadata"]["name"].startswith("job-pi-")
    assert condition(workload, "Finished")["reason"] == "Succeeded"


def test_deactivating_the_workload_suspends_the_job_and_deletes_its_pods(api, namespace):
    custom = client.CustomObjectsApi(api)
    queues(custom, namespace, f"{namespace}-cq", flavor_labels={"pool": "cpu"})
    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    batch.create_namespaced_job(namespace, job("forever", "sleep infinity"))
    eventually(lambda: batch.read_namespaced_job_status("forever", namespace).status.ready == 1)
    workload = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"][0]
    custom.patch_namespaced_custom_object(
        *KUEUE, namespace, "workloads", workload["metadata"]["name"], {"spec": {"active": False}}
    )

    def stopped():
        current = batch.read_namespaced_job_status("forever", namespace)
        assert current.spec.suspend is True and not core.list_namespaced_pod(namespace).items
        # The Job controller says so in a status write of its own, after Kueue's suspend.
        assert any(c.type == "Suspended" and c.status == "True" for c in current.status.conditions or [])
        # Kueue restores the template (no flavor's nodeSelector) in a write after the suspend.
        assert current.spec.template.spec.node_selector is None
        return current

    eventually(stopped)


def test_a_rayjobs_submitter_job_runs_as_a_job_without_a_workload_of_its_own_even_with_a_default_queue(
    api, namespace
):
    custom = client.CustomObjectsApi(api)
    cq = f"{namespace}-cq"
    queues(custom, namespace, cq, cpu="4")
    custom.create_namespaced_custom_object(
        *KUEUE,
        namespace,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "default"},
            "spec": {"clusterQueue": cq},
        },
    )
    submitter = {"name": "ray-job-submitter", "image": "ray", "resources": {"requests": {"cpu": "500m"}}}
    manifest = rayjob(
        "train",
        entrypoint="python train.py --epochs 2",
        submissionMode="K8sJobMode",
        submitterPodTemplate={"spec": {"restartPolicy": "Never", "containers": [submitter]}},
    )
    del manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    created = submit(custom, namespace, manifest)
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"

    def complete():
        status = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "train")["status"]
        return status if status.get("jobDeploymentStatus") == "Complete" else False

    assert eventually(complete, timeout=30)["jobStatus"] == "SUCCEEDED"

    batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
    submitter = batch.read_namespaced_job("train", namespace)
    assert submitter.metadata.owner_references[0].kind == "RayJob"
    assert "kueue.x-k8s.io/queue-name" not in submitter.metadata.labels
    assert submitter.spec.suspend is False
    assert submitter.status.succeeded == 1
    assert [c.type for c in submitter.status.conditions if c.status == "True"] == [
        "SuccessCriteriaMet",
        "Complete",
    ]
    uid = submitter.metadata.uid
    pods = core.list_namespaced_pod(namespace, label_selector=f"controller-uid={uid}").items
    assert [(p.metadata.labels["job-name"], p.status.phase) for p in pods] == [("train", "Succeeded")]
    log = core.read_namespaced_pod_log(pods[0].metadata.name, namespace)
    assert "submitted successfully" in log and "epoch 2/2" in log

    workloads = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    assert [w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] for w in workloads] == [
        created["metadata"]["uid"]
    ]
