"""The Kueue tab's timeline spans: from a timeline's transitions (or an older XCom without them)."""

from __future__ import annotations

from datetime import UTC, datetime

from kueue_ray.ui.spans import build_spans, preemptor_job_uid

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC).timestamp()
PREEMPTED = (
    "Preempted to accommodate a workload (UID: 5c1f-wl, JobUID: 9d2e-job) due to prioritization in the "
    "ClusterQueue; preemptor path: /cluster-queue; preemptee path: /cluster-queue"
)


def at(offset: float) -> str:
    return datetime.fromtimestamp(T0 + offset, UTC).isoformat()


def transition(offset, phase, reason="", message=""):
    return {"at": at(offset), "phase": phase, "reason": reason, "message": message}


def test_each_transition_is_a_span_until_the_next_and_a_requeue_is_named_so():
    timeline = {
        "transitions": [
            transition(0, "QUEUED", "Pending", "couldn't assign flavors to pod set head: insufficient quota"),
            transition(30, "ADMITTED", "QuotaReserved"),
            transition(35, "RUNNING"),
            transition(95, "PREEMPTED", "Preempted", PREEMPTED),
            transition(100, "QUEUED", "Pending"),
            transition(160, "ADMITTED"),
            transition(161, "RUNNING"),
            transition(221, "SUCCEEDED", "Succeeded", "Job finished successfully."),
        ]
    }
    spans = build_spans(timeline, now=T0 + 500)
    assert [(s["kind"], s["duration_seconds"]) for s in spans] == [
        ("queued", 30),
        ("admitted", 5),
        ("running", 60),
        ("preempted", 5),
        ("requeued", 60),
        ("admitted", 1),
        ("running", 60),
        ("finished", 0),
    ]
    assert spans[0]["message"].startswith("couldn't assign flavors")
    assert spans[3]["preemptor_job_uid"] == "9d2e-job"
    assert spans[3]["start"] == at(95)
    assert spans[-1]["phase"] == "SUCCEEDED" and not spans[-1]["ongoing"]


def test_the_current_span_lasts_until_now_and_is_ongoing():
    spans = build_spans({"transitions": [transition(0, "QUEUED"), transition(40, "RUNNING")]}, now=T0 + 100)
    assert spans[-1]["kind"] == "running"
    assert spans[-1]["duration_seconds"] == 60
    assert spans[-1]["ongoing"] and not spans[0]["ongoing"]


def test_an_older_xcom_without_transitions_still_gives_its_preemption_and_admissions():
    legacy = {
        "submitted_at": at(0),
        "admissions": [{"at": at(30)}, {"at": at(160)}],
        "preemptions": [{"at": at(95), "reason": "InClusterQueue", "message": PREEMPTED}],
        "finished_at": at(221),
        "final_phase": "SUCCEEDED",
    }
    spans = build_spans(legacy, now=T0 + 500)
    assert [s["kind"] for s in spans] == [
        "queued",
        "admitted",
        "preempted",
        "requeued",
        "admitted",
        "finished",
    ]
    assert spans[2]["preemptor_job_uid"] == "9d2e-job"


def test_phases_unknown_to_the_chart_keep_their_own_name():
    spans = build_spans(
        {"transitions": [transition(0, "QUOTA_RESERVED"), transition(5, "WAITING_X")]}, T0 + 9
    )
    assert [s["kind"] for s in spans] == ["quota_reserved", "waiting_x"]


def test_preemptor_uid_is_read_from_kueues_message_only_when_kueue_knew_it():
    assert preemptor_job_uid(PREEMPTED) == "9d2e-job"
    assert preemptor_job_uid("Preempted to accommodate a workload (UID: x, JobUID: UNKNOWN) due to") is None
    assert preemptor_job_uid("Exceeded the PodsReady timeout ray/wl") is None


def test_kueues_raw_binary_amounts_are_spelled_as_the_queues_page_spells_them():
    message = (
        "couldn't assign flavors to pod set workers: insufficient unused quota for memory in flavor default, "
        "7812500Ki more needed"
    )
    [span] = build_spans({"transitions": [transition(0, "QUEUED", "Pending", message)]}, now=T0 + 10)
    assert span["message"].endswith("memory in flavor default, 7.45Gi more needed"), span["message"]
    assert "Ki" not in span["message"]


def test_the_module_examples_hold():
    import doctest

    from kueue_ray.ui import spans

    assert doctest.testmod(spans).failed == 0
