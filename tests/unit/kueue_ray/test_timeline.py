"""Timeline accounting: waits, admissions, preemptions and resource-seconds."""

import dataclasses
import json
from datetime import UTC, datetime

from kueue_ray.status import TERMINAL_PHASES, Observation, Phase
from kueue_ray.timeline import Timeline

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC).timestamp()
USAGE = {"cpu": "2500m", "memory": "8G", "nvidia.com/gpu": "2"}
FLAVORS = {"head": {"nvidia.com/gpu": "a100"}}


def obs(phase, *, reason="", message="", preemptions=0, admitted=False):
    return Observation(
        phase=phase,
        terminal=phase in TERMINAL_PHASES,
        reason=reason,
        message=message,
        preemptions=preemptions,
        cluster_queue="cluster-queue" if admitted else None,
        flavors=FLAVORS if admitted else {},
        resource_usage=USAGE if admitted else {},
    )


def feed(timeline, events):
    for offset, observation in events:
        timeline.record(observation, T0 + offset)
    return timeline


def test_simple_run():
    timeline = feed(
        Timeline(),
        [
            (0, obs(Phase.SUBMITTED)),
            (2, obs(Phase.QUEUED, reason="Pending")),
            (30, obs(Phase.ADMITTED, admitted=True)),
            (35, obs(Phase.RUNNING, admitted=True)),
            (95, obs(Phase.SUCCEEDED, admitted=True)),
        ],
    )
    assert timeline.queued_seconds == 30
    assert timeline.admitted_seconds == 65
    assert timeline.running_seconds == 60
    assert timeline.resource_seconds == {"cpu": 150.0, "memory": 480e9, "nvidia.com/gpu": 120.0}
    assert timeline.final_phase == "SUCCEEDED"
    assert timeline.finished_at - timeline.submitted_at == 95
    assert [a["cluster_queue"] for a in timeline.admissions] == ["cluster-queue"]
    assert timeline.preemptions == []


def test_preemption_requeue_and_readmission():
    preempted_msg = (
        "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the ClusterQueue"
    )
    timeline = feed(
        Timeline(),
        [
            (0, obs(Phase.QUEUED)),
            (10, obs(Phase.RUNNING, admitted=True)),
            (
                70,
                obs(Phase.PREEMPTED, reason="Preempted", message=preempted_msg, preemptions=1, admitted=True),
            ),
            (75, obs(Phase.QUEUED, reason="Pending", preemptions=1)),
            (100, obs(Phase.ADMITTED, preemptions=1, admitted=True)),
            (105, obs(Phase.RUNNING, preemptions=1, admitted=True)),
            (125, obs(Phase.SUCCEEDED, preemptions=1, admitted=True)),
        ],
    )
    assert len(timeline.admissions) == 2
    assert [(p["reason"], p["message"]) for p in timeline.preemptions] == [("Preempted", preempted_msg)]
    assert timeline.queued_seconds == 10 + 25
    assert timeline.running_seconds == 60 + 20
    assert timeline.resource_seconds["nvidia.com/gpu"] == 160.0


def test_missed_preempted_phase_is_still_recorded_once():
    timeline = feed(
        Timeline(),
        [
            (0, obs(Phase.RUNNING, admitted=True)),
            (10, obs(Phase.QUEUED, reason="Pending", message="evicted", preemptions=1)),
            (20, obs(Phase.QUEUED, reason="Pending", preemptions=1)),
        ],
    )
    assert len(timeline.preemptions) == 1
    assert timeline.preemptions[0]["at"] == T0 + 10


def test_missed_preemption_quotes_kueues_preempted_condition_not_the_pending_message():
    kueue_words = {"reason": "InClusterQueue", "message": "Preempted to accommodate a workload (UID: 1)"}
    requeued = obs(Phase.QUEUED, reason="Pending", message="couldn't assign flavors", preemptions=1)
    requeued = dataclasses.replace(requeued, last_preemption=kueue_words)
    timeline = feed(Timeline(), [(0, obs(Phase.RUNNING, admitted=True)), (10, requeued)])
    assert [(p["reason"], p["message"]) for p in timeline.preemptions] == [
        ("InClusterQueue", "Preempted to accommodate a workload (UID: 1)")
    ]


def test_pods_ready_timeouts_are_evictions_of_their_own_not_preemptions():
    hint = "pods not ready within 30m: check taints, tolerations, image pulls"

    def not_ready(n):
        return dataclasses.replace(
            obs(Phase.PODS_NOT_READY, reason="PodsReadyTimeout", message=hint, admitted=True),
            pods_ready_evictions=n,
        )

    def queued(n, preemptions=0):
        return dataclasses.replace(obs(Phase.QUEUED, preemptions=preemptions), pods_ready_evictions=n)

    timeline = feed(
        Timeline(),
        [
            (0, obs(Phase.ADMITTED, admitted=True)),
            (5, not_ready(1)),
            (6, queued(1)),
            (8, obs(Phase.ADMITTED, admitted=True)),
            (9, queued(2)),  # the second PODS_NOT_READY moment was not observed: counted from the stats
            (10, obs(Phase.RUNNING, admitted=True)),
            (11, obs(Phase.PREEMPTED, reason="Preempted", preemptions=1, admitted=True)),
            (12, queued(2, preemptions=1)),
        ],
    )
    assert [p["reason"] for p in timeline.preemptions] == ["Preempted"]
    assert [e["reason"] for e in timeline.evictions] == ["PodsReadyTimeout", "PodsReadyTimeout"]
    assert timeline.evictions[0]["message"] == hint
    assert (timeline.preemption_count, timeline.pods_ready_eviction_count) == (1, 2)
    assert Timeline.from_dict(json.loads(json.dumps(timeline.to_dict()))).pods_ready_eviction_count == 2


def test_waiting_for_admission_checks_is_queued_time_not_run_time():
    timeline = feed(
        Timeline(),
        [
            (0, obs(Phase.QUEUED)),
            (10, obs(Phase.AWAITING_CHECKS, reason="QuotaReserved")),
            (40, obs(Phase.ADMITTED, admitted=True)),
            (45, obs(Phase.RUNNING, admitted=True)),
            (105, obs(Phase.SUCCEEDED, admitted=True)),
        ],
    )
    assert (timeline.queued_seconds, timeline.awaiting_checks_seconds) == (40, 30)
    assert (timeline.admitted_seconds, timeline.running_seconds) == (65, 60)
    assert [a["at"] for a in timeline.admissions] == [T0 + 40]


def test_a_late_waiter_splits_the_wait_at_the_reservation_and_the_admission():
    running = dataclasses.replace(
        late(Phase.RUNNING, reserved_offset=10, started_offset=45, admitted=True),
        admitted_at=datetime.fromtimestamp(T0 + 40, UTC).isoformat(),
    )
    timeline = feed(Timeline(submitted_at=T0), [(50, running)])
    assert (timeline.queued_seconds, timeline.awaiting_checks_seconds) == (40, 30)
    assert (timeline.admitted_seconds, timeline.running_seconds) == (10, 5)
    assert [a["at"] for a in timeline.admissions] == [T0 + 40]
    awaiting = late(Phase.AWAITING_CHECKS, reserved_offset=10)
    early = feed(Timeline(submitted_at=T0), [(25, awaiting)])
    assert (early.queued_seconds, early.awaiting_checks_seconds) == (25, 15)


def test_a_workload_deactivated_before_its_admission_was_never_admitted():
    """A rejected admission check: quota was reserved, the checks never passed."""
    timeline = feed(
        Timeline(),
        [
            (0, obs(Phase.QUEUED)),
            (2, obs(Phase.AWAITING_CHECKS, admitted=True)),
            (3, obs(Phase.DEACTIVATED, reason="AdmissionCheckRejected", admitted=True)),
        ],
    )
    assert timeline.admissions == []
    assert (timeline.queued_seconds, timeline.awaiting_checks_seconds, timeline.final_phase) == (
        3,
        1,
        "DEACTIVATED",
    )
    first_seen = feed(
        Timeline(), [(5, obs(Phase.DEACTIVATED, reason="AdmissionCheckRejected", admitted=True))]
    )
    assert first_seen.admissions == []


def test_round_trip_through_json_keeps_accumulating():
    timeline = feed(Timeline(), [(0, obs(Phase.QUEUED)), (20, obs(Phase.RUNNING, admitted=True))])
    data = json.loads(json.dumps(timeline.to_dict()))
    assert data["submitted_at"] == "2026-12-02T10:00:00+00:00"
    assert data["admissions"][0]["at"] == "2026-12-02T10:00:20+00:00"
    resumed = Timeline.from_dict(data)
    resumed.record(obs(Phase.SUCCEEDED, admitted=True), datetime(2026, 12, 2, 10, 1, 20, tzinfo=UTC))
    result = resumed.to_dict()
    assert result["queued_seconds"] == 20
    assert result["running_seconds"] == 60
    assert result["resource_seconds"]["nvidia.com/gpu"] == 120.0
    assert result["final_phase"] == "SUCCEEDED"
    assert result["finished_at"] == "2026-12-02T10:01:20+00:00"


def test_job_seen_only_when_already_finished_still_has_its_admission():
    timeline = feed(Timeline(), [(0, obs(Phase.SUCCEEDED, admitted=True))])
    assert timeline.admissions[0]["cluster_queue"] == "cluster-queue"
    assert timeline.running_seconds == 0


def late(phase, reserved_offset=None, started_offset=None, finished_offset=None, **kwargs):
    """An observation by a waiter that started after the fact, carrying the objects' own timestamps:
    Kueue's QuotaReserved instant and the Ray job's start and end (rayJobInfo)."""

    def iso(offset):
        return None if offset is None else datetime.fromtimestamp(T0 + offset, UTC).isoformat()

    return dataclasses.replace(
        obs(phase, **kwargs),
        quota_reserved_at=iso(reserved_offset),
        ray_job_started_at=iso(started_offset),
        ray_job_finished_at=iso(finished_offset),
    )


def test_a_waiter_that_starts_while_the_job_runs_still_knows_how_long_it_queued():
    # The sensor defers 50 s after submission; Kueue had reserved quota at 30 s.
    timeline = feed(
        Timeline(submitted_at=T0),
        [
            (50, late(Phase.RUNNING, reserved_offset=30, admitted=True)),
            (110, late(Phase.SUCCEEDED, reserved_offset=30, admitted=True)),
        ],
    )
    assert timeline.queued_seconds == 30
    assert timeline.admitted_seconds == 80
    assert timeline.running_seconds == 60
    assert [a["at"] for a in timeline.admissions] == [T0 + 30]


def test_a_waiter_that_starts_while_the_job_queues_counts_the_wait_since_submission():
    timeline = feed(Timeline(submitted_at=T0), [(40, late(Phase.QUEUED)), (55, late(Phase.QUEUED))])
    assert timeline.queued_seconds == 55
    assert timeline.admitted_seconds == 0


def test_a_job_first_seen_finished_gets_its_queueing_time_and_admission_instant():
    timeline = feed(
        Timeline(submitted_at=T0), [(200, late(Phase.SUCCEEDED, reserved_offset=30, admitted=True))]
    )
    assert timeline.queued_seconds == 30
    assert timeline.admitted_seconds == 0
    assert [a["at"] for a in timeline.admissions] == [T0 + 30]
    assert timeline.final_phase == "SUCCEEDED"


def test_a_reservation_time_outside_the_wait_is_clamped_to_it():
    # Kubernetes timestamps have 1 s precision and clocks differ: never negative, never in the future.
    timeline = feed(
        Timeline(submitted_at=T0), [(10, late(Phase.ADMITTED, reserved_offset=-3, admitted=True))]
    )
    assert timeline.queued_seconds == 0
    assert timeline.admitted_seconds == 10


def test_a_sensor_retry_that_first_sees_the_job_finished_still_reports_how_long_it_ran():
    """Try 2 of a sensor starts after the RayJob finished (try 1 was lost to a worker problem): the
    Ray job's own start and end give its running time and resource-seconds."""
    timeline = feed(
        Timeline(submitted_at=T0),
        [
            (
                200,
                late(
                    Phase.SUCCEEDED, reserved_offset=30, started_offset=35, finished_offset=95, admitted=True
                ),
            )
        ],
    )
    assert timeline.queued_seconds == 30
    assert timeline.admitted_seconds == 65
    assert timeline.running_seconds == 60
    assert timeline.resource_seconds["nvidia.com/gpu"] == 120.0
    assert timeline.finished_at == T0 + 95
    assert timeline.final_phase == "SUCCEEDED"


def test_a_waiter_that_starts_mid_run_counts_the_running_since_the_ray_job_started():
    timeline = feed(
        Timeline(submitted_at=T0),
        [
            (50, late(Phase.RUNNING, reserved_offset=30, started_offset=40, admitted=True)),
            (
                110,
                late(
                    Phase.SUCCEEDED, reserved_offset=30, started_offset=40, finished_offset=110, admitted=True
                ),
            ),
        ],
    )
    assert (timeline.queued_seconds, timeline.admitted_seconds, timeline.running_seconds) == (30, 80, 70)
    assert timeline.finished_at == T0 + 110


def phases(timeline):
    """(seconds after T0, phase) of every recorded transition."""
    return [(round(t["at"] - T0, 3), t["phase"]) for t in timeline.transitions]


def test_every_phase_change_is_a_transition_with_kueues_words():
    preempted_msg = "Preempted to accommodate a workload (UID: w2, JobUID: j2) due to prioritization"
    timeline = feed(
        Timeline(submitted_at=T0),
        [
            (0, obs(Phase.QUEUED, reason="Pending", message="insufficient unused quota")),
            (10, obs(Phase.ADMITTED, admitted=True)),
            (12, obs(Phase.RUNNING, admitted=True)),
            (12.5, obs(Phase.RUNNING, admitted=True)),
            (
                70,
                obs(Phase.PREEMPTED, reason="Preempted", message=preempted_msg, preemptions=1, admitted=True),
            ),
            (75, obs(Phase.QUEUED, reason="Pending", preemptions=1)),
            (100, obs(Phase.RUNNING, preemptions=1, admitted=True)),
            (125, obs(Phase.SUCCEEDED, preemptions=1, admitted=True)),
        ],
    )
    assert phases(timeline) == [
        (0, "QUEUED"),
        (10, "ADMITTED"),
        (12, "RUNNING"),
        (70, "PREEMPTED"),
        (75, "QUEUED"),
        (100, "RUNNING"),
        (125, "SUCCEEDED"),
    ]
    assert timeline.transitions[0]["message"] == "insufficient unused quota"
    assert timeline.transitions[3]["message"] == preempted_msg
    # JSON and back, as the XCom and the trigger's kwargs carry it.
    again = Timeline.from_dict(json.loads(json.dumps(timeline.to_dict())))
    assert phases(again) == phases(timeline)


def test_a_preemption_seen_only_as_requeued_is_still_a_preempted_transition():
    timeline = feed(
        Timeline(submitted_at=T0),
        [
            (0, obs(Phase.RUNNING, admitted=True)),
            (10, obs(Phase.QUEUED, reason="Pending", message="evicted", preemptions=1)),
        ],
    )
    assert [p for _, p in phases(timeline)][-2:] == ["PREEMPTED", "QUEUED"]


def test_a_late_first_observation_dates_the_earlier_phases_from_the_objects():
    timeline = feed(
        Timeline(submitted_at=T0),
        [(50, late(Phase.RUNNING, reserved_offset=30, started_offset=35, admitted=True))],
    )
    assert phases(timeline) == [(0, "QUEUED"), (30, "ADMITTED"), (35, "RUNNING")]

    finished = feed(
        Timeline(submitted_at=T0),
        [
            (
                200,
                late(
                    Phase.SUCCEEDED, reserved_offset=30, started_offset=35, finished_offset=95, admitted=True
                ),
            )
        ],
    )
    assert phases(finished) == [(0, "QUEUED"), (30, "ADMITTED"), (35, "RUNNING"), (95, "SUCCEEDED")]

    queued = feed(Timeline(submitted_at=T0), [(40, late(Phase.QUEUED))])
    assert phases(queued) == [(0, "QUEUED")]


def test_first_seen_while_preempted_records_the_admission_it_loses_then_the_preemption():
    """A waiter whose first look finds Kueue preempting the RayJob: it was admitted once, preempted once."""
    timeline = Timeline(submitted_at=T0)
    preempted = dataclasses.replace(
        obs(Phase.PREEMPTED, reason="Preempted", preemptions=1, admitted=True),
        quota_reserved_at="2026-12-02T10:00:20Z",
        admitted_at="2026-12-02T10:00:20Z",
    )
    timeline.record(preempted, T0 + 60)
    assert [a["at"] - T0 for a in timeline.admissions] == [20.0]
    assert [p["at"] - T0 for p in timeline.preemptions] == [60.0]
    assert timeline.queued_since == T0 + 60


def workload_of(priority_class: str, value: int) -> dict:
    return {"spec": {"priorityClassRef": {"name": priority_class}, "priority": value}}


def test_a_priority_change_is_a_transition_of_the_phase_it_happened_in_and_survives_the_xcom():
    from kueue_ray.ui.spans import build_spans

    timeline = feed(Timeline(), [(0, obs(Phase.SUBMITTED)), (2, obs(Phase.QUEUED, reason="Pending"))])
    assert not timeline.record_priority(workload_of("dev-priority", 100), None, T0 + 2)  # first seen
    assert not timeline.record_priority(workload_of("dev-priority", 100), None, T0 + 5)  # unchanged
    assert timeline.record_priority(workload_of("prod-priority", 1000), "ada", T0 + 10)
    feed(timeline, [(12, obs(Phase.ADMITTED, admitted=True))])

    restored = Timeline.from_dict(json.loads(json.dumps(timeline.to_dict())))
    spans = build_spans(restored.to_dict(), now=T0 + 20)
    assert [(s["kind"], s["reason"], s["duration_seconds"]) for s in spans][1:] == [
        ("queued", "Pending", 8.0),
        ("queued", "PriorityChanged", 2.0),
        ("admitted", "", 8.0),
    ]
    assert spans[2]["message"] == (
        "priority dev-priority (100) -> prod-priority (1000), changed from Airflow by ada"
    )
    # The restored timeline remembers the priority: seeing it again is no change.
    assert not restored.record_priority(workload_of("prod-priority", 1000), "ada", T0 + 30)
