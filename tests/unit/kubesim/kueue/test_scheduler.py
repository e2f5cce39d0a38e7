"""The admission cycle: queue order, StrictFIFO vs BestEffortFIFO, in-cycle contention, and every
admission scenario of tests/scenarios replayed at the pure level.

The scenario driver below plays the part of the Kueue controller without HTTP: it turns the
scenario objects into a `Snapshot`, turns submitted RayJobs into Workloads (head, worker groups,
and the K8sJobMode submitter pod set), applies the scheduler's decisions, and releases a victim's
quota right after its eviction (as the RayJob suspending would).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubesim import quantity
from kubesim.kueue.model import (
    BEST_EFFORT_FIFO,
    BORROWING_OVER_PREEMPTION,
    LOWER_PRIORITY,
    MAY_STOP_SEARCH,
    STRICT_FIFO,
    TRY_NEXT_FLAVOR,
    Admit,
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    NoFit,
    PodSet,
    Preempt,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    Workload,
)
from kubesim.kueue.queue_status import cluster_queue_active
from kubesim.kueue.scheduler import namespace_selected, ordered, pending_positions, schedule, schedule_cycle
from tests.scenarios import DIRECTORY, Scenario, Step, all_scenarios, load

SCENARIOS = all_scenarios()


def cpu_queue(name: str, nominal: str, **kwargs) -> ClusterQueue:
    group = ResourceGroup(
        ("cpu",), (FlavorQuotas("default", {"cpu": ResourceQuota(quantity.to_canonical("cpu", nominal))}),)
    )
    return ClusterQueue(name, (group,), namespace_selector={}, **kwargs)


def job(name: str, cpu: str, cq: str = "cq", priority: int = 0, t: float = 0.0, **kwargs) -> Workload:
    return Workload(
        key=f"default/{name}",
        uid=f"uid-{name}",
        cluster_queue=cq,
        pod_sets=(PodSet("head", 1, {"cpu": quantity.to_canonical("cpu", cpu)}),),
        priority=priority,
        queue_timestamp=t,
        creation_seq=int(t * 1000),
        **kwargs,
    )


def admitted_in(snapshot: Snapshot, decision: Admit) -> None:
    snapshot.admitted.setdefault(decision.admission.cluster_queue, []).append(
        replace(decision.workload, admission=decision.admission)
    )


# --------------------------------------------------------------------------------- unit behaviour


def test_queue_order_is_priority_then_age():
    young_high = job("young-high", "1", priority=5, t=3)
    old_low = job("old-low", "1", priority=1, t=1)
    old_high = job("old-high", "1", priority=5, t=2)
    assert [w.key for w in ordered([old_low, young_high, old_high])] == [
        "default/old-high",
        "default/young-high",
        "default/old-low",
    ]


def test_one_seconds_workloads_of_one_priority_are_in_uid_order_not_creation_order():
    """Real Kueue v0.19.2 listed a Workload created after another of the same priority in the same second
    before it (the real stack's test_visibility_api.py): its ties fall to the UID."""
    first = replace(job("first", "1", priority=1, t=5), uid="f0")
    second = replace(job("second", "1", priority=1, t=5), uid="0a", creation_seq=first.creation_seq + 1)
    assert [w.key for w in ordered([first, second])] == ["default/second", "default/first"]
    assert [p.position_in_cluster_queue for p in pending_positions([first, second])] == [0, 1]


def test_pending_positions_count_per_local_queue_and_cluster_queue():
    a1 = job("a1", "1", t=1, local_queue="a")
    b1 = job("b1", "1", t=2, local_queue="b")
    a2 = job("a2", "1", t=3, local_queue="a")
    positions = {
        p.workload.key: (p.position_in_cluster_queue, p.position_in_local_queue)
        for p in pending_positions([a2, b1, a1])
    }
    assert positions == {"default/a1": (0, 0), "default/b1": (1, 0), "default/a2": (2, 1)}


def test_one_head_per_queue_per_cycle_and_the_admission_records_flavors():
    snapshot = Snapshot(
        flavors={"default": ResourceFlavor("default")}, cluster_queues={"cq": cpu_queue("cq", "4")}
    )
    first, second = job("first", "1", t=1), job("second", "1", t=2)
    decisions = schedule_cycle(snapshot, {"cq": [second, first]}, now=10.0)
    assert len(decisions) == 1
    admit = decisions[0]
    assert isinstance(admit, Admit) and admit.workload.key == "default/first"
    assignment = admit.admission.pod_set_assignments[0]
    assert (assignment.name, assignment.flavors, assignment.resource_usage, assignment.count) == (
        "head",
        {"cpu": "default"},
        {"cpu": 1000},
        1,
    )
    assert admit.admission.reserved_at == 10.0


def test_best_effort_fifo_parks_a_head_that_cannot_fit_and_admits_the_next():
    snapshot = Snapshot(
        flavors={"default": ResourceFlavor("default")}, cluster_queues={"cq": cpu_queue("cq", "2")}
    )
    big, small = job("big", "3", priority=1, t=1), job("small", "1", t=2)
    decisions = schedule(snapshot, {"cq": [big, small]})
    by_key = {d.workload.key: d for d in decisions}
    assert isinstance(by_key["default/big"], NoFit) and by_key["default/big"].inadmissible
    assert "> maximum capacity (2)" in by_key["default/big"].message
    assert isinstance(by_key["default/small"], Admit)


def test_strict_fifo_head_blocks_the_queue_without_being_parked():
    cq = cpu_queue("cq", "2", queueing_strategy=STRICT_FIFO)
    snapshot = Snapshot(flavors={"default": ResourceFlavor("default")}, cluster_queues={"cq": cq})
    big, small = job("big", "3", priority=1, t=1), job("small", "1", t=2)
    decisions = schedule(snapshot, {"cq": [big, small]})
    assert [(type(d), d.workload.key) for d in decisions] == [(NoFit, "default/big")]
    assert decisions[0].inadmissible is False


def test_non_borrowing_head_goes_first_and_the_borrowing_one_no_longer_fits():
    snapshot = Snapshot(
        flavors={"default": ResourceFlavor("default")},
        cluster_queues={
            "a": cpu_queue("a", "2", cohort="c"),
            "b": cpu_queue("b", "2", cohort="c"),
        },
    )
    # b's head borrows (3 > nominal 2) and has the higher priority; a's head stays within nominal.
    borrower = job("borrower", "3", cq="b", priority=10, t=1)
    local = job("local", "2", cq="a", t=2)
    decisions = schedule_cycle(snapshot, {"a": [local], "b": [borrower]})
    assert isinstance(decisions[0], Admit) and decisions[0].workload.key == "default/local"
    skipped = decisions[1]
    assert isinstance(skipped, NoFit) and not skipped.inadmissible
    assert skipped.message == "Workload no longer fits after processing another workload"


def test_inactive_cluster_queue_and_namespace_mismatch_are_parked_with_kueue_messages():
    snapshot = Snapshot(
        flavors={"default": ResourceFlavor("default")},
        cluster_queues={
            "held": cpu_queue("held", "2", active=False),
            "team": replace(cpu_queue("team", "2"), namespace_selector={"matchLabels": {"team": "a"}}),
        },
        namespace_labels={"default": {"team": "b"}},
    )
    decisions = schedule_cycle(
        snapshot, {"held": [job("x", "1", cq="held")], "team": [job("y", "1", cq="team")]}
    )
    messages = {d.workload.key: (d.message, d.inadmissible) for d in decisions}
    assert messages == {
        "default/x": ("ClusterQueue held is inactive", True),
        "default/y": ("workload namespace doesn't match ClusterQueue selector", True),
    }


def test_inactive_strict_fifo_queue_keeps_its_head_in_place():
    held = cpu_queue("held", "2", active=False, queueing_strategy=STRICT_FIFO)
    snapshot = Snapshot(flavors={"default": ResourceFlavor("default")}, cluster_queues={"held": held})
    (decision,) = schedule(snapshot, {"held": [job("x", "1", cq="held", t=1), job("y", "1", cq="held", t=2)]})
    assert (decision.workload.key, decision.inadmissible) == ("default/x", False)


def test_namespace_selector_semantics():
    assert namespace_selected({}, {}) is True
    assert namespace_selected(None, {"a": "b"}) is False
    selector = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}
    assert namespace_selected(selector, {"tier": "gold"}) is True
    assert namespace_selected(selector, {"tier": "silver"}) is False
    assert namespace_selected({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, {"a": "b"}) is False


def test_preemptor_waits_for_victims_and_does_not_evict_twice():
    cq = cpu_queue("cq", "2", preemption=PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY))
    snapshot = Snapshot(flavors={"default": ResourceFlavor("default")}, cluster_queues={"cq": cq})
    low = job("low", "2", t=1)
    admitted_in(snapshot, schedule_cycle(snapshot, {"cq": [low]}, now=1)[0])
    high = job("high", "2", priority=1, t=2)
    (decision,) = schedule(snapshot, {"cq": [high]})
    assert isinstance(decision, Preempt)
    assert [v.workload.key for v in decision.victims] == ["default/low"]
    assert decision.victims[0].workload.evicted is False
    assert decision.pending_message == (
        "couldn't assign flavors to pod set head: insufficient unused quota for cpu in flavor default, "
        "2 more needed. Pending the preemption of 1 workload(s)"
    )
    # Next time round the victim is being evicted (still holds quota): same victim, nothing new to issue.
    snapshot.admitted["cq"] = [replace(w, evicted=True) for w in snapshot.admitted["cq"]]
    (again,) = schedule(snapshot, {"cq": [high]})
    assert isinstance(again, Preempt) and again.victims[0].workload.evicted is True


def test_schedule_does_not_modify_the_snapshot():
    snapshot = Snapshot(
        flavors={"default": ResourceFlavor("default")}, cluster_queues={"cq": cpu_queue("cq", "4")}
    )
    schedule(snapshot, {"cq": [job("a", "1", t=1), job("b", "1", t=2)]})
    assert snapshot.admitted == {}


# --------------------------------------------------------------------------------- scenarios


def _resource_groups(groups) -> tuple[ResourceGroup, ...]:
    def q(resource, value):
        return None if value is None else quantity.to_canonical(resource, value)

    return tuple(
        ResourceGroup(
            tuple(group["coveredResources"]),
            tuple(
                FlavorQuotas(
                    flavor["name"],
                    {
                        r["name"]: ResourceQuota(
                            q(r["name"], r["nominalQuota"]),
                            q(r["name"], r.get("borrowingLimit")),
                            q(r["name"], r.get("lendingLimit")),
                        )
                        for r in flavor["resources"]
                    },
                )
                for flavor in group["flavors"]
            ),
        )
        for group in groups or []
    )


def _cluster_queue(obj: dict, flavors: dict[str, dict]) -> ClusterQueue:
    spec = obj["spec"]
    preemption = spec.get("preemption") or {}
    borrow = preemption.get("borrowWithinCohort") or {}
    fungibility = spec.get("flavorFungibility") or {}
    return ClusterQueue(
        name=obj["metadata"]["name"],
        resource_groups=_resource_groups(spec.get("resourceGroups")),
        cohort=spec.get("cohortName"),
        queueing_strategy=spec.get("queueingStrategy", BEST_EFFORT_FIFO),
        preemption=PreemptionPolicy(
            preemption.get("withinClusterQueue", "Never"),
            preemption.get("reclaimWithinCohort", "Never"),
            borrow.get("policy", "Never"),
            borrow.get("maxPriorityThreshold"),
        ),
        flavor_fungibility=FlavorFungibility(
            fungibility.get("whenCanBorrow", MAY_STOP_SEARCH),
            fungibility.get("whenCanPreempt", TRY_NEXT_FLAVOR),
            fungibility.get("preference", BORROWING_OVER_PREEMPTION),
        ),
        stop_policy=spec.get("stopPolicy", "None"),
        namespace_selector=spec.get("namespaceSelector"),
        # Whether a queue can admit is the controller's reading of the objects (stopPolicy, flavors).
        active=cluster_queue_active(obj, flavors)[0],
    )


class ScenarioDriver:
    """A stand-in Kueue controller: queues, workloads, and the effect of each decision.

    Like the controller, it gives a Workload the current value of the priority class its RayJob names,
    and a class's new value (or a RayJob's new class) reaches its Workloads, admitted or pending.
    """

    def __init__(self, objects: list[dict]):
        self.snapshot = Snapshot()
        self.cluster_queue_objects: dict[str, dict] = {}
        self.flavor_objects: dict[str, dict] = {}
        self.local_queues: dict[str, str] = {}
        self.priorities: dict[str, int] = {}
        self.classes: dict[str, str] = {}  # rayjob name -> the priority class its label names
        self.clock = 0.0
        self.pending: dict[str, Workload] = {}
        self.admitted: dict[str, Workload] = {}
        self.messages: dict[str, str] = {}
        self.preempted_reason: dict[str, str] = {}
        self.eviction_messages: dict[str, str] = {}
        self.unqueued: set[str] = set()
        self.apply(objects)

    def apply(self, objects: list[dict]) -> None:
        for obj in objects:
            name = obj["metadata"]["name"]
            kind = obj["kind"]
            if kind == "ResourceFlavor":
                self.flavor_objects[name] = obj
                self.snapshot.flavors[name] = ResourceFlavor(
                    name, (obj.get("spec") or {}).get("nodeLabels") or {}
                )
            elif kind == "ClusterQueue":
                self.cluster_queue_objects[name] = obj
            elif kind == "Cohort":
                spec = obj.get("spec") or {}
                self.snapshot.cohorts[name] = Cohort(
                    name, spec.get("parentName"), _resource_groups(spec.get("resourceGroups"))
                )
            elif kind == "LocalQueue":
                self.local_queues[name] = obj["spec"]["clusterQueue"]
            elif kind == "WorkloadPriorityClass":
                self.priorities[name] = obj["value"]
        self.snapshot.cluster_queues = {
            name: _cluster_queue(obj, self.flavor_objects) for name, obj in self.cluster_queue_objects.items()
        }
        self.follow_priority_classes()
        self.unpark()

    def relabel(self, classes: dict[str, str]) -> None:
        self.classes.update(classes)
        self.follow_priority_classes()
        self.unpark()
        self.settle()

    def follow_priority_classes(self) -> None:
        """Every Workload gets the current value of its RayJob's class, whether it holds quota or waits."""
        for workloads in (self.pending, self.admitted):
            for name, workload in workloads.items():
                if name in self.classes:
                    workloads[name] = replace(workload, priority=self.priorities[self.classes[name]])

    def unpark(self) -> None:
        """A cluster event: parked workloads become candidates again (upstream QueueInadmissibleWorkloads)."""
        self.pending = {k: replace(w, inadmissible=False) for k, w in self.pending.items()}

    def submit(self, name: str, spec: dict) -> None:
        self.clock += 1
        pod_sets = [PodSet("head", 1, self.requests(spec["head"]))]
        for group in spec.get("workers") or []:
            pod_sets.append(
                PodSet(group["group"], group.get("replicas", 1), self.requests(group["requests"]))
            )
        if spec.get("mode", "HTTPMode") == "K8sJobMode":
            pod_sets.append(PodSet("submitter", 1, self.requests({"cpu": "500m", "memory": "200Mi"})))
        queue = spec["queue"]
        if spec.get("priority"):
            self.classes[name] = spec["priority"]
        workload = Workload(
            key=f"default/{name}",
            uid=f"wl-{name}",
            job_uid=f"job-{name}",
            cluster_queue=self.local_queues.get(queue, ""),
            pod_sets=tuple(pod_sets),
            priority=self.priorities.get(spec.get("priority"), 0),
            queue_timestamp=self.clock,
            creation_seq=int(self.clock),
            local_queue=queue,
        )
        if queue not in self.local_queues:
            # The controller's job, not the scheduler's: it never reaches a ClusterQueue.
            self.messages[name] = f"LocalQueue {queue} doesn't exist"
            self.unqueued.add(name)
            return
        self.pending[name] = workload
        self.settle()

    @staticmethod
    def requests(values: dict) -> dict[str, int]:
        return {r: quantity.to_canonical(r, v) for r, v in values.items()}

    def finish(self, names: list[str]) -> None:
        for name in names:
            self.pending.pop(name, None)
            self.admitted.pop(name, None)
        self.unpark()
        self.settle()

    def settle(self) -> None:
        for _ in range(50):
            self.clock += 1
            self.snapshot.admitted = {}
            for w in self.admitted.values():
                self.snapshot.admitted.setdefault(w.admission.cluster_queue, []).append(w)
            by_cq: dict[str, list[Workload]] = {}
            for w in self.pending.values():
                by_cq.setdefault(w.cluster_queue, []).append(w)
            released = False
            for decision in schedule(self.snapshot, by_cq, now=self.clock):
                name = decision.workload.key.split("/")[1]
                if isinstance(decision, Admit):
                    del self.pending[name]
                    self.admitted[name] = replace(decision.workload, admission=decision.admission)
                    self.messages[name] = f"Quota reserved in ClusterQueue {decision.admission.cluster_queue}"
                elif isinstance(decision, NoFit):
                    self.messages[name] = decision.message
                    self.pending[name] = replace(self.pending[name], inadmissible=decision.inadmissible)
                else:
                    self.messages[name] = decision.pending_message
                    for victim in decision.victims:
                        victim_name = victim.workload.key.split("/")[1]
                        victim_wl = self.admitted.pop(victim_name)
                        self.preempted_reason[victim_name] = victim.reason
                        self.eviction_messages[victim_name] = victim.message
                        self.pending[victim_name] = replace(victim_wl, admission=None, evicted=False)
                        released = True
            if not released:
                return
            self.unpark()
        raise AssertionError("the scenario did not settle")

    def check(self, step: Step, index: int) -> None:
        for name, expected in step.then.items():
            where = f"step {index}: {name}"
            state = "admitted" if name in self.admitted else "pending"
            assert state == expected.state, where
            assert (name in self.preempted_reason) is bool(expected.preempted), where
            if isinstance(expected.preempted, str):
                assert self.preempted_reason[name] == expected.preempted, where
            if expected.message is not None:
                assert expected.message in self.messages[name], (where, self.messages[name])
            if expected.suspended is not None:
                assert (name in self.admitted) is not expected.suspended, where
            workload = self.admitted.get(name) or self.pending.get(name)
            if expected.priority is not None:
                assert workload.priority == expected.priority, where
            if expected.flavors is not None:
                assignments = self.admitted[name].admission.pod_set_assignments
                for resource, flavor in expected.flavors.items():
                    got = {a.flavors[resource] for a in assignments if resource in a.flavors}
                    assert got == {flavor}, (where, resource, got)
            if expected.usage is not None:
                assignments = self.admitted[name].admission.pod_set_assignments
                for resource, total in expected.usage.items():
                    got = sum(a.resource_usage.get(resource, 0) for a in assignments)
                    assert got == quantity.to_canonical(resource, total), (where, resource, got)
        for name, expected in step.queues.items():
            active, reason, message = cluster_queue_active(
                self.cluster_queue_objects[name], self.flavor_objects
            )
            condition = {"status": "True" if active else "False", "reason": reason, "message": message}
            assert not expected.problems(condition), (
                f"step {index}: queue {name}: {expected.problems(condition)}"
            )

    def play(self, scenario: Scenario, steps: int | None = None) -> None:
        for index, step in enumerate(scenario.story[:steps]):
            for name in step.submit:
                self.submit(name, scenario.rayjobs[name])
            if step.finish:
                self.finish(list(step.finish))
            if step.apply:
                self.apply(list(step.apply))
                self.settle()
            if step.relabel:
                self.relabel(step.relabel)
            self.check(step, index)


def _replayable(scenario: Scenario):
    if scenario.http_only:
        return pytest.param(scenario, marks=pytest.mark.skip(reason=f"HTTP only: {scenario.http_only}"))
    return scenario


@pytest.mark.parametrize("scenario", [_replayable(s) for s in SCENARIOS], ids=lambda s: s.name)
def test_scenario(scenario: Scenario):
    ScenarioDriver(list(scenario.kueue)).play(scenario)


def test_scenarios_are_present():
    assert len(SCENARIOS) >= 13


def test_scenario_messages_match_kueue_format():
    """The never-fits scenario's message, and the preemption message paths, exactly as Kueue writes them."""
    never_fits = load(DIRECTORY / "single-queue-never-fits.yaml")
    driver = ScenarioDriver(list(never_fits.kueue))
    driver.play(never_fits, steps=1)
    assert driver.messages["too-big"] == (
        "couldn't assign flavors to pod set submitter: "
        "insufficient quota for cpu in flavor default-flavor, previously considered podsets requests (2) + "
        "current podset request (500m) > maximum capacity (2), "
        "insufficient quota for memory in flavor default-flavor, previously considered podsets requests "
        "(7812500Ki) + current podset request (200Mi) > maximum capacity (7812500Ki)"
    )

    reclaim = load(DIRECTORY / "kueue-cohort-reclaim.yaml")
    driver = ScenarioDriver(list(reclaim.kueue))
    driver.play(reclaim, steps=2)
    assert driver.eviction_messages["beta-mid"] == (
        "Preempted to accommodate a workload (UID: wl-alpha-mid, JobUID: job-alpha-mid) due to reclamation "
        "within the cohort; preemptor path: /all/alpha-cq; preemptee path: /all/beta-cq"
    )
    assert driver.eviction_messages["alpha-low"].endswith(
        "due to prioritization in the ClusterQueue; preemptor path: /all/alpha-cq; preemptee path: /all/alpha-cq"
    )


@pytest.mark.parametrize(("reclaim", "y_admitted"), [("Never", False), ("Any", True)])
def test_preemptor_without_candidates_holds_capacity_unless_it_can_always_reclaim(reclaim, y_admitted):
    policy = PreemptionPolicy(within_cluster_queue=LOWER_PRIORITY, reclaim_within_cohort=reclaim)
    snapshot = Snapshot(
        flavors={"default": ResourceFlavor("default")},
        cluster_queues={
            "a": cpu_queue("a", "2", cohort="c", preemption=policy),
            "b": cpu_queue("b", "2", cohort="c"),
        },
    )
    for running, cq_name, cpu, priority in (("a1", "a", "1", 5), ("b1", "b", "2", 0)):
        (admit,) = schedule_cycle(snapshot, {cq_name: [job(running, cpu, cq=cq_name, priority=priority)]})
        admitted_in(snapshot, admit)
    # x cannot fit and may not preempt a1; y would fit by borrowing the last free core.
    x = job("x", "2", cq="a", priority=1, t=5)
    y = job("y", "1", cq="b", t=6)
    decisions = {d.workload.key: d for d in schedule_cycle(snapshot, {"a": [x], "b": [y]})}
    assert isinstance(decisions["default/x"], NoFit)
    assert isinstance(decisions["default/y"], Admit) is y_admitted
