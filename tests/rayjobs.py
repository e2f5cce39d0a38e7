"""One builder for the RayJob bodies the tests submit by hand (ray.io/v1, as KubeRay v1.7 reads it), so the
shape of a RayJob (and of a Ray cluster's head, which a RayService shares) is written once: each test says only what its RayJob is about (its size, its
entrypoint, its labels).

    >>> body = rayjob_body("train", requests={"cpu": "1"}, labels={"kueue.x-k8s.io/queue-name": "q"})
    >>> body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    {'requests': {'cpu': '1'}, 'limits': {'cpu': '1'}}
    >>> body["metadata"]
    {'name': 'train', 'labels': {'kueue.x-k8s.io/queue-name': 'q'}, 'annotations': {'kubesim.dev/startup': '1'}}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

IMAGE = "rayproject/ray:2.46.0"


def container(name: str, requests: Mapping[str, str], *, limits: bool = True, image: str = IMAGE) -> dict:
    """A Ray container requesting ``requests`` (and limited to them unless ``limits`` is False)."""
    resources = (
        {"requests": dict(requests), "limits": dict(requests)} if limits else {"requests": dict(requests)}
    )
    return {"name": name, "image": image, "resources": resources}


def head_group(pod: Mapping) -> dict:
    """A Ray cluster's ``headGroupSpec`` running ``pod`` (a pod spec: its containers, tolerations...)."""
    return {"rayStartParams": {}, "template": {"spec": dict(pod)}}


def rayjob_body(
    name: str,
    *,
    requests: Mapping[str, str],
    limits: bool = True,
    entrypoint: str = "sleep infinity",
    labels: Mapping[str, str] | None = None,
    startup_s: str | None = "1",
    image: str = IMAGE,
    submission_mode: str | None = "HTTPMode",
    shutdown_after_job_finishes: bool | None = True,
    head_pod: Mapping | None = None,
    worker_groups: Sequence[Mapping] = (),
    namespace: str | None = None,
) -> dict:
    """A RayJob whose head requests ``requests`` and runs ``entrypoint``.

    ``labels``: the metadata's labels (Kueue's queue and priority), left out when None; ``startup_s``:
    kubesim's ``kubesim.dev/startup`` annotation (the pods' start-up time, a property of the nodes), left
    out when None; ``submission_mode`` and ``shutdown_after_job_finishes``: left out when None (KubeRay's
    defaults; its webhook demands ``shutdownAfterJobFinishes`` of a Kueue-managed RayJob);
    ``head_pod``: more fields of the head's pod spec (tolerations); ``worker_groups``: each
    ``{"group", "replicas", "requests"}``, a worker group of that many replicas of that size."""
    metadata: dict = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = dict(labels)
    if startup_s is not None:
        metadata["annotations"] = {"kubesim.dev/startup": startup_s}
    head = {"containers": [container("ray-head", requests, limits=limits, image=image)], **(head_pod or {})}
    cluster: dict = {"headGroupSpec": head_group(head)}
    if worker_groups:
        cluster["workerGroupSpecs"] = [
            {
                "groupName": group["group"],
                "replicas": group.get("replicas", 1),
                "rayStartParams": {},
                "template": {
                    "spec": {"containers": [container("ray-worker", group.get("requests", {}), image=image)]}
                },
            }
            for group in worker_groups
        ]
    spec: dict = {"entrypoint": entrypoint}
    if submission_mode is not None:
        spec["submissionMode"] = submission_mode
    if shutdown_after_job_finishes is not None:
        spec["shutdownAfterJobFinishes"] = shutdown_after_job_finishes
    spec["rayClusterSpec"] = cluster
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata, "spec": spec}
