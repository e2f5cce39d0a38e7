"""The admission cycles' queues kept between passes must be what reading every queued Workload again gives."""

import random

from kubesim.kueue.cache import WorkloadIndex
from kubesim.kueue.equivalence import Parked
from kubesim.kueue.model import Workload
from kubesim.kueue.pending_queues import WAITING, PendingQueues

CONFIG = 1
"""The configuration's generation: the queues never look into it, only whether it changed since."""


def workload(name: str, priority: int, *, queue: str = "lq-a", backoff: bool = False, admitted=False) -> dict:
    status: dict = {"conditions": []}
    if admitted:
        status["admission"] = {"clusterQueue": "cq-a", "podSetAssignments": []}
        status["conditions"].append({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"})
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"queueName": queue, "active": True, "priority": priority, "backoff": backoff},
        "status": status,
    }


def examine(wl: dict):
    """Two LocalQueues on two ClusterQueues and one that is blocked; a shape per priority."""
    spec = wl["spec"]
    if spec["backoff"]:
        return WAITING
    if spec["queueName"] == "lq-blocked":
        return None
    cluster_queue = "cq-" + spec["queueName"][-1]
    name = wl["metadata"]["name"]
    model = Workload(
        key=f"ns/{name}",
        uid=wl["metadata"]["uid"],
        cluster_queue=cluster_queue,
        pod_sets=(),
        priority=spec["priority"],
        creation_seq=int(name[1:]),
    )
    return cluster_queue, (cluster_queue, str(spec["priority"])), model


def listed(queues: PendingQueues) -> dict[str, list[str]]:
    return {cq: [w.key for _, w in queue] for cq, queue in queues.queues.items() if queue}


def copied(parked: Parked) -> Parked:
    copy = Parked()
    copy.update(parked)
    copy.shapes = set(parked.shapes)
    return copy


def test_queues_kept_between_passes_match_a_fresh_read_after_any_changes():
    """Between two refreshes, in any order: Workloads change, cycles park heads (sometimes with their
    class) and quota is released (every parked Workload requeued), as within one admission pass."""
    rng = random.Random(7)
    index, parked, kept = WorkloadIndex(), Parked(), PendingQueues()
    objects: dict[tuple[str, str], dict] = {}

    def change() -> None:
        name = f"w{rng.randrange(40)}"
        ident = ("ns", name)
        old = objects.get(ident)
        choice = rng.random()
        if choice < 0.1 and old is not None:
            new = None  # deleted
        elif choice < 0.2 and old is not None:
            new = workload(name, old["spec"]["priority"], admitted=True)
        else:
            new = workload(
                name,
                rng.choice([0, 100, 1000]),
                queue=rng.choice(["lq-a", "lq-b", "lq-blocked"]),
                backoff=rng.random() < 0.1,
            )
        index.update(ident, old, new)
        if new is None:
            objects.pop(ident)
        else:
            objects[ident] = new

    def park_a_head() -> None:
        candidates = [w for queue in kept.queues.values() for _, w in queue if w.uid not in parked]
        if candidates:
            head = candidates[0]
            parked.add(head.uid)
            if rng.random() < 0.5:
                shape = kept.shapes[head.uid]
                parked.shapes.add(shape)
                parked.update(u for u, s in kept.shapes.items() if s == shape)

    for step in range(1500):
        for _ in range(rng.randrange(1, 5)):
            choice = rng.random()
            if choice < 0.6:
                change()
            elif choice < 0.9:
                park_a_head()
            else:
                parked.clear()  # quota released: every parked Workload is requeued
        fresh_parked = copied(parked)
        fresh = PendingQueues()
        fresh.refresh(CONFIG, fresh_parked, index.queued, set(), examine)
        kept.refresh(CONFIG, parked, index.queued, index.take_queued_changes(), examine)
        assert listed(kept) == listed(fresh), step
        assert kept.where == fresh.where and kept.shapes == fresh.shapes, step
        assert set(parked) == set(fresh_parked), step
        assert not any(w.uid in parked for queue in kept.queues.values() for _, w in queue), step


def test_requeued_parked_workloads_are_put_back_without_being_examined_again():
    index, parked, kept = WorkloadIndex(), Parked(), PendingQueues()
    for n in range(3):
        index.update(("ns", f"w{n}"), None, workload(f"w{n}", 0))
    kept.refresh(CONFIG, parked, index.queued, index.take_queued_changes(), examine)
    parked.update(["uid-w0", "uid-w1"])
    kept.refresh(CONFIG, parked, index.queued, index.take_queued_changes(), examine)
    assert listed(kept) == {"cq-a": ["ns/w2"]}
    calls = []

    def counting(wl):
        calls.append(wl["metadata"]["name"])
        return examine(wl)

    index.update(("ns", "w1"), workload("w1", 0), workload("w1", 100))
    parked.clear()
    kept.refresh(CONFIG, parked, index.queued, index.take_queued_changes(), counting)
    assert calls == ["w1"]  # only the one that changed while parked
    assert listed(kept) == {"cq-a": ["ns/w1", "ns/w0", "ns/w2"]}


def test_a_new_configuration_reads_every_queued_workload_again():
    index, parked, kept = WorkloadIndex(), Parked(), PendingQueues()
    index.update(("ns", "w1"), None, workload("w1", 0))
    kept.refresh(CONFIG, parked, index.queued, index.take_queued_changes(), examine)
    calls = []

    def counting(wl):
        calls.append(wl["metadata"]["name"])
        return examine(wl)

    kept.refresh(CONFIG, parked, index.queued, index.take_queued_changes(), counting)
    assert calls == []  # nothing changed: nothing examined
    kept.refresh(CONFIG + 1, parked, index.queued, index.take_queued_changes(), counting)
    assert calls == ["w1"]
