"""KubeRay over HTTP: a RayJob created and watched with the official client, its driver log read back."""

from __future__ import annotations

import pytest
from kubernetes import client, config, watch

from kubesim.testing import run_kubesim
from tests.rayjobs import rayjob_body

TIME_SCALE = 500.0  # a 10 s RayJob takes 20 ms


@pytest.fixture(scope="module")
def api():
    with run_kubesim(time_scale=TIME_SCALE, controllers=("kubesim.batch", "kubesim.kuberay")) as sim:
        api_client = config.new_client_from_config(config_file=sim.kubeconfig)
        yield api_client
        api_client.close()


def manifest(name: str) -> dict:
    return rayjob_body(
        name,
        requests={"cpu": "1"},
        limits=False,
        image="rayproject/ray:2.52.0",
        entrypoint="python train.py --epochs 2",
        startup_s="2",
        submission_mode=None,
    )


def test_rayjob_completes_and_its_submitter_log_is_readable(api, unique_name):
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    created = custom.create_namespaced_custom_object(
        "ray.io", "v1", "default", "rayjobs", manifest(unique_name)
    )
    seen = []
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object,
        "ray.io",
        "v1",
        "default",
        "rayjobs",
        field_selector=f"metadata.name={unique_name}",
        resource_version=created["metadata"]["resourceVersion"],
        timeout_seconds=20,
    )
    status = {}
    for event in stream:
        status = event["object"].get("status") or {}
        state = status.get("jobDeploymentStatus")
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in ("Complete", "Failed"):
            break
    assert seen[-1] == "Complete" and "Initializing" in seen and "Running" in seen
    assert status["jobStatus"] == "SUCCEEDED"

    pods = core.list_namespaced_pod(
        "default", label_selector=f"batch.kubernetes.io/job-name={unique_name}"
    ).items
    assert len(pods) == 1
    log = core.read_namespaced_pod_log(pods[0].metadata.name, "default", container="ray-job-submitter")
    assert f"Job '{status['jobId']}' submitted successfully" in log
    assert f"Job '{status['jobId']}' succeeded" in log


def test_an_image_the_registry_lacks_keeps_the_head_pod_in_image_pull_back_off_until_it_can_pull(
    api, unique_name
):
    import time

    import httpx

    image = f"rayproject/ray:missing-{unique_name}"
    url = api.configuration.host
    httpx.post(f"{url}/kubesim/faults", json={"unpullable_images": [image]}, verify=False).raise_for_status()
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    body = manifest(unique_name)
    body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = image
    custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", body)

    def head_waiting(reason: str):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for pod in core.list_namespaced_pod("default").items:
                statuses = pod.status.container_statuses or []
                if pod.metadata.name.startswith(unique_name) and "head" in pod.metadata.name and statuses:
                    waiting = statuses[0].state.waiting
                    if waiting is not None and waiting.reason == reason:
                        return pod, waiting
            time.sleep(0.05)
        raise AssertionError(f"no head pod of {unique_name} waiting with {reason}")

    ref = f"docker.io/rayproject/ray:missing-{unique_name}"
    pod, waiting = head_waiting("ErrImagePull")
    assert pod.status.phase == "Pending"
    assert (
        waiting.message
        == f'failed to pull and unpack image "{ref}": failed to resolve reference "{ref}": {ref}: not found'
    )
    _, waiting = head_waiting("ImagePullBackOff")
    assert waiting.message.startswith(f'Back-off pulling image "{image}": ErrImagePull: failed to pull')
    httpx.post(f"{url}/kubesim/faults", json={"unpullable_images": []}, verify=False).raise_for_status()
    deadline = time.monotonic() + 20
    while core.read_namespaced_pod(pod.metadata.name, "default").status.phase != "Running":
        assert time.monotonic() < deadline, "the head pod never ran once the image could be pulled"
        time.sleep(0.05)
