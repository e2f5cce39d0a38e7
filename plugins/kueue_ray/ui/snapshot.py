"""What the Kueue pages are built from: a ``Snapshot`` of the cluster as the UI's cache holds it, the
cache's ``Health``, and a ClusterQueue's latest visibility read (``PendingRead``). Plain values.

Apart from ``kueue_ray.ui.cache`` (the loops and reads that keep them current) so the views, which only
read them, do not import the cache's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kueue_ray.naming import AirflowIdentity


@dataclass(frozen=True)
class Health:
    """Whether the cache is in step with the API server, and if not since when and why."""

    reachable: bool
    synced_at: float | None
    """Wall time the shown state was last known to be current: now while healthy; otherwise the last
    success (list, open watch, event, visibility read) of whatever is failing."""
    failing_since: float | None
    error: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reachable": self.reachable,
            "synced_at": self.synced_at,
            "failing_since": self.failing_since,
            "error": self.error,
        }


@dataclass(frozen=True)
class PendingRead:
    """The latest visibility summary of one ClusterQueue; ``error`` set when the latest read failed (the
    summary is then the last good one, ``fetched_at`` saying how old)."""

    summary: dict | None
    fetched_at: float | None
    error: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the views read: plain objects as the API server returned them, and what the cache derived."""

    cluster_queues: list[dict]
    local_queues: list[dict]
    workloads: list[dict]
    rayjobs: list[dict]
    identities: dict[str, AirflowIdentity]
    """RayJob, RayService or RayCluster uid -> the task instance that owns it (its annotations), also for
    objects already deleted."""
    namespaces: list[str]
    health: Health
    version: int
    rayservices: list[dict] = field(default_factory=list)
    """This project's RayServices (deploy tasks)."""
    rayclusters: list[dict] = field(default_factory=list)
    """This project's RayClusters (a RayService's, a RayJob's)."""
    preempted_by: dict[str, list[dict]] = field(default_factory=dict)
    """Preemptor job uid -> the preemptions of RayJobs it caused, as their live timelines recorded them:
    [{"job_uid", "at" (epoch), "reason", "message"}], oldest first."""
