"""Step 4 of a Kueue controller pass: every ClusterQueue's and LocalQueue's status, written when it changed.

The status itself is computed by the pure ``kubesim.kueue.queue_status`` from the informer cache's running
sums (``WorkloadIndex``), so writing it costs O(queues), whatever the Workload count.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubesim.kueue.conditions import set_condition
from kubesim.kueue.queue_status import (
    cluster_queue_active,
    cluster_queue_status,
    local_queue_active,
    local_queue_status,
)
from kubesim.kueue.world import CQ_KEY, LQ_KEY, World
from kubesim.kueue.writer import Writer

if TYPE_CHECKING:
    from kubesim.kueue.cache import ClusterView


@dataclass(eq=False)
class QueueStatusWriter:
    """Writes queue status through the ``Writer``, from the view's Workload index."""

    writer: Writer
    view: ClusterView

    def write(self, world: World) -> None:
        """Every queue's status from the index's running sums."""
        now = self.writer.clock.timestamp()
        index = self.view.index
        cq_pending: dict[str, int] = {}
        for key, lq in world.local_queues.items():
            cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
            cq_pending[cq_name] = cq_pending.get(cq_name, 0) + index.queued_count.get(key, 0)
        for name, cq in world.cluster_queues.items():
            active, reason, message = cluster_queue_active(cq, world.flavors, world.admission_checks)
            status = cluster_queue_status(cq, index.cluster_queue_tally.get(name), cq_pending.get(name, 0))

            def change(obj: dict, status=status, active=active, reason=reason, message=message) -> None:
                obj["status"] = copy.deepcopy(status)
                set_condition(obj, "Active", "True" if active else "False", reason, message, now)

            self.writer.mutate(CQ_KEY, cq, change, status=True)
        for key, lq in world.local_queues.items():
            state = local_queue_active(lq, world)
            cq = world.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue", ""))
            status = local_queue_status(
                lq, cq, index.local_queue_tally.get(key), index.queued_count.get(key, 0)
            )

            def change(obj: dict, status=status, state=state) -> None:
                obj["status"] = copy.deepcopy(status)
                set_condition(obj, "Active", *state, now)

            self.writer.mutate(LQ_KEY, lq, change, status=True)
