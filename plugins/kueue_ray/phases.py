"""The phases a RayJob goes through as a DAG author sees them (``Phase``), and the sets of phases the
plugin asks about: terminal, evicted, waiting for admission, admitted, holding quota, worth a queue
position.

Apart from ``kueue_ray.status`` because the phases are the vocabulary and ``observe`` is one way of
arriving at them: the narration, the timeline, the UI's spans and the waiting code read phases without
needing the rules that derive them from a RayJob and its Workload.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    SUBMITTED = "SUBMITTED"
    """The RayJob exists; Kueue has not created its Workload yet."""
    QUEUED = "QUEUED"
    """Suspended and waiting for quota (also after a preemption or a PodsReady-timeout backoff)."""
    INADMISSIBLE = "INADMISSIBLE"
    """Waiting cannot help: queue missing or stopped, or the request exceeds the maximum capacity."""
    AWAITING_CHECKS = "AWAITING_CHECKS"
    """Quota reserved, but Kueue waits for the ClusterQueue's admission checks before it admits; the RayJob
    stays suspended meanwhile (no run time counts)."""
    ADMITTED = "ADMITTED"
    """Admitted (``Admitted=True``); KubeRay is starting the Ray cluster."""
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    """An attempt failed and KubeRay starts another one (within ``spec.backoffLimit``)."""
    PREEMPTED = "PREEMPTED"
    """Preempted by Kueue; KubeRay is still tearing the Ray cluster down. Requeued afterwards."""
    PODS_NOT_READY = "PODS_NOT_READY"
    """Evicted because its pods were not all ready within Kueue's waitForPodsReady timeout (taints,
    tolerations, image pulls); KubeRay tears the cluster down, Kueue requeues it after a backoff."""
    EVICTED = "EVICTED"
    """Evicted for another reason than preemption or pods (an admission check asking for a retry, a stopped
    queue, failed nodes); KubeRay tears the cluster down, then it queues again."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    """The Ray job was stopped (Complete with jobStatus STOPPED): finished, but not a success."""
    DEACTIVATED = "DEACTIVATED"
    """Kueue deactivated the Workload; it will not run again unless reactivated."""


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.DEACTIVATED})
EVICTION_PHASES = frozenset({Phase.PREEMPTED, Phase.PODS_NOT_READY, Phase.EVICTED})
"""Kueue took the quota away and KubeRay is tearing the Ray cluster down."""
WAITING_PHASES = frozenset({Phase.SUBMITTED, Phase.QUEUED, Phase.INADMISSIBLE, Phase.AWAITING_CHECKS})
"""Not admitted yet: the queue clock runs (waiting for admission checks is waiting for admission too)."""
ADMITTED_PHASES = frozenset({Phase.ADMITTED, Phase.RUNNING, Phase.RETRYING})
"""Admitted and not evicted: the run clock runs."""
HOLDING_QUOTA_PHASES = frozenset({*ADMITTED_PHASES, *EVICTION_PHASES})
"""The Workload holds quota: admitted, or evicted while KubeRay tears the Ray cluster down."""
POSITION_PHASES = frozenset({Phase.QUEUED, Phase.INADMISSIBLE})
"""Pending in a LocalQueue, so it has a queue position worth telling."""
