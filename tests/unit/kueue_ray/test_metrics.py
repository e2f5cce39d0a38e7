"""Queue metrics: what a trigger counts, with which tags, and that a restart or a second trigger on the
same RayJob does not count the past again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from kueue_ray import metrics
from kueue_ray.hub import ADMITTED, HubSettings, WatchHub
from kueue_ray.metrics import Ledger, WaitMetrics
from kueue_ray.status import TERMINAL_PHASES, Observation, Phase
from kueue_ray.timeline import Timeline

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PREEMPTED = {"reason": "InCohortReclamation", "message": "Preempted to accommodate a workload ..."}


class Sink:
    """Records what would go to StatsD / OpenTelemetry."""

    def __init__(self):
        self.sent = []

    def incr(self, stat, count=1, rate=1, *, tags=None):
        self.sent.append(("incr", stat, tags))

    def timing(self, stat, dt, *, tags=None):
        self.sent.append(("timing", stat, dt.total_seconds(), tags))

    def gauge(self, stat, value, *, tags=None):
        self.sent.append(("gauge", stat, value, tags))

    def names(self):
        return [entry[1] for entry in self.sent]


def obs(phase, *, preemptions=0, quota_at=None, admitted_at=None, last_preemption=None):
    admitted = phase not in (Phase.QUEUED, Phase.SUBMITTED)
    return Observation(
        phase=phase,
        terminal=phase in TERMINAL_PHASES,
        reason="",
        message="",
        preemptions=preemptions,
        cluster_queue="team-a-cq" if admitted else None,
        quota_reserved_at=quota_at,
        admitted_at=admitted_at,
        last_preemption=last_preemption,
    )


def waiter(sink, ledger, *, deferred_at=T0, started=T0 + timedelta(seconds=2)):
    return WaitMetrics(
        "uid-1",
        queue="team-a",
        priority="dev-priority",
        namespace="ml",
        deferred_at=deferred_at.isoformat() if deferred_at else None,
        started=started,
        ledger=ledger,
        sink=sink,
    )


def feed(counter, timeline, events):
    for seconds, observation in events:
        timeline.record(observation, T0 + timedelta(seconds=seconds))
        counter.recorded(timeline, observation.cluster_queue)


LIFE = [
    (0, obs(Phase.QUEUED)),
    (40, obs(Phase.AWAITING_CHECKS)),
    (45, obs(Phase.ADMITTED)),
    (60, obs(Phase.RUNNING)),
    (90, obs(Phase.PREEMPTED, preemptions=1, last_preemption=PREEMPTED)),
    (95, obs(Phase.QUEUED, preemptions=1, last_preemption=PREEMPTED)),
    (125, obs(Phase.RUNNING, preemptions=1)),
]


def test_admissions_waits_and_preemptions_with_their_tags():
    sink = Sink()
    counter = waiter(sink, Ledger())
    feed(counter, Timeline(submitted_at=T0.timestamp()), LIFE)
    tags = {"queue": "team-a", "priority": "dev-priority", "namespace": "ml", "cluster_queue": "team-a-cq"}
    assert sink.sent == [
        ("incr", metrics.ADMISSIONS, tags),
        ("timing", metrics.QUEUED_UNTIL_QUOTA_RESERVED, 40.0, tags),
        ("timing", metrics.QUEUED_UNTIL_ADMITTED, 45.0, tags),
        ("incr", metrics.PREEMPTIONS, {**tags, "reason": "InCohortReclamation"}),
        # The second wait counts from the preemption, not from submission.
        ("incr", metrics.ADMISSIONS, tags),
        ("timing", metrics.QUEUED_UNTIL_QUOTA_RESERVED, 35.0, tags),
        ("timing", metrics.QUEUED_UNTIL_ADMITTED, 35.0, tags),
    ]


def test_a_late_first_look_counts_what_happened_before_it():
    """A sensor deferring after Kueue admitted the RayJob still counts the admission and its wait,
    from the Workload's timestamps."""
    sink = Sink()
    counter = waiter(sink, Ledger())
    timeline = Timeline(submitted_at=T0.timestamp())
    running = obs(Phase.RUNNING, quota_at="2026-12-01T12:00:20Z", admitted_at="2026-12-01T12:00:20Z")
    timeline.record(running, T0 + timedelta(seconds=50))
    counter.recorded(timeline, "team-a-cq")
    assert sink.names() == [
        metrics.ADMISSIONS,
        metrics.QUEUED_UNTIL_QUOTA_RESERVED,
        metrics.QUEUED_UNTIL_ADMITTED,
    ]
    assert sink.sent[1][2] == 20.0


def test_a_restarted_trigger_counts_only_what_happens_from_then_on():
    """Its first look finds the RayJob admitted long ago: a predecessor counted that."""
    sink = Sink()
    late = T0 + timedelta(seconds=metrics.FIRST_START_GRACE_SECONDS + 60)
    counter = waiter(sink, Ledger(), started=late)
    timeline = Timeline(submitted_at=T0.timestamp())
    feed(counter, timeline, [(400, obs(Phase.RUNNING, quota_at="2026-12-01T12:00:20Z"))])
    feed(counter, timeline, [(450, obs(Phase.PREEMPTED, preemptions=1, last_preemption=PREEMPTED))])
    assert sink.names() == [metrics.PREEMPTIONS]


def test_two_triggers_of_one_rayjob_in_one_triggerer_count_each_event_once():
    """E.g. a sensor retried, or two triggers of one task during a hand-over."""
    sink, ledger = Sink(), Ledger()
    for _ in range(2):
        feed(waiter(sink, ledger), Timeline(submitted_at=T0.timestamp()), LIFE)
    assert sink.names().count(metrics.ADMISSIONS) == 2  # the two admissions, once each
    assert sink.names().count(metrics.PREEMPTIONS) == 1


def test_the_outcome_once_per_trigger_and_inadmissible_with_kueues_reason():
    sink = Sink()
    counter = waiter(sink, Ledger())
    counter.ended("inadmissible", "Inadmissible", None)
    counter.ended("inadmissible", "Inadmissible", None)
    base = {"queue": "team-a", "priority": "dev-priority", "namespace": "ml"}
    assert sink.sent == [
        ("incr", metrics.OUTCOME, {**base, "outcome": "inadmissible"}),
        ("incr", metrics.INADMISSIBLE, {**base, "reason": "Inadmissible"}),
    ]


def test_pods_ready_evictions_are_counted_apart():
    sink = Sink()
    counter = waiter(sink, Ledger())
    timeline = Timeline(submitted_at=T0.timestamp())
    timeline.evictions.append({"at": 1.0, "reason": "PodsReadyTimeout", "message": "..."})
    timeline.evictions.append({"at": 2.0, "reason": "AdmissionCheck", "message": "..."})
    counter.recorded(timeline, "team-a-cq")
    assert sink.names() == [metrics.PODS_READY_EVICTIONS]


def test_a_broken_metrics_backend_never_disturbs_the_wait():
    class Broken:
        def incr(self, *args, **kwargs):
            raise OSError("statsd host unreachable")

        timing = gauge = incr

    counter = waiter(Broken(), Ledger())
    feed(counter, Timeline(submitted_at=T0.timestamp()), LIFE)
    counter.ended("success", "Succeeded", "team-a-cq")


def test_the_ledger_forgets_the_oldest_rayjobs_first():
    ledger = Ledger(capacity=2)
    assert ledger.first("a", "admission", 0)
    assert not ledger.first("a", "admission", 0)
    ledger.first("b", "admission", 0)
    ledger.first("c", "admission", 0)
    assert ledger.first("a", "admission", 0)  # forgotten


@pytest.fixture
def sink(monkeypatch):
    recorded = Sink()
    monkeypatch.setattr(metrics, "stats", lambda: recorded)
    return recorded


def test_the_hub_reports_the_tasks_waiting_per_queue_and_stage_then_zero(sink):
    class Client:
        async def __aenter__(self):
            return object()

        async def __aexit__(self, *exc):
            return None

    async def scenario():
        hub = WatchHub(HubSettings(gauge_interval=0.05), connection_factory=lambda conn_id: Client())
        async with (
            hub.subscribe("k8s", "ml", "a", "ua") as a,
            hub.subscribe("k8s", "ml", "b", "ub") as b,
            hub.subscribe("k8s", "ml", "c", "uc") as c,
        ):
            for subscription, queue in ((a, "team-a"), (b, "team-a"), (c, "team-b")):
                subscription.queue = queue
            c.stage = ADMITTED
            await asyncio.sleep(0.12)
        await asyncio.sleep(0.12)

    asyncio.run(scenario())
    gauges = [
        (tags["queue"], tags["stage"], value)
        for _, stat, value, tags in sink.sent
        if stat == metrics.TASKS_WAITING
    ]
    assert ("team-a", "queued", 2) in gauges and ("team-b", "admitted", 1) in gauges
    assert gauges[-2:] == [("team-a", "queued", 0), ("team-b", "admitted", 0)] or set(gauges[-2:]) == {
        ("team-a", "queued", 0),
        ("team-b", "admitted", 0),
    }
    assert all(tags["hostname"] and tags["namespace"] == "ml" for *_, tags in sink.sent)
