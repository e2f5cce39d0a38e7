"""ClusterQueue and LocalQueue status (pure): whether a queue is active, and the status Kueue writes for it.

Read by the controller when it writes queue status, by the scheduler's snapshot (an inactive queue admits
nothing) and by the visibility API (the pending Workloads by ClusterQueue).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kubesim import quantity
from kubesim.kueue import admission_checks
from kubesim.kueue.conditions import is_queued

if TYPE_CHECKING:
    from kubesim.kueue.world import World


@dataclass
class Tally:
    """Quota held in one queue: how many workloads reserve it, how many are admitted, and their usage by
    (flavor, resource), reserved and admitted. Kept as running sums, so a queue's status costs O(flavors)."""

    reserving: int = 0
    admitted: int = 0
    reserved: dict[tuple[str, str], int] = field(default_factory=dict)
    used: dict[tuple[str, str], int] = field(default_factory=dict)

    def add(self, usage: dict[tuple[str, str], int], admitted: bool, sign: int) -> None:
        self.reserving += sign
        for key, value in usage.items():
            self.reserved[key] = self.reserved.get(key, 0) + sign * value
        if admitted:
            self.admitted += sign
            for key, value in usage.items():
                self.used[key] = self.used.get(key, 0) + sign * value


def stop_policy(obj: dict) -> str:
    return (obj.get("spec") or {}).get("stopPolicy") or "None"


def missing_flavors(cq: dict, flavors: dict[str, dict]) -> list[str]:
    """The ResourceFlavors the ClusterQueue names that do not exist, in resource-group order."""
    names = [
        f["name"]
        for group in (cq.get("spec") or {}).get("resourceGroups") or []
        for f in group.get("flavors") or []
    ]
    return [name for name in dict.fromkeys(names) if name not in flavors]


def cluster_queue_active(
    cq: dict, flavors: dict[str, dict], checks: dict[str, dict] | None = None
) -> tuple[bool, str, str]:
    """(active, reason, message) of the ClusterQueue ``Active`` condition.

    Kueue lists every cause that keeps the queue from admitting, in a fixed order, and takes the
    first one's reason: "Can't admit new workloads: is stopped, references missing
    ResourceFlavor(s): spot,a100." with reason ``Stopped`` (names joined by a bare comma), then
    "references missing AdmissionCheck(s): ..." (``AdmissionCheckNotFound``) and "references inactive
    AdmissionCheck(s): ..." (``AdmissionCheckInactive``). ``checks`` (AdmissionChecks by name) None leaves
    the admission checks out (the scheduler's model: queue_blocker keeps a queue with a missing or
    inactive check from admitting anything before).
    """
    causes: list[tuple[str, str]] = []
    if stop_policy(cq) != "None":
        causes.append(("Stopped", "is stopped"))
    missing = missing_flavors(cq, flavors)
    if missing:
        causes.append(("FlavorNotFound", f"references missing ResourceFlavor(s): {','.join(missing)}"))
    if checks is not None:
        causes.extend(admission_checks.inactive_causes(cq, checks))
    if not causes:
        return True, "Ready", "Can admit new workloads"
    message = f"Can't admit new workloads: {', '.join(text for _, text in causes)}."
    return False, causes[0][0], message


def queue_blocker(wl: dict, world: World) -> tuple[str | None, str | None]:
    """(ClusterQueue name, Inadmissible message) for a queued workload; message None means schedulable."""
    queue = (wl.get("spec") or {}).get("queueName", "")
    lq = world.local_queue_of(wl)
    if lq is None:
        return None, f"LocalQueue {queue} doesn't exist"
    cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
    if stop_policy(lq) != "None":
        return cq_name, f"LocalQueue {queue} is inactive"
    cq = world.cluster_queues.get(cq_name)
    if cq is None:
        return cq_name, f"ClusterQueue {cq_name} doesn't exist"
    if not cluster_queue_active(cq, world.flavors, world.admission_checks)[0]:
        return cq_name, f"ClusterQueue {cq_name} is inactive"
    return cq_name, None


def _flavor_usage(cq: dict | None, used: dict[tuple[str, str], int], with_borrowed: bool) -> list[dict]:
    result = []
    for group in ((cq or {}).get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = []
            for r in flavor.get("resources") or []:
                name = r["name"]
                total = used.get((flavor["name"], name), 0)
                entry = {"name": name, "total": quantity.to_string(name, total)}
                if with_borrowed:
                    nominal = quantity.to_canonical(name, r.get("nominalQuota", 0))
                    entry["borrowed"] = quantity.to_string(name, max(0, total - nominal))
                resources.append(entry)
            result.append({"name": flavor["name"], "resources": resources})
    return result


def cluster_queue_status(cq: dict, tally: Tally | None, pending: int) -> dict:
    """The status Kueue reports for ``cq``: counts, reservation and usage per flavor (with what is
    borrowed); the ``Active`` condition is the writer's."""
    return _queue_status(cq, cq, tally, pending, with_borrowed=True)


def local_queue_status(lq: dict, cq: dict | None, tally: Tally | None, pending: int) -> dict:
    """A LocalQueue's status: what its workloads reserve, laid out by its ClusterQueue's flavors."""
    return _queue_status(lq, cq, tally, pending, with_borrowed=False)


def _queue_status(
    queue: dict, cq: dict | None, tally: Tally | None, pending: int, *, with_borrowed: bool
) -> dict:
    tally = tally or Tally()
    status = copy.deepcopy(queue.get("status") or {})
    status.update(
        pendingWorkloads=pending,
        reservingWorkloads=tally.reserving,
        admittedWorkloads=tally.admitted,
        flavorsReservation=_flavor_usage(cq, tally.reserved, with_borrowed),
        flavorsUsage=_flavor_usage(cq, tally.used, with_borrowed),
    )
    return status


def local_queue_active(lq: dict, world: World) -> tuple[str, str, str]:
    if stop_policy(lq) != "None":
        return "False", "Stopped", "LocalQueue is stopped"
    cq = world.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue", ""))
    if cq is None or not cluster_queue_active(cq, world.flavors, world.admission_checks)[0]:
        return "False", "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue"
    return "True", "Ready", "Can submit new workloads to localQueue"


def queued_by_cluster_queue(world: World) -> dict[str, list[dict]]:
    """Queued workloads per ClusterQueue (including ones parked or blocked by an inactive queue)."""
    result: dict[str, list[dict]] = {}
    for wl in world.workloads:
        if not is_queued(wl):
            continue
        cq_name, _ = queue_blocker(wl, world)
        if cq_name is not None and cq_name in world.cluster_queues:
            result.setdefault(cq_name, []).append(wl)
    return result
