"""The data the pure Kueue scheduler decides over, and the decisions it returns.

Kueue keeps its scheduler apart from its job controllers: the scheduler works on an in-memory
snapshot of queues, cohorts and admitted workloads, and returns what should happen; controllers
read and write the API objects. kubesim does the same. The Kueue controller builds a `Snapshot`
from store objects, calls `kubesim.kueue.scheduler.schedule_cycle`, and applies the returned
decisions (writing Workload conditions, evicting victims, unsuspending RayJobs).

Units: every quantity is an ``int`` in the unit Kueue itself uses internally
(`pkg/resources`): ``cpu`` in millicores, every other resource in whole units (bytes for memory
and storage, devices for ``nvidia.com/gpu``). `kubesim.quantity` converts from and to the
Kubernetes string form, printing exactly as Kueue prints in condition messages.

Timestamps are float seconds (POSIX time); only their order matters.

Entry points for the controller:

* ``quantity.to_canonical(resource, "500m") -> int`` and ``quantity.to_string(resource, 500) -> "500m"``.
* ``scheduler.schedule_cycle(snapshot, pending_by_cq: {cq: [Workload]}, now=...) -> list[Decision]``:
  one admission cycle. Pass every pending workload of every CQ (any order; parked ones carry
  ``inadmissible=True``). Apply the decisions, then call it again while the previous cycle
  admitted or parked anything; otherwise wait for a cluster event.
* ``scheduler.schedule(snapshot, pending_by_cq, now=...) -> list[Decision]``: the same cycles
  repeated until settled, returning the latest decision per workload (one call per event).
* ``scheduler.ordered(workloads) -> list[Workload]``: queue order (priority desc, then
  ``queue_timestamp``, then ``uid``), as used for heads and the visibility API.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# ClusterQueue.spec.queueingStrategy values.
BEST_EFFORT_FIFO = "BestEffortFIFO"
STRICT_FIFO = "StrictFIFO"

# Preemption policy values (ClusterQueue.spec.preemption).
NEVER = "Never"
LOWER_PRIORITY = "LowerPriority"
LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"
ANY = "Any"

# FlavorFungibility values (v1beta2).
MAY_STOP_SEARCH = "MayStopSearch"
TRY_NEXT_FLAVOR = "TryNextFlavor"
BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"

# Preempted condition reasons.
IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"


@dataclass(frozen=True)
class Taint:
    """A ResourceFlavor ``spec.nodeTaints`` entry: pods must tolerate it to use the flavor."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    """A core/v1 toleration (on a pod template or a ResourceFlavor's ``spec.tolerations``).

    ``operator`` is ``Equal`` (key and value must match) or ``Exists`` (any value; an empty key
    with ``Exists`` tolerates every taint). An empty ``effect`` matches every effect.
    """

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True)
class ResourceFlavor:
    """A ResourceFlavor: the node labels pods get when admitted in it, and the taints they must tolerate.

    ``tolerations`` are added to admitted pods by Kueue, so they also count as tolerating the
    flavor's own taints when checking a pod set against ``node_taints``.
    """

    name: str
    node_labels: dict[str, str] = field(default_factory=dict)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True)
class ResourceQuota:
    """Quota of one resource in one flavor of a ClusterQueue or Cohort.

    ``borrowing_limit``: how much more than ``nominal`` the node may take from its cohort;
    ``None`` means unlimited (only bounded by what the cohort has).
    ``lending_limit``: how much of ``nominal`` the cohort may lend to others; ``None`` means
    all of it. Both are only meaningful for nodes that have a parent cohort.
    """

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True)
class FlavorQuotas:
    """One ``resourceGroups[].flavors[]`` entry: the quotas of the group's resources in a flavor."""

    name: str
    resources: dict[str, ResourceQuota]


@dataclass(frozen=True)
class ResourceGroup:
    """A ``resourceGroups[]`` entry: resources that are always assigned the same flavor.

    ``flavors`` are tried in this order when assigning a pod set.
    """

    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True)
class PreemptionPolicy:
    """``ClusterQueue.spec.preemption`` with upstream defaults (everything ``Never``).

    ``borrow_max_priority_threshold``: with ``borrow_within_cohort_policy == LowerPriority``, only
    workloads with priority <= this value may be preempted while the preemptor borrows
    (``None`` = any lower priority).
    """

    within_cluster_queue: str = NEVER
    reclaim_within_cohort: str = NEVER
    borrow_within_cohort_policy: str = NEVER
    borrow_max_priority_threshold: int | None = None


@dataclass(frozen=True)
class FlavorFungibility:
    """``ClusterQueue.spec.flavorFungibility`` with the v1beta2 defaults.

    ``when_can_borrow == MayStopSearch`` accepts the first flavor that fits even if it borrows;
    ``TryNextFlavor`` keeps looking for a flavor that fits without borrowing.
    ``when_can_preempt == TryNextFlavor`` looks at later flavors before choosing to preempt;
    ``MayStopSearch`` preempts in the first flavor where preemption could help.
    ``preference`` ranks the flavors tried when none simply fits: ``BorrowingOverPreemption`` (also
    when unset) takes the better preemption mode first (fit, then reclaim, then preempting in the own
    queue) and borrows as little as possible among equals; ``PreemptionOverBorrowing`` takes the
    flavor that borrows least first and, among equals, the better preemption mode. Either way a
    flavor whose preemption found no candidates ranks below every flavor that could admit.
    """

    when_can_borrow: str = MAY_STOP_SEARCH
    when_can_preempt: str = TRY_NEXT_FLAVOR
    preference: str = BORROWING_OVER_PREEMPTION


@dataclass(frozen=True)
class ClusterQueue:
    """A ClusterQueue as the scheduler sees it.

    ``cohort``: ``spec.cohortName`` (``None`` = stands alone). The name may or may not be backed
    by a `Cohort` object in the snapshot; without one it is an implicit root cohort.
    ``namespace_selector``: the label selector dict (``matchLabels`` / ``matchExpressions``);
    ``None`` matches no namespace, ``{}`` matches every namespace.
    ``active``: False when the CQ cannot admit (``stopPolicy`` Hold/HoldAndDrain, or a missing
    ResourceFlavor); pending workloads then get "ClusterQueue <name> is inactive".
    """

    name: str
    resource_groups: tuple[ResourceGroup, ...] = ()
    cohort: str | None = None
    queueing_strategy: str = BEST_EFFORT_FIFO
    preemption: PreemptionPolicy = PreemptionPolicy()
    flavor_fungibility: FlavorFungibility = FlavorFungibility()
    stop_policy: str = "None"
    namespace_selector: dict | None = None
    active: bool = True


@dataclass(frozen=True)
class Cohort:
    """A Cohort object (hierarchical cohorts): an optional parent and its own quota.

    Cohorts named by ClusterQueues but without an object are implicit roots with no quota of
    their own; they need no `Cohort` entry in the snapshot.
    """

    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()


@dataclass(frozen=True)
class PodSet:
    """One ``Workload.spec.podSets[]`` entry.

    ``requests`` are per pod (``count`` pods), in canonical units (see module docstring);
    ``node_selector`` and ``tolerations`` come from the pod template and decide which flavors
    the pod set may use (flavor ``node_labels`` must not contradict the selector; flavor taints
    must be tolerated).
    """

    name: str
    count: int
    requests: dict[str, int]
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()

    def total(self) -> dict[str, int]:
        """Requests of all ``count`` pods together: what the pod set charges against quota."""
        return {name: value * self.count for name, value in self.requests.items()}


@dataclass(frozen=True)
class PodSetAssignment:
    """One ``Workload.status.admission.podSetAssignments[]`` entry.

    ``flavors``: resource name -> flavor name; ``resource_usage``: resource name -> total over
    ``count`` pods (canonical units).
    """

    name: str
    flavors: dict[str, str]
    resource_usage: dict[str, int]
    count: int


@dataclass(frozen=True)
class Admission:
    """``Workload.status.admission`` plus when quota was reserved.

    ``reserved_at`` (the QuotaReserved condition's lastTransitionTime) orders preemption
    candidates: the most recently admitted is preempted first. Decisions set it to ``now``.
    """

    cluster_queue: str
    pod_set_assignments: tuple[PodSetAssignment, ...]
    reserved_at: float = 0.0

    def usage(self) -> dict[tuple[str, str], int]:
        """Quota this admission holds, keyed by (flavor, resource)."""
        used: dict[tuple[str, str], int] = {}
        for assignment in self.pod_set_assignments:
            for resource, value in assignment.resource_usage.items():
                key = (assignment.flavors[resource], resource)
                used[key] = used.get(key, 0) + value
        return used


@dataclass(frozen=True)
class Workload:
    """A Workload, pending or holding quota.

    ``key``: ``"<namespace>/<name>"``; ``uid``: the Workload's metadata.uid; ``job_uid``: the
    ``kueue.x-k8s.io/job-uid`` label (``None`` prints as ``UNKNOWN`` in eviction messages).
    ``cluster_queue``: the CQ its LocalQueue points to. ``priority``: ``spec.priority`` (0 if unset).
    ``queue_timestamp``: creation time, or the eviction time for workloads requeued after a
    PodsReady-timeout / admission-check eviction (upstream's queue ordering timestamp).
    ``creation_seq``: a strictly increasing tie-breaker of the scheduler's order of heads across
    ClusterQueues (e.g. the resourceVersion at creation); a queue's own order breaks ties by ``uid``.
    ``admission``: set while the workload holds quota (QuotaReserved=True), else ``None``.
    ``evicted``: holds quota but an eviction is already under way (the job is being suspended);
    such workloads are preferred preemption victims and must not be evicted twice.
    ``inadmissible``: the controller parked this pending workload after a NoFit with
    ``inadmissible=True`` (BestEffortFIFO); it is skipped as a queue head until the controller
    clears the flag on a cluster event (a workload finished or was deleted, a queue, cohort or
    flavor changed), as upstream's inadmissible set does.
    """

    key: str
    uid: str
    cluster_queue: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    queue_timestamp: float = 0.0
    creation_seq: int = 0
    job_uid: str | None = None
    namespace: str = "default"
    local_queue: str = ""
    admission: Admission | None = None
    evicted: bool = False
    inadmissible: bool = False


@dataclass
class Snapshot:
    """Everything one admission cycle decides over.

    ``flavors``: ResourceFlavors by name. ``cluster_queues``: by name. ``cohorts``: Cohort
    objects by name (implicit cohorts need no entry). ``admitted``: CQ name -> workloads that
    hold quota in it (``admission`` set), including ones being evicted; their admissions are
    the usage. ``namespace_labels``: namespace -> labels, for ``namespace_selector``
    (a namespace missing here has no labels).

    `schedule_cycle` works on a copy and never mutates the snapshot passed in.
    """

    flavors: dict[str, ResourceFlavor] = field(default_factory=dict)
    cluster_queues: dict[str, ClusterQueue] = field(default_factory=dict)
    cohorts: dict[str, Cohort] = field(default_factory=dict)
    admitted: dict[str, list[Workload]] = field(default_factory=dict)
    namespace_labels: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Admit:
    """Reserve quota: write ``admission`` to the Workload status, QuotaReserved=True, then start the job."""

    workload: Workload
    admission: Admission


@dataclass(frozen=True)
class Victim:
    """A workload to evict so that a preemptor can fit.

    ``reason``: the Preempted condition reason (InClusterQueue, InCohortReclamation,
    InCohortReclaimWhileBorrowing); ``message``: the Evicted/Preempted condition message, exactly
    as upstream writes it. ``workload.evicted`` tells the controller the eviction is already
    under way from an earlier cycle, so it must not be issued again.
    """

    workload: Workload
    reason: str
    message: str


@dataclass(frozen=True)
class Preempt:
    """Evict ``victims``; the preemptor stays pending with ``pending_message`` (QuotaReserved=False,
    reason Pending) and is admitted in a later cycle once the victims released their quota.
    """

    workload: Workload
    victims: tuple[Victim, ...]
    pending_message: str


@dataclass(frozen=True)
class NoFit:
    """The head cannot be admitted now; write QuotaReserved=False with ``message``.

    ``reason`` is the condition reason (``Pending``). ``inadmissible``: True when the workload
    should be parked (set `Workload.inadmissible`) until a cluster event, because retrying it
    now would decide the same (upstream's inadmissible set under BestEffortFIFO); False when it
    stays at the head of its queue (StrictFIFO, or skipped only because of another head's
    decision in this same cycle).
    """

    workload: Workload
    message: str
    inadmissible: bool
    reason: str = "Pending"
    no_fit: bool = False
    """The head does not fit (no quota, no preemption candidates): every pending workload of its shape in
    its queue would fail the same way (``kubesim.kueue.equivalence``)."""


Decision = Admit | Preempt | NoFit
