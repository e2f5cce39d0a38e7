"""Which images the simulated registry lacks, and the waiting reasons a kubelet writes for them."""

from kubesim.images import ImageRegistry, canonical, image_pull_status


def test_references_are_compared_with_docker_hubs_defaults_spelled_out():
    assert canonical("ray") == "docker.io/library/ray:latest"
    assert canonical("rayproject/ray:2.52.0") == "docker.io/rayproject/ray:2.52.0"
    assert canonical("ghcr.io/org/img") == "ghcr.io/org/img:latest"
    registry = ImageRegistry()
    registry.unpullable = frozenset({"docker.io/rayproject/ray:nope"})
    assert not registry.pulls("rayproject/ray:nope") and registry.pulls("rayproject/ray:2.52.0")


def test_only_the_containers_whose_image_fails_wait_on_the_pull():
    registry = ImageRegistry()
    registry.unpullable = frozenset({"rayproject/ray:nope"})
    pod = {
        "spec": {
            "containers": [
                {"name": "ray-head", "image": "rayproject/ray:nope"},
                {"name": "side", "image": "busybox"},
            ]
        }
    }
    first = image_pull_status(pod, registry, "2026-12-04T10:00:00Z", backoff=False)
    head, side = (s["state"]["waiting"] for s in first["containerStatuses"])
    assert head["reason"] == "ErrImagePull" and side == {"reason": "ContainerCreating"}
    later = image_pull_status(pod, registry, "2026-12-04T10:00:10Z", backoff=True)
    assert later["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    assert first["phase"] == "Pending"
    registry.unpullable = frozenset()
    assert image_pull_status(pod, registry, "2026-12-04T10:00:20Z", backoff=True) is None
