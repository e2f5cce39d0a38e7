"""The phases a RayJob (``Phase``) and a RayService (``ServicePhase``) go through as a DAG author sees
them, the sets of phases the plugin asks about (terminal, evicted, waiting for admission, admitted,
holding quota, worth a queue position), and what each phase is called: its words in the Kueue tab and
the kind of span the timeline draws for it.

Apart from ``kueue_ray.status`` and ``kueue_ray.rayservice.status`` because the phases are the vocabulary
and ``observe`` / ``observe_service`` are one way of arriving at them: the narration, the timeline, the
UI and the waiting code read phases without needing the rules that derive them from the objects. A new
phase is added here with its words and span kind (``tests/unit/kueue_ray/test_vocabulary.py`` checks
every phase has both).
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


class ServicePhase(StrEnum):
    SUBMITTED = "SUBMITTED"
    """KubeRay or Kueue has not acted on the spec yet (no cluster, or no Workload for it)."""
    QUEUED = "QUEUED"
    INADMISSIBLE = "INADMISSIBLE"
    AWAITING_CHECKS = "AWAITING_CHECKS"
    ADMITTED = "ADMITTED"
    """Kueue admitted the target cluster; its pods are starting."""
    DEPLOYING = "DEPLOYING"
    """The target cluster is ready; Serve deploys the applications on it."""
    SERVING = "SERVING"
    PREEMPTED = "PREEMPTED"
    PODS_NOT_READY = "PODS_NOT_READY"
    EVICTED = "EVICTED"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    UNHEALTHY = "UNHEALTHY"
    DEACTIVATED = "DEACTIVATED"
    BLOCKED = "BLOCKED"
    """A new cluster config Kueue will never admit while the old cluster serves (see the module doc)."""
    FAILED = "FAILED"
    """KubeRay refused the spec."""


TERMINAL_SERVICE_PHASES = frozenset(
    {
        ServicePhase.SERVING,
        ServicePhase.DEPLOY_FAILED,
        ServicePhase.UNHEALTHY,
        ServicePhase.DEACTIVATED,
        ServicePhase.BLOCKED,
        ServicePhase.FAILED,
    }
)
WAITING_SERVICE_PHASES = frozenset(
    {ServicePhase.SUBMITTED, ServicePhase.QUEUED, ServicePhase.INADMISSIBLE, ServicePhase.AWAITING_CHECKS}
)
"""Not admitted yet: the queue clock runs."""
STARTING_SERVICE_PHASES = frozenset({ServicePhase.ADMITTED, ServicePhase.DEPLOYING})
"""Admitted and coming up: the start-up clock runs."""
SERVICE_POSITION_PHASES = frozenset({ServicePhase.QUEUED, ServicePhase.INADMISSIBLE})


PHASE_WORDS = {
    Phase.SUBMITTED: "Submitted; Kueue has not created its Workload yet",
    Phase.QUEUED: "Queued: waiting for quota in its ClusterQueue",
    Phase.INADMISSIBLE: "Inadmissible: it cannot be admitted until the queue or its quota changes",
    Phase.AWAITING_CHECKS: "Quota reserved: waiting for the ClusterQueue's admission checks",
    Phase.ADMITTED: "Admitted: quota is reserved and the Ray cluster is starting",
    Phase.RUNNING: "Running",
    Phase.RETRYING: "Retrying: an attempt failed and KubeRay starts another one",
    Phase.PREEMPTED: "Preempted: Kueue evicted it and the Ray cluster is being torn down; it will queue again",
    Phase.PODS_NOT_READY: "Evicted: its pods were not ready in time; it will queue again after a backoff",
    Phase.EVICTED: "Evicted by Kueue; the Ray cluster is being torn down and it will queue again",
    Phase.SUCCEEDED: "Succeeded",
    Phase.FAILED: "Failed",
    Phase.STOPPED: "Stopped before it finished",
    Phase.DEACTIVATED: "Deactivated by Kueue: it will not run again unless reactivated",
}
"""A RayJob's phase in the Kueue tab's words."""
SERVICE_PHASE_WORDS = {
    ServicePhase.SUBMITTED: "Submitted; KubeRay or Kueue has not acted on the spec yet",
    ServicePhase.QUEUED: "Queued: its Ray cluster waits for quota in its ClusterQueue",
    ServicePhase.INADMISSIBLE: "Inadmissible: it cannot be admitted until the queue or its quota changes",
    ServicePhase.AWAITING_CHECKS: "Quota reserved: waiting for the ClusterQueue's admission checks",
    ServicePhase.ADMITTED: "Admitted: quota is reserved and the Ray cluster is starting",
    ServicePhase.DEPLOYING: "Deploying: the Ray cluster is ready and Serve deploys the applications",
    ServicePhase.SERVING: "Serving: every application RUNNING, every deployment HEALTHY",
    ServicePhase.PREEMPTED: "Preempted: Kueue evicted its Ray cluster; it will queue again",
    ServicePhase.PODS_NOT_READY: "Evicted: its pods were not ready in time; it will queue again after a backoff",
    ServicePhase.EVICTED: "Evicted by Kueue; it will queue again",
    ServicePhase.DEPLOY_FAILED: "Deploy failed: Serve could not deploy an application",
    ServicePhase.UNHEALTHY: "Unhealthy: Serve reports an application or deployment unhealthy",
    ServicePhase.DEACTIVATED: "Deactivated by Kueue: it will not be admitted again unless reactivated",
    ServicePhase.BLOCKED: "Blocked: Kueue will not admit the new cluster config while the old cluster serves",
    ServicePhase.FAILED: "Failed: KubeRay refused the spec",
}
"""A RayService's phase in the Kueue tab's words."""

FINISHED_SPAN = "finished"
"""The span kind of a phase that ends the wait: a zero-length span carrying the outcome."""
_WAITING_SPANS = {
    "SUBMITTED": "submitted",
    "QUEUED": "queued",
    "INADMISSIBLE": "inadmissible",
    "AWAITING_CHECKS": "quota_reserved",
    "ADMITTED": "admitted",
    "PREEMPTED": "preempted",
    "PODS_NOT_READY": "evicted",
    "EVICTED": "evicted",
}
PHASE_SPAN_KINDS = {
    **{phase: _WAITING_SPANS[phase.value] for phase in Phase if phase.value in _WAITING_SPANS},
    Phase.RUNNING: "running",
    Phase.RETRYING: "retrying",
    **{phase: FINISHED_SPAN for phase in TERMINAL_PHASES},
}
"""The kind of span a RayJob's timeline draws for each phase (``kueue_ray.ui.spans``)."""
SERVICE_PHASE_SPAN_KINDS = {
    **{phase: _WAITING_SPANS[phase.value] for phase in ServicePhase if phase.value in _WAITING_SPANS},
    ServicePhase.DEPLOYING: "deploying",
    **{phase: FINISHED_SPAN for phase in TERMINAL_SERVICE_PHASES},
}
"""The kind of span a RayService's timeline draws for each phase; the phases both kinds share keep the
same span."""
