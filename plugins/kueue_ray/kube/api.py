"""Where this library finds things in the Kubernetes API, and how it reads the API's timestamps.

Group, version and plural of every resource the plugin reads or writes are spelled here once, so the hooks,
the watch hub, the UI and the DAG files address the same objects. Pure data: importing it imports nothing
else, so a DAG file may use it without slowing down parsing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


def parse_time(value: str | None) -> datetime | None:
    """A Kubernetes timestamp (RFC 3339, ``Z`` or an offset) as an aware datetime; None for None or ""."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Resource:
    """A custom resource's coordinates, in the order the ``kubernetes`` clients take them."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        """``group/version``, as a manifest's ``apiVersion`` spells it."""
        return f"{self.group}/{self.version}"


RAY_GROUP, RAY_VERSION = "ray.io", "v1"
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"

RAYJOB = Resource(RAY_GROUP, RAY_VERSION, "rayjobs")
RAYSERVICE = Resource(RAY_GROUP, RAY_VERSION, "rayservices")
RAYCLUSTER = Resource(RAY_GROUP, RAY_VERSION, "rayclusters")
WORKLOAD = Resource(KUEUE_GROUP, KUEUE_VERSION, "workloads")
LOCAL_QUEUE = Resource(KUEUE_GROUP, KUEUE_VERSION, "localqueues")
CLUSTER_QUEUE = Resource(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")
"""Cluster-scoped."""
WORKLOAD_PRIORITY_CLASS = Resource(KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses")
"""Cluster-scoped."""
