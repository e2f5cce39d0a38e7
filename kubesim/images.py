"""The container registry as the simulated kubelet sees it: which images cannot be pulled.

Every image pulls by default. ``POST /kubesim/faults {"unpullable_images": ["rayproject/ray:nope"]}``
makes those references fail as a missing tag does on a real registry: the pod's container waits with
``ErrImagePull`` and the containerd message, then with ``ImagePullBackOff`` and the kubelet's
"Back-off pulling image ..." message; each retry after the back-off fails with ``ErrImagePull`` again, as a
kubelet's does, until the setting is cleared (the pod then starts). A
reference is compared as written in the pod spec and with Docker Hub's defaults spelled out
(``docker.io/library/`` for a bare name, ``:latest`` for a missing tag).
"""

from __future__ import annotations

PULL_RETRY = 10.0
"""Simulated seconds a pod waits in ``ImagePullBackOff`` before the next pull attempt (the kubelet's
back-off starts at 10 s)."""
PULL_ATTEMPT = 2.0
"""Simulated seconds a failed attempt shows as ``ErrImagePull`` before the back-off: a real pod spends
most of its time in ``ImagePullBackOff`` and a moment in ``ErrImagePull`` after each attempt."""


def canonical(image: str) -> str:
    """``ray`` -> ``docker.io/library/ray:latest``; ``rayproject/ray:2.52.0`` ->
    ``docker.io/rayproject/ray:2.52.0``: the reference containerd resolves."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and not digest:
        name += ":latest"
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return name + (f"@{digest}" if digest else "")


class ImageRegistry:
    """Which image references fail to pull (``unpullable_images``)."""

    def __init__(self) -> None:
        self.unpullable: frozenset[str] = frozenset()

    def pulls(self, image: str) -> bool:
        return image not in self.unpullable and canonical(image) not in {
            canonical(i) for i in self.unpullable
        }

    def pull_error(self, image: str) -> str:
        """containerd's error for a tag the registry does not have, as the kubelet reports it."""
        ref = canonical(image)
        return (
            f'failed to pull and unpack image "{ref}": failed to resolve reference "{ref}": {ref}: not found'
        )


def image_pull_status(pod: dict, registry: ImageRegistry, now: str, backoff: bool) -> dict | None:
    """The Pending status of a scheduled pod whose images cannot all be pulled: each such container
    waiting with ``ErrImagePull`` (an attempt) or ``ImagePullBackOff`` (between two), the others with
    ``ContainerCreating``; None when every image pulls."""
    containers = pod["spec"].get("containers") or []
    failing = [c for c in containers if not registry.pulls(c.get("image", ""))]
    if not failing:
        return None
    names = [c.get("name", "") for c in containers]

    def waiting(container: dict) -> dict:
        image = container.get("image", "")
        if registry.pulls(image):
            return {"reason": "ContainerCreating"}
        error = registry.pull_error(image)
        if backoff:
            return {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{image}": ErrImagePull: {error}',
            }
        return {"reason": "ErrImagePull", "message": error}

    return {
        "phase": "Pending",
        "qosClass": "Burstable",
        "hostIP": "172.18.0.2",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {
                "type": "Ready",
                "status": "False",
                "reason": "ContainersNotReady",
                "message": f"containers with unready status: [{' '.join(names)}]",
                "lastTransitionTime": now,
            },
            {
                "type": "ContainersReady",
                "status": "False",
                "reason": "ContainersNotReady",
                "message": f"containers with unready status: [{' '.join(names)}]",
                "lastTransitionTime": now,
            },
        ],
        "containerStatuses": [
            {
                "name": c.get("name", ""),
                "ready": False,
                "started": False,
                "restartCount": 0,
                "image": c.get("image", ""),
                "imageID": "",
                "state": {"waiting": waiting(c)},
            }
            for c in containers
        ],
    }
