"""Why a Workload is still queued, in Kueue's terms and beyond, and whether waiting can ever admit it (pure).

Kueue says "insufficient unused quota for nvidia.com/gpu in flavor gpu, 4 more needed" and nothing else:
not who holds the quota, whether this workload's priority may take it from them, whether borrowing from
the cohort could help, nor that some holders never leave by themselves. A RayCluster (a RayService's, or
one on its own) runs until someone deletes it, while a RayJob ends. So from the ClusterQueue, its cohort's
ClusterQueues and Cohorts, and what the admitted Workloads hold (``Holding``: each read once, as its
version arrives, not once per question), ``explain_queued`` answers:

* what the workload needs (``status.resourceRequests``, Kueue's own totals for a pending workload);
* who holds that quota: the admitted Workloads of its ClusterQueue, and those of the cohort's other
  ClusterQueues that use the same flavor and resource, each with its priority, what it uses
  (``status.admission.podSetAssignments``), whether it lasts (owned by a RayCluster or RayService) and
  whether this workload may take it: ``preemption.withinClusterQueue`` in its own ClusterQueue (see
  ``quota_holders.can_preempt``), ``preemption.reclaimWithinCohort`` for another ClusterQueue's workload
  while that ClusterQueue borrows;
* whether borrowing could help: what it needs beyond its ClusterQueue's nominal quota, what the
  ClusterQueue may borrow at most (``capacity.max_capacity``) and how much the cohort leaves unused now;
* and whether it is *stuck*: for some resource it needs more than can ever be free beside the lasting
  workloads it may not preempt. Then waiting will not admit it; only deleting those, a smaller request or
  a priority that may preempt them will.

The reachable amount per flavor and resource is ``min(maximum capacity - own lasting holders, cohort
nominal total - every lasting holder of the cohort)``, a lasting holder of another ClusterQueue counting
only up to that ClusterQueue's nominal quota when reclaim may take the rest. Deliberately lenient like
``capacity.find_shortfall`` (the whole request against all flavors of a resource together): saying
"stuck" about a workload Kueue would admit is worse than missing a stuck one.

Example (the Aurora case: 2 GPU workers of 4 GPUs next to the DAG's own serving RayCluster)::

    >>> cq = {"metadata": {"name": "team-a-cq"}, "spec": {
    ...     "preemption": {"withinClusterQueue": "LowerPriority"}, "resourceGroups": [{"flavors": [
    ...     {"name": "gpu", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}]}}
    >>> serve = {"metadata": {"name": "raycluster-serve-1", "namespace": "ray",
    ...              "ownerReferences": [{"kind": "RayCluster", "name": "serve-1"}]},
    ...          "spec": {"priority": 1000, "priorityClassRef": {"name": "prod-priority"}},
    ...          "status": {"admission": {"clusterQueue": "team-a-cq", "podSetAssignments": [
    ...              {"name": "head", "flavors": {"nvidia.com/gpu": "gpu"},
    ...               "resourceUsage": {"nvidia.com/gpu": "1"}}]}}}
    >>> mine = {"metadata": {"name": "rayjob-finetune-1", "namespace": "ray"},
    ...         "spec": {"priority": 100, "priorityClassRef": {"name": "dev-priority"}},
    ...         "status": {"resourceRequests": [{"name": "worker", "resources": {"nvidia.com/gpu": "8"}}]}}
    >>> from kueue_ray.holdings import holdings_of
    >>> why = explain_queued(mine, cq, holdings=holdings_of([serve, mine]))
    >>> why.stuck
    True
    >>> print(why.verdict())
    Will not be admitted by waiting: it needs 8 nvidia.com/gpu, and at most 7 can ever be free in ClusterQueue team-a-cq beside workloads that run until deleted and that its priority (dev-priority 100) may not preempt: raycluster-serve-1 (RayCluster serve-1). Delete those, request less, or give it a priority that may preempt them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from kueue_ray.capacity import max_capacity, quotas_of
from kueue_ray.holdings import FlavorResource, Holding, requests_of
from kueue_ray.quantity import readable_amount
from kueue_ray.quota_holders import can_preempt

LASTING_OWNERS = frozenset({"RayCluster", "RayService"})
"""Owners whose Workload holds quota until someone deletes it: they serve, they do not finish."""
MAX_HOLDERS = 8
"""Holders named in the sentences; the rest are counted."""


@dataclass(frozen=True)
class Holder:
    """An admitted Workload holding quota this workload needs."""

    name: str
    namespace: str
    cluster_queue: str
    priority: int
    priority_class: str | None
    usage: dict[FlavorResource, Decimal]
    owner_kind: str | None
    owner_name: str | None
    lasting: bool
    """Owned by a RayCluster or RayService: it holds its quota until deleted."""
    may_take: bool
    """This workload's priority may preempt it (own ClusterQueue) or reclaim it (the cohort's)."""
    how: str
    """Why it may or may not be taken, in Kueue's policy terms."""
    owner: str | None = None
    """Who submitted it, in words (DAG, run, task), when the caller knows and may say."""

    def describe(self) -> str:
        said = [f"{self.owner_kind} {self.owner_name}" if self.owner_kind else "", self.owner or ""]
        said = [part for part in said if part]
        return f"{self.name} ({', '.join(said)})" if said else self.name

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.name,
            "namespace": self.namespace,
            "cluster_queue": self.cluster_queue,
            "priority": {"class": self.priority_class, "value": self.priority},
            "uses": {f"{r} ({f})": readable_amount(r, a) for (f, r), a in self.usage.items()},
            "owner_kind": self.owner_kind,
            "owner_name": self.owner_name,
            "owner": self.owner,
            "lasting": self.lasting,
            "may_take": self.may_take,
            "how": self.how,
        }


@dataclass(frozen=True)
class Need:
    """One resource this workload asks for, against what its ClusterQueue offers now and ever."""

    resource: str
    amount: Decimal
    nominal: Decimal
    """Its ClusterQueue's own nominal quota (all flavors covering the resource)."""
    capacity: Decimal
    """The most its ClusterQueue can ever hold, borrowing included."""
    free: Decimal
    """Nominal quota its ClusterQueue does not use now."""
    cohort_unused: Decimal
    """What the cohort's other ClusterQueues leave unused now (what borrowing could take)."""
    reachable: Decimal
    """The most that can ever be free for it beside lasting holders it may not take."""

    @property
    def stuck(self) -> bool:
        return self.amount > self.reachable

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            **{
                key: readable_amount(self.resource, getattr(self, key))
                for key in ("amount", "nominal", "capacity", "free", "cohort_unused", "reachable")
            },
            "stuck": self.stuck,
        }


@dataclass(frozen=True)
class WhyQueued:
    cluster_queue: str
    cohort: str | None
    priority: int
    priority_class: str | None
    within_policy: str
    reclaim_policy: str
    needs: list[Need]
    holders: list[Holder] = field(default_factory=list)
    requested: tuple[str, ...] = ()
    """Every resource it requests (``needs`` are those its ClusterQueue has quota for); empty when its
    requests are not known: no ``status.resourceRequests`` (Kueue writes them when its scheduler first
    tries the Workload) and no pod sets to total."""

    @property
    def stuck(self) -> bool:
        return any(need.stuck for need in self.needs)

    def _priority_words(self) -> str:
        return f"{self.priority_class or 'no priority class'} {self.priority}"

    def blockers(self) -> list[Holder]:
        """Lasting holders it may not take: what keeps it out for good."""
        return [h for h in self.holders if h.lasting and not h.may_take]

    def verdict(self) -> str:
        """ "Will not be admitted by waiting: …" when stuck, else what it waits for."""
        if not self.needs:
            return self._no_needs()
        stuck = [need for need in self.needs if need.stuck]
        if stuck:
            need = stuck[0]
            label = _label(need.resource)
            blockers = self.blockers()
            beside = (
                " beside workloads that run until deleted and that its priority "
                f"({self._priority_words()}) may not preempt: "
                + ", ".join(h.describe() for h in blockers[:MAX_HOLDERS])
                if blockers
                else ""
            )
            return (
                f"Will not be admitted by waiting: it needs {readable_amount(need.resource, need.amount)} "
                f"{label}, and at most {readable_amount(need.resource, need.reachable)} can ever be free in "
                f"ClusterQueue {self.cluster_queue}{beside}. Delete those, request less, or give it a "
                "priority that may preempt them."
            )
        takeable = [h for h in self.holders if h.may_take]
        ending = [h for h in self.holders if not h.lasting]
        parts = []
        if ending:
            parts.append(f"{len(ending)} {_ENDING}")
        if takeable:
            parts.append(f"{_PREEMPTING}{', '.join(h.name for h in takeable[:MAX_HOLDERS])}")
        if not parts:
            return "Can be admitted once quota is free; nothing that holds it now keeps it out for good."
        return _WAITING + " or ".join(parts) + "."

    def borrowing(self) -> str:
        """Whether borrowing from the cohort could help, per resource it needs beyond its own quota."""
        if not self.cohort:
            return f"ClusterQueue {self.cluster_queue} is in no cohort: it cannot borrow."
        beyond = [need for need in self.needs if need.amount > need.nominal]
        if not beyond:
            return "Its request fits in the ClusterQueue's own nominal quota: borrowing is not needed."
        said = []
        for need in beyond:
            label, amount = _label(need.resource), need.amount - need.nominal
            verdict = "could help" if need.amount <= need.capacity else "cannot cover it"
            said.append(
                f"{readable_amount(need.resource, amount)} {label} beyond its nominal "
                f"{readable_amount(need.resource, need.nominal)} must be borrowed from cohort {self.cohort} "
                f"(at most {readable_amount(need.resource, need.capacity - need.nominal)}; "
                f"{readable_amount(need.resource, need.cohort_unused)} unused there now): borrowing {verdict}"
            )
        return "; ".join(said) + "."

    def holder_lines(self) -> list[str]:
        lines = []
        for holder in self.holders[:MAX_HOLDERS]:
            uses = ", ".join(f"{readable_amount(r, a)} {_label(r)}" for (_, r), a in holder.usage.items())
            lasts = "runs until deleted" if holder.lasting else "ends by itself"
            lines.append(
                f"{holder.describe()} in {holder.cluster_queue} at {holder.priority_class or 'no priority class'} "
                f"{holder.priority} uses {uses}; {lasts}; {holder.how}"
            )
        if len(self.holders) > MAX_HOLDERS:
            lines.append(f"+{len(self.holders) - MAX_HOLDERS} more holding its quota")
        return lines

    def sentences(self) -> list[str]:
        """The explanation, first the verdict, for the task log and the tab."""
        if not self.needs:
            return [self.verdict()]
        needs = ", ".join(
            f"{readable_amount(n.resource, n.amount)} {_label(n.resource)} "
            f"({readable_amount(n.resource, n.free)} of its {readable_amount(n.resource, n.nominal)} free)"
            for n in self.needs
        )
        told = [
            self.verdict(),
            f"It needs {needs} in ClusterQueue {self.cluster_queue}, at priority {self._priority_words()}.",
        ]
        told += [f"Holding it: {line}" for line in self.holder_lines()] or [
            "Nothing admitted holds its quota."
        ]
        told.append(f"Borrowing: {self.borrowing()}")
        return told

    def _no_needs(self) -> str:
        """Said instead of the explanation when nothing it requests is under this ClusterQueue's quota."""
        if not self.requested:
            return (
                "What it needs is not known yet: Kueue writes it (status.resourceRequests) when its scheduler "
                "first tries this Workload."
            )
        return (
            f"ClusterQueue {self.cluster_queue} has no quota for what it requests "
            f"({', '.join(_label(r) for r in self.requested)}): waiting alone will not admit it."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster_queue": self.cluster_queue,
            "cohort": self.cohort,
            "priority": {"class": self.priority_class, "value": self.priority},
            "preemption": {
                "withinClusterQueue": self.within_policy,
                "reclaimWithinCohort": self.reclaim_policy,
            },
            "stuck": self.stuck,
            "verdict": self.verdict(),
            "borrowing": self.borrowing(),
            "needs": [need.to_dict() for need in self.needs],
            "holders": [holder.to_dict() for holder in self.holders],
            "sentences": self.sentences(),
        }


_WAITING = "Can be admitted by waiting: for "
_ENDING = "workload(s) holding its quota that end by themselves"
_PREEMPTING = "preempting "


def verdict_gist(verdict: str) -> str:
    """What of a verdict (``Explanation.verdict``) is news when it changes: "Can be admitted by waiting"
    without how many holders end by themselves and which it may preempt, which move with every admission
    and completion in its queue (the position line says that progress); every other verdict whole. A task
    log tells its explanation again when this changes, not at each holder that comes or goes.

        >>> verdict_gist("Can be admitted by waiting: for 443 workload(s) holding its quota that end by "
        ...              "themselves or preempting a, b.")
        'Can be admitted by waiting: for workload(s) holding its quota that end by themselves or preempting.'
        >>> verdict_gist("Can be admitted by waiting: for preempting c.")
        'Can be admitted by waiting: for preempting.'
    """
    if not verdict.startswith(_WAITING):
        return verdict
    kinds = [kind for kind in (_ENDING, _PREEMPTING.strip()) if kind in verdict]
    return _WAITING + " or ".join(kinds) + "."


def explain_queued(
    workload: Mapping,
    cluster_queue: Mapping,
    *,
    holdings: Iterable[Holding],
    cluster_queues: Iterable[Mapping] = (),
    cohorts: Iterable[Mapping] = (),
    describe: Callable[[Mapping], str | None] = lambda _workload: None,
    conceal: Callable[[Mapping], str | None] = lambda _workload: None,
) -> WhyQueued:
    """Why ``workload`` (pending) waits in ``cluster_queue``. ``holdings``: what every admitted Workload
    that may hold quota of it or its cohort holds (``holdings_of``); ``cluster_queues``/``cohorts``: all
    of the cluster's (for the cohort);
    ``describe``: who submitted a holder, in words the viewer may read (None: say nothing); ``conceal``:
    what to call a holder instead of its name and owner (whose names tell a DAG the viewer may not read),
    None to name it."""
    name = cluster_queue["metadata"]["name"]
    spec = cluster_queue.get("spec") or {}
    preemption = spec.get("preemption") or {}
    within = preemption.get("withinClusterQueue") or "Never"
    reclaim = preemption.get("reclaimWithinCohort") or "Never"
    cohort = spec.get("cohortName") or None
    queues = {q["metadata"]["name"]: q for q in cluster_queues}
    queues[name] = cluster_queue
    members = {
        n: q
        for n, q in queues.items()
        if n == name or (cohort and (q.get("spec") or {}).get("cohortName") == cohort)
    }
    own_spec = workload.get("spec") or {}
    own_priority = int(own_spec.get("priority") or 0)
    own_created = (workload.get("metadata") or {}).get("creationTimestamp")
    own_name = (workload.get("metadata") or {}).get("name")
    requested = {r: a for r, a in requests_of(workload).items() if a > 0}
    covering = {fr for fr in quotas_of(spec) if fr[1] in requested}
    capacity = max_capacity(cluster_queue, cluster_queues=members.values(), cohorts=cohorts)
    used_by_queue: dict[str, dict[FlavorResource, Decimal]] = {n: {} for n in members}
    holders: list[Holder] = []
    for holding in holdings:
        other, admitted_to, usage = holding.workload, holding.cluster_queue, holding.usage
        meta = other.get("metadata") or {}
        if admitted_to not in members or meta.get("name") == own_name:
            continue
        for key, amount in usage.items():
            used_by_queue[admitted_to][key] = used_by_queue[admitted_to].get(key, Decimal(0)) + amount
        relevant = {key: amount for key, amount in usage.items() if key in covering and amount > 0}
        if not relevant:
            continue
        may_take = admitted_to == name and can_preempt(within, own_priority, own_created, other)
        how = f"its priority may{'' if may_take else ' not'} preempt it (withinClusterQueue: {within})"
        owner: dict = next(iter(meta.get("ownerReferences") or ()), {})
        hidden = conceal(other)
        holders.append(
            Holder(
                name=hidden or meta.get("name", ""),
                namespace=meta.get("namespace", ""),
                cluster_queue=admitted_to,
                priority=int((other.get("spec") or {}).get("priority") or 0),
                priority_class=((other.get("spec") or {}).get("priorityClassRef") or {}).get("name"),
                usage=relevant,
                owner_kind=None if hidden else owner.get("kind"),
                owner_name=None if hidden else owner.get("name"),
                lasting=owner.get("kind") in LASTING_OWNERS,
                may_take=may_take,
                how=how,
                owner=None if hidden else describe(other),
            )
        )
    # Whether another ClusterQueue's workload may be reclaimed depends on whether that ClusterQueue
    # borrows: known once every Workload is counted.
    holders = [_rejudge(h, name, reclaim, own_priority, members, used_by_queue) for h in holders]
    holders.sort(key=lambda h: (h.cluster_queue != name, h.may_take, -h.priority, h.name))
    needs = [
        _need(resource, amount, name, members, capacity, used_by_queue, holders)
        for resource, amount in sorted(requested.items(), key=lambda item: _order(item[0]))
        if any(fr[1] == resource for fr in covering)
    ]
    return WhyQueued(
        cluster_queue=name,
        cohort=cohort,
        priority=own_priority,
        priority_class=(own_spec.get("priorityClassRef") or {}).get("name"),
        within_policy=within,
        reclaim_policy=reclaim,
        needs=needs,
        holders=holders,
        requested=tuple(sorted(requested, key=_order)),
    )


def _rejudge(
    holder: Holder,
    own_queue: str,
    reclaim: str,
    own_priority: int,
    members: Mapping[str, Mapping],
    used_by_queue: Mapping[str, Mapping[FlavorResource, Decimal]],
) -> Holder:
    if holder.cluster_queue == own_queue:
        return holder
    nominal = quotas_of(members[holder.cluster_queue].get("spec") or {})
    borrowing = any(
        used_by_queue[holder.cluster_queue].get(key, Decimal(0)) > nominal[key].nominal
        for key in holder.usage
        if key in nominal
    )
    priority_ok = reclaim == "Any" or (reclaim == "LowerPriority" and holder.priority < own_priority)
    if reclaim == "Never" or not priority_ok:
        return replace(holder, may_take=False, how=f"another ClusterQueue's; reclaimWithinCohort: {reclaim}")
    if not borrowing:
        return replace(
            holder,
            may_take=False,
            how=f"{holder.cluster_queue} uses no more than its own quota, so it cannot be reclaimed",
        )
    return replace(
        holder,
        may_take=True,
        how=f"reclaimable while {holder.cluster_queue} borrows (reclaimWithinCohort: {reclaim})",
    )


def _need(
    resource: str,
    amount: Decimal,
    own_queue: str,
    members: Mapping[str, Mapping],
    capacity: Mapping[str, Mapping[str, Decimal]],
    used_by_queue: Mapping[str, Mapping[FlavorResource, Decimal]],
    holders: list[Holder],
) -> Need:
    own_quotas = quotas_of(members[own_queue].get("spec") or {})
    flavors = [flavor for (flavor, r) in own_quotas if r == resource]
    nominal = capacity_total = free = unused = reachable = Decimal(0)
    for flavor in flavors:
        key = (flavor, resource)
        own_nominal = own_quotas[key].nominal
        cap = capacity.get(flavor, {}).get(resource, own_nominal)
        nominal += own_nominal
        capacity_total += cap
        free += max(Decimal(0), own_nominal - used_by_queue[own_queue].get(key, Decimal(0)))
        cohort_total = own_nominal
        stuck_own = sum(
            (
                h.usage.get(key, Decimal(0))
                for h in holders
                if h.cluster_queue == own_queue and h.lasting and not h.may_take
            ),
            Decimal(0),
        )
        stuck_others = Decimal(0)
        for queue_name, queue in members.items():
            if queue_name == own_queue:
                continue
            quota = quotas_of(queue.get("spec") or {}).get(key)
            their_nominal = quota.nominal if quota else Decimal(0)
            cohort_total += their_nominal
            unused += max(Decimal(0), their_nominal - used_by_queue[queue_name].get(key, Decimal(0)))
            lasting = [h for h in holders if h.cluster_queue == queue_name and h.lasting]
            held = sum((h.usage.get(key, Decimal(0)) for h in lasting), Decimal(0))
            reclaimable = any(h.may_take for h in lasting)
            stuck_others += min(held, their_nominal) if reclaimable else held
        limit = cap if len(members) == 1 else min(cap, cohort_total - stuck_others)
        reachable += max(Decimal(0), limit - stuck_own)
    return Need(resource, amount, nominal, capacity_total, free, unused, reachable)


def _label(resource: str) -> str:
    return "CPU" if resource == "cpu" else resource


def _order(resource: str) -> tuple[int, str]:
    return ({"cpu": 0, "memory": 1}.get(resource, 2) if "gpu" not in resource else -1, resource)
