"""RayJobTrigger's contract with the triggerer (serialization), the Watchdog's rules for when to stop, and
the watch hub's relist that keeps every trigger's view current."""

from __future__ import annotations

import asyncio
import importlib
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from airflow.sdk.serde import deserialize, serialize
from kueue_ray.hub import Subscription, WatchHub
from kueue_ray.hub.resources import RAYJOBS
from kueue_ray.hub.scope import _Scope, _WatchLoop
from kueue_ray.kube.shared_client import SharedApiClient
from kueue_ray.naming import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from kueue_ray.status import Observation, Phase
from kueue_ray.trigger import RayJobTrigger
from kueue_ray.verdicts import VerdictStatus
from kueue_ray.wait_policy import WaitPolicy
from kueue_ray.waiting import Watchdog, describe_transition

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def obs(phase: Phase, reason: str = "", message: str = "", preemptions: int = 0, **more) -> Observation:
    return Observation(
        phase=phase,
        terminal=phase in (Phase.SUCCEEDED, Phase.FAILED),
        reason=reason,
        message=message,
        preemptions=preemptions,
        **more,
    )


def watchdog(**policy) -> Watchdog:
    """A Watchdog for a RayJob submitted at T0; no limit on pods-ready evictions unless given."""
    return Watchdog(WaitPolicy(**{"max_pods_ready_evictions": None, **policy}), T0)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(reserved: bool, since: datetime, *, admitted: datetime | None | bool = True) -> dict:
    """QuotaReserved as given; Admitted=True at the same moment (``admitted=True``), at another moment,
    or absent (``None``: quota reserved while admission checks are pending)."""
    conditions = [
        {
            "type": "QuotaReserved",
            "status": "True" if reserved else "False",
            "lastTransitionTime": stamp(since),
        }
    ]
    if reserved and admitted is not None:
        moment = since if admitted is True else admitted
        conditions.append({"type": "Admitted", "status": "True", "lastTransitionTime": stamp(moment)})
    return {"status": {"conditions": conditions}}


def test_serialize_round_trip_through_airflow_serde():
    trigger = RayJobTrigger(
        name="pipe-train-0123456789",
        namespace="ml",
        uid="8c5f7c9e-1",
        queue="team-a",
        priority="prod-priority",
        policy=WaitPolicy(
            queue_timeout=3600.0,
            run_timeout=None,
            inadmissible_grace=30.0,
            max_preemptions=3,
            max_pods_ready_evictions=2,
        ),
        owner={"dag_id": "pipe", "run_id": "manual__1", "task_id": "train", "map_index": -1, "try_number": 2},
        waiter={"dag_id": "pipe", "run_id": "manual__1", "task_id": "wait", "map_index": -1, "try_number": 1},
        submitted_at="2026-12-01T12:00:00+00:00",
        timeline={"queued_seconds": 4.5, "admissions": []},
    )
    classpath, kwargs = trigger.serialize()
    # What the worker stores and the triggerer reads back: JSON after Airflow's serde.
    stored = json.loads(json.dumps(serialize(kwargs)))
    module, _, name = classpath.rpartition(".")
    rebuilt = getattr(importlib.import_module(module), name)(**deserialize(stored))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert classpath == "kueue_ray.trigger.RayJobTrigger"


def test_queueing_is_bounded_by_default_and_unbounded_only_when_asked():
    dog = watchdog()
    assert dog.check(obs(Phase.QUEUED, "Pending"), workload(False, T0), at(86399)) is None
    assert dog.seconds_until_next_deadline(at(86399)) == 1
    verdict = dog.check(obs(Phase.QUEUED, "Pending"), workload(False, T0), at(86400))
    assert verdict.status == "queue_timeout" and "queue_timeout=86400s" in verdict.message
    forever = Watchdog(WaitPolicy.from_dict({"queue_timeout": "inf", "run_timeout": "inf"}), T0)
    assert forever.check(obs(Phase.QUEUED, "Pending"), workload(False, T0), at(10 * 86400)) is None
    assert forever.seconds_until_next_deadline(at(10 * 86400)) is None


def test_queue_timeout_counts_from_the_last_loss_of_quota():
    dog = watchdog(queue_timeout=60)
    # Preempted at t=100: the Workload's QuotaReserved went False then, so the wait started then.
    assert dog.check(obs(Phase.QUEUED, "Pending"), workload(False, at(100)), at(150)) is None
    assert dog.seconds_until_next_deadline(at(150)) == 10
    verdict = dog.check(
        obs(Phase.QUEUED, "Pending", "insufficient unused quota"), workload(False, at(100)), at(161)
    )
    assert verdict.status == VerdictStatus.QUEUE_TIMEOUT
    assert "queue_timeout=60s" in verdict.message and "insufficient unused quota" in verdict.message


def test_run_timeout_counts_from_the_last_admission_and_restarts_after_preemption():
    dog = watchdog(run_timeout=100)
    assert dog.check(obs(Phase.RUNNING), workload(True, at(10)), at(90)) is None
    assert dog.check(obs(Phase.PREEMPTED, "Preempted"), workload(True, at(10)), at(95)) is None
    assert dog.check(obs(Phase.QUEUED), workload(False, at(96)), at(100)) is None
    assert dog.check(obs(Phase.RUNNING), workload(True, at(150)), at(200)) is None
    assert dog.check(obs(Phase.RUNNING), workload(True, at(150)), at(251)).status == VerdictStatus.RUN_TIMEOUT


def test_run_timeout_does_not_count_the_wait_for_admission_checks():
    """Quota reserved at 10 s, the admission check passed at 300 s: the run clock starts at 300 s."""
    dog = watchdog(run_timeout=100, queue_timeout=400)
    awaiting = obs(Phase.AWAITING_CHECKS, "QuotaReserved", "waiting for admission checks: gpu (Pending)")
    assert dog.check(awaiting, workload(True, at(10), admitted=None), at(250)) is None
    assert dog.seconds_until_next_deadline(at(250)) == 150  # only the queue clock runs meanwhile
    admitted = workload(True, at(10), admitted=at(300))
    assert dog.check(obs(Phase.RUNNING), admitted, at(390)) is None
    assert dog.check(obs(Phase.RUNNING), admitted, at(401)).status == VerdictStatus.RUN_TIMEOUT
    late = watchdog(queue_timeout=100)
    assert (
        late.check(awaiting, workload(True, at(10), admitted=None), at(101)).status
        == VerdictStatus.QUEUE_TIMEOUT
    )


def test_pods_ready_evictions_are_their_own_limit_with_the_hint():
    dog = watchdog(max_preemptions=0, max_pods_ready_evictions=1)
    first = obs(Phase.PODS_NOT_READY, "PodsReadyTimeout", pods_ready_evictions=1, pods_ready_timeout=1800.0)
    assert dog.check(first, None, at(1)) is None  # not a preemption: max_preemptions=0 does not apply
    assert dog.check(obs(Phase.QUEUED, "PodsReadyTimeout", pods_ready_evictions=1), None, at(2)) is None
    verdict = dog.check(obs(Phase.QUEUED, "PodsReadyTimeout", pods_ready_evictions=2), None, at(3))
    assert verdict.status == VerdictStatus.PODS_NOT_READY
    assert verdict.message.startswith("pods not ready within 30m: check taints, tolerations, image pulls")
    assert "max_pods_ready_evictions=1" in verdict.message
    assert watchdog().check(obs(Phase.QUEUED, pods_ready_evictions=50), None, at(4)) is None


def test_inadmissible_fails_only_after_the_grace_period_and_resets_when_it_clears():
    dog = watchdog(inadmissible_grace=30)
    stuck = obs(Phase.INADMISSIBLE, "Inadmissible", "LocalQueue lq doesn't exist")
    assert dog.check(stuck, workload(False, T0), at(0)) is None
    assert dog.check(obs(Phase.QUEUED), workload(False, T0), at(20)) is None
    assert dog.check(stuck, workload(False, T0), at(25)) is None
    verdict = dog.check(stuck, workload(False, T0), at(56))
    assert verdict.status == VerdictStatus.INADMISSIBLE and "LocalQueue lq doesn't exist" in verdict.message
    tolerant = watchdog(fail_on_inadmissible=False, inadmissible_grace=0)
    assert tolerant.check(stuck, workload(False, T0), at(1000)) is None


def test_max_preemptions_and_terminal_phases():
    dog = watchdog(max_preemptions=1)
    assert dog.check(obs(Phase.RUNNING, preemptions=1), None, at(1)) is None
    assert (
        dog.check(obs(Phase.QUEUED, preemptions=2), None, at(2)).status == VerdictStatus.TOO_MANY_PREEMPTIONS
    )
    assert watchdog().check(obs(Phase.SUCCEEDED, "Succeeded"), None, at(3)).status == VerdictStatus.SUCCESS
    failed = watchdog().check(obs(Phase.FAILED, "AppFailed", "boom"), None, at(3))
    assert (failed.status, failed.message) == ("failed", "boom")


def test_transition_line_quotes_kueue_and_adds_the_queue_position():
    line = describe_transition(
        "ml",
        "job",
        obs(Phase.QUEUED, "Pending", "insufficient unused quota for cpu, 2 more needed"),
        "position 4 in the ClusterQueue (2 of 3 pending in its LocalQueue)",
    )
    assert line == (
        "RayJob ml/job: QUEUED (Pending): insufficient unused quota for cpu, 2 more needed"
        " — position 4 in the ClusterQueue (2 of 3 pending in its LocalQueue)"
    )


# --- the hub's relist: the safety net that replaces per-trigger re-reads ------------------------------------


def rayjob_object(name: str, uid: str, version: int, *, managed: bool = True) -> dict:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE} if managed else {}
    return {"metadata": {"name": name, "uid": uid, "resourceVersion": str(version), "labels": labels}}


class ListAnswer:
    """A LIST answer as kubernetes_asyncio hands it over unread (``_preload_content=False``)."""

    def __init__(self, result: dict) -> None:
        self.status = 200
        self.content = SimpleNamespace(read=self.read)
        self.body = json.dumps(result).encode()

    async def read(self) -> bytes:
        return self.body

    def release(self) -> None:
        pass


class ListingApi:
    """Answers the hub's LIST with fixed items, as the API server would at resourceVersion ``version``."""

    def __init__(self, items: list[dict], version: int) -> None:
        self.result = {"metadata": {"resourceVersion": str(version)}, "items": items}

    async def list_namespaced_custom_object(self, *args, _preload_content=True, **kwargs):
        return self.result if _preload_content else ListAnswer(self.result)


def relist(cached: list[dict], listed: list[dict], subscribed: list[tuple[str, str]]) -> dict[str, list]:
    """Subscribe to (name, uid) pairs, fill the RayJob cache, relist; what each subscriber was told."""

    async def scenario():
        hub = WatchHub()
        scope = _Scope(
            ("kubernetes_default", "ml", ""), SharedApiClient(hub.connection_factory, "kubernetes_default")
        )
        subscriptions = [Subscription(hub, *scope.key[:2], name, uid, 300.0) for name, uid in subscribed]
        for subscription in subscriptions:
            scope.add(subscription)
        loop = _WatchLoop(hub, scope, RAYJOBS)
        loop.objects = {obj["metadata"]["name"]: obj for obj in cached}
        await loop._list(ListingApi(listed, 100))
        told = {}
        for subscription in subscriptions:
            told[subscription.name] = []
            while not subscription.updates.empty():
                update = subscription.updates.get_nowait()
                told[subscription.name].append(update.object and update.object["metadata"]["resourceVersion"])
        return told, loop

    return asyncio.run(scenario())


def test_a_relist_tells_subscribers_only_what_changed_or_vanished():
    told, loop = relist(
        cached=[rayjob_object("a", "ua", 5), rayjob_object("b", "ub", 6), rayjob_object("c", "uc", 7)],
        listed=[rayjob_object("a", "ua", 5), rayjob_object("b", "ub", 9)],
        subscribed=[("a", "ua"), ("b", "ub"), ("c", "uc")],
    )
    # a: unchanged, nothing to say; b: an event was missed, the newer state arrives; c: deleted unseen.
    assert told == {"a": [], "b": ["9"], "c": [None]}
    assert sorted(loop.objects) == ["a", "b"]
    assert loop.listed.is_set()


def test_a_relist_keeps_a_rayjob_its_label_selector_cannot_return():
    # A sensor on a RayJob another tool submitted: read by GET, never in the hub's label-selected list.
    told, loop = relist(
        cached=[rayjob_object("foreign", "uf", 3, managed=False)],
        listed=[],
        subscribed=[("foreign", "uf")],
    )
    assert told == {"foreign": []}
    assert "foreign" in loop.objects


def test_one_pass_indexes_every_pending_workloads_position_by_name():
    """The triggerer's shared visibility read is indexed once, so each queued task's lookup is a dict get."""
    from kueue_ray.hook import QueuePosition, position_from_summary, positions_from_summary

    summary = {
        "items": [
            {"metadata": {"name": f"wl-{i}"}, "positionInLocalQueue": i, "positionInClusterQueue": i + 2}
            for i in range(3)
        ]
    }
    positions = positions_from_summary(summary)
    assert positions == {
        f"wl-{i}": QueuePosition(in_local_queue=i, in_cluster_queue=i + 2, pending_in_local_queue=3)
        for i in range(3)
    }
    assert position_from_summary(summary, "wl-1") == positions["wl-1"]
    assert position_from_summary(summary, "gone") is None and positions_from_summary({}) == {}


def test_positions_read_from_the_summary_decoded_one_workload_at_a_time_are_the_same():
    """The triggerer decodes a deep queue's visibility summary item by item; what it indexes is what the
    whole summary says, the pending count included."""
    from kueue_ray.hook import positions_from_summary
    from kueue_ray.hook_common import positions_from_items
    from kueue_ray.kube.listbody import ListBody

    summary = {
        "kind": "PendingWorkloadsSummary",
        "items": [
            {"metadata": {"name": f"wl-{i}"}, "positionInLocalQueue": i, "positionInClusterQueue": i + 2}
            for i in range(5)
        ],
        "metadata": {},
    }
    streamed = positions_from_items(ListBody(json.dumps(summary)).items())
    assert streamed == positions_from_summary(summary)
    assert streamed["wl-4"].describe() == "position 7 in the ClusterQueue (5 of 5 pending in its LocalQueue)"


def test_admission_line_names_the_flavors_in_words():
    line = describe_transition(
        "ml",
        "job",
        obs(
            Phase.ADMITTED,
            "Admitted",
            "",
            cluster_queue="cluster-queue",
            flavors={"head": {"cpu": "default", "nvidia.com/gpu": "gpu"}, "submitter": {"cpu": "default"}},
        ),
        None,
    )
    assert line.endswith(
        "[ClusterQueue cluster-queue; flavors: head on default and gpu, submitter on default]"
    )
    assert "[" not in line.split("flavors:")[1].rstrip("]")
