"""What the synchronous and the asynchronous hook share: where Kueue's visibility API and a RayJob's
submitter pod are found, the pure readings of what the cluster answers, and what either does when a
read only meant to enrich a message fails.

Apart from ``kueue_ray.hook`` (worker side, ``kubernetes``) and ``kueue_ray.async_hook`` (triggerer,
``kubernetes_asyncio``) so that the two clients' code stays thin and neither hook depends on the other.
Pure but for one log line: no cluster I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from kueue_ray.kube.errors import describe_error

log = logging.getLogger(__name__)

VISIBILITY_PATH = (
    "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues/{name}/pendingworkloads"
)
VISIBILITY_LIMIT = 100000
"""Kueue's cap for ``limit`` (default 1000): a deep queue's positions and pending count stay exact."""
VISIBILITY_TIMEOUT_S = 10
"""How long a queue position may hold up the log line it decorates."""
SUBMITTER_CONTAINER = "ray-job-submitter"
SUBMITTER_JOB_LABEL = "batch.kubernetes.io/job-name"


@dataclass(frozen=True, slots=True)  # the triggerer indexes one per pending Workload
class QueuePosition:
    """Where a pending Workload stands (0-based, as Kueue's visibility API reports it)."""

    in_local_queue: int
    in_cluster_queue: int
    pending_in_local_queue: int

    def describe(self) -> str:
        """The Kueue tab's sentence for the same fact, in its order: the ClusterQueue's position (the one
        that decides admission) first, then the LocalQueue's. The tab counts the ClusterQueue's pending
        workloads; the task reads only its LocalQueue's (namespaced access), so the count is that queue's.

        >>> QueuePosition(in_local_queue=1, in_cluster_queue=3, pending_in_local_queue=3).describe()
        'position 4 in the ClusterQueue (2 of 3 pending in its LocalQueue)'
        """
        return (
            f"position {self.in_cluster_queue + 1} in the ClusterQueue ({self.in_local_queue + 1} of "
            f"{self.pending_in_local_queue} pending in its LocalQueue)"
        )


def positions_from_items(items: Iterable[dict]) -> dict[str, QueuePosition]:
    """Every pending Workload's position, by Workload name, from the items of a visibility
    ``PendingWorkloadsSummary`` (a list, or the items of a ``kueue_ray.kube.listbody.ListBody`` decoded one at
    a time, so that thousands of them are never all held at once).

    One pass over the list: the triggerer shares one summary among all the tasks queued in a LocalQueue,
    and thousands of them looking their own Workload up in it must not each scan it."""
    listed: list[tuple[str, int, int]] = []
    for item in items:
        name = (item.get("metadata") or {}).get("name") or ""
        listed.append(
            (name, int(item.get("positionInLocalQueue", 0)), int(item.get("positionInClusterQueue", 0)))
        )
    positions: dict[str, QueuePosition] = {}
    for name, in_local_queue, in_cluster_queue in listed:
        if name and name not in positions:
            positions[name] = QueuePosition(in_local_queue, in_cluster_queue, len(listed))
    return positions


def positions_from_summary(summary: dict) -> dict[str, QueuePosition]:
    """``positions_from_items`` of a decoded ``PendingWorkloadsSummary``."""
    return positions_from_items(summary.get("items") or [])


def position_from_summary(summary: dict, workload_name: str) -> QueuePosition | None:
    """Find ``workload_name`` in a visibility ``PendingWorkloadsSummary``; None when it is not pending."""
    return positions_from_summary(summary).get(workload_name)


def newest(items: list[dict]) -> dict | None:
    """The most recently created object of ``items`` (Kueue may briefly keep an old Workload)."""
    return max(items, key=lambda o: o["metadata"].get("creationTimestamp") or "", default=None)


def quota_unread(exc: Exception, namespace: str, local_queue: str) -> tuple[None, list[dict]]:
    """What ``quota_state`` (both hooks) answers when the ClusterQueue or the Workloads cannot be read:
    logged, and (None, []), which only shortens the queue timeout's message."""
    log.info(
        "What held LocalQueue %s/%s's quota could not be read: %s",
        namespace,
        local_queue,
        describe_error(exc),
    )
    return None, []
