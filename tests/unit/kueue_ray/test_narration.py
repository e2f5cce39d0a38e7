"""The task log's story: each thing said once, queue positions kept current without flooding the log,
preemptors named by RayJob, DAG and run, memory in units people read."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kueue_ray import narration
from kueue_ray.naming import AirflowIdentity
from kueue_ray.narration import (
    POSITION_RELOG_SECONDS,
    Story,
    describe_rayjob,
    name_preemptor,
    preemptor_job_uid,
    readable_quantities,
)
from kueue_ray.quantity import describe_resources, readable_bytes
from kueue_ray.status import Observation, Phase
from kueue_ray.waiting import describe_transition

EVICTION = (
    "Preempted to accommodate a workload (UID: 5ee5430b, JobUID: 3e727a18) due to prioritization in the "
    "ClusterQueue; preemptor path: /cluster-queue; preemptee path: /cluster-queue"
)
NO_FIT = (
    "couldn't assign flavors to pod set head: insufficient unused quota for memory in flavor default, "
    "7812500Ki more needed"
)
PREEMPTOR = {
    "metadata": {
        "name": "text-classifier-finetune-submit-1a2b3c4d5e",
        "namespace": "ray",
        "uid": "3e727a18",
        "annotations": AirflowIdentity(
            dag_id="text_classifier_finetune", task_id="submit", run_id="manual__2026-12-03T10:00:00"
        ).annotations(),
    }
}


def obs(phase: Phase, reason: str = "", message: str = "", preemptions: int = 0) -> Observation:
    return Observation(phase=phase, terminal=False, reason=reason, message=message, preemptions=preemptions)


@pytest.mark.parametrize(
    ("amount", "spelled"),
    [
        (8_000_000_000, "7.45Gi"),  # Kueue's "7812500Ki" for an 8G request
        (200 * 2**20, "200Mi"),
        (8 * 2**30, "8Gi"),
        (1536 * 2**20, "1.5Gi"),
        (384 * 2**30 + 2**29, "384.5Gi"),
        (8_209_715_200, "7.65Gi"),
        (512 * 2**10, "512Ki"),
    ],
)
def test_memory_is_spelled_in_the_largest_binary_unit(amount, spelled):
    assert readable_bytes(Decimal(amount)) == spelled


def test_a_request_reads_in_words_with_memory_in_binary_units():
    """The preflight line's request: Kueue's and the manifest's units turned into one spelling."""
    assert (
        describe_resources({"nvidia.com/gpu": "1", "memory": "8017300Ki", "cpu": "2500m"})
        == "2.5 CPU, 7.65Gi memory, 1 nvidia.com/gpu"
    )
    assert describe_resources({"cpu": "96", "memory": "768Gi"}) == "96 CPU, 768Gi memory"


def test_kueue_messages_get_readable_memory_and_keep_everything_else():
    assert readable_quantities(NO_FIT) == NO_FIT.replace("7812500Ki", "7.45Gi")
    assert readable_quantities("2 more needed, 2500m cpu, 8G memory") == "2 more needed, 2500m cpu, 8G memory"


def test_the_preemptor_is_named_by_rayjob_dag_run_and_task_next_to_kueues_uids():
    assert preemptor_job_uid(EVICTION) == "3e727a18"
    assert name_preemptor(EVICTION, PREEMPTOR) == (
        "Preempted to accommodate RayJob ray/text-classifier-finetune-submit-1a2b3c4d5e (DAG "
        "text_classifier_finetune, run manual__2026-12-03T10:00:00, task submit) (Workload UID: 5ee5430b, "
        "JobUID: 3e727a18) due to prioritization in the ClusterQueue; preemptor path: /cluster-queue; "
        "preemptee path: /cluster-queue"
    )
    # Unknown preemptor (another namespace, not ours): Kueue's words as they are.
    assert name_preemptor(EVICTION, None) == EVICTION
    assert preemptor_job_uid(EVICTION.replace("JobUID: 3e727a18", "JobUID: UNKNOWN")) is None
    assert preemptor_job_uid(NO_FIT) is None


def test_a_rayjob_not_made_by_airflow_is_named_without_dag_and_run():
    assert describe_rayjob({"metadata": {"name": "adhoc", "namespace": "ray"}}) == "RayJob ray/adhoc"


def test_the_transition_line_names_the_preemptor_and_rounds_memory():
    line = describe_transition(
        "ray", "dev-job", obs(Phase.PREEMPTED, "Preempted", EVICTION, 1), None, PREEMPTOR
    )
    assert "Preempted to accommodate RayJob ray/text-classifier-finetune-submit-1a2b3c4d5e (DAG " in line
    assert line.endswith("[preempted 1x so far]")
    queued = describe_transition("ray", "dev-job", obs(Phase.QUEUED, "Pending", NO_FIT), "position 1 of 1")
    assert "7.45Gi more needed" in queued and "Ki" not in queued


def test_the_queued_line_that_only_repeats_the_eviction_message_is_dropped():
    story = Story()
    told = [
        story.news(o)
        for o in (
            obs(Phase.RUNNING, "Running"),
            obs(Phase.PREEMPTED, "Preempted", EVICTION, 1),
            obs(Phase.QUEUED, "Pending", EVICTION, 1),  # Kueue keeps the eviction message for a moment
            obs(Phase.QUEUED, "Pending", EVICTION, 1),
            obs(Phase.QUEUED, "Pending", NO_FIT, 1),
            obs(Phase.QUEUED, "Pending", NO_FIT, 1),
            obs(Phase.ADMITTED, "QuotaReserved", "Quota reserved in ClusterQueue cluster-queue", 1),
        )
    ]
    assert told == [True, True, False, False, True, False, True]


def test_a_first_queued_line_with_the_eviction_message_is_kept():
    """A waiter that starts after the preemption has not told it yet."""
    assert Story().news(obs(Phase.QUEUED, "Pending", EVICTION, 1)) is True


def test_the_position_is_checked_every_interval_while_queued_and_logged_only_when_it_moved():
    story = Story()
    queued = obs(Phase.QUEUED, "Pending", NO_FIT)
    assert story.news(queued)
    story.told_position("position 3 of 3 pending in its LocalQueue", now=100.0)
    assert story.position_check_in(queued, now=110.0) == POSITION_RELOG_SECONDS - 10
    assert story.position_check_in(obs(Phase.RUNNING), now=110.0) is None
    now = 100.0 + POSITION_RELOG_SECONDS
    assert story.position_check_in(queued, now=now) == 0
    assert (
        story.position_line("ray", "job", Phase.QUEUED, "position 3 of 3 pending in its LocalQueue", now)
        is None
    )
    assert story.position_check_in(queued, now=now) == POSITION_RELOG_SECONDS, (
        "unchanged: wait a whole interval"
    )
    now += POSITION_RELOG_SECONDS
    assert story.position_line(
        "ray", "job", Phase.QUEUED, "position 1 of 2 pending in its LocalQueue", now
    ) == ("RayJob ray/job: still QUEUED — position 1 of 2 pending in its LocalQueue")
    assert story.position_check_in(queued, now=now + 1) == POSITION_RELOG_SECONDS - 1


def test_the_interval_is_documented_in_seconds():
    assert narration.POSITION_RELOG_SECONDS == 30.0
    assert "POSITION_RELOG_SECONDS" in narration.__doc__


def test_a_position_is_read_again_only_after_the_queue_changed():
    story = Story()
    story.told_position("position 3 of 3 pending in its LocalQueue", now=0.0, version=7)
    assert story.position_current(7, now=40.0)  # nothing changed: no read, next check in another interval
    assert story.position_check_in(obs(Phase.QUEUED, "Pending", NO_FIT), now=40.0) == POSITION_RELOG_SECONDS
    assert not story.position_current(8, now=80.0)  # a Workload changed: read it
    assert not story.position_current(None, now=80.0)  # no version known: read it


def test_a_spread_delays_only_the_first_position_check_after_a_transition_line():
    """Tasks queued together tell their transition together; each one's spread staggers their position
    checks once, after which every task checks (and logs a moved position) once per interval again."""
    story = Story(spread=12.5)
    queued = obs(Phase.QUEUED, "Pending", NO_FIT)
    assert story.news(queued)
    story.told_position("position 3 of 3 pending in its LocalQueue", now=100.0)
    assert story.position_check_in(queued, now=100.0) == POSITION_RELOG_SECONDS + 12.5
    now = 100.0 + POSITION_RELOG_SECONDS + 12.5
    line = story.position_line("ray", "job", Phase.QUEUED, "position 2 of 3 pending in its LocalQueue", now)
    assert line == "RayJob ray/job: still QUEUED — position 2 of 3 pending in its LocalQueue"
    assert story.position_check_in(queued, now=now) == POSITION_RELOG_SECONDS
    assert story.position_current(None, now=now + 30) is False
    story.told_position("position 1 of 1 pending in its LocalQueue", now=200.0)  # a new transition line
    assert story.position_check_in(queued, now=200.0) == POSITION_RELOG_SECONDS + 12.5
    assert story.position_current(4, now=200.0) is False
    story.told_position("position 1 of 1 pending in its LocalQueue", now=200.0, version=4)
    assert story.position_current(4, now=250.0)
    assert story.position_check_in(queued, now=250.0) == POSITION_RELOG_SECONDS


def test_queued_triggers_check_their_positions_spread_within_one_shared_reads_freshness():
    """Each trigger draws its own spread, so 1,000 triggers that started together do not all log their
    positions in the same instant of the event loop, yet within one shared visibility read's freshness."""
    from kueue_ray.hub import HUB
    from kueue_ray.trigger import RayJobTrigger

    freshness = HUB.settings.pending_workloads_ttl_seconds
    spreads = [
        RayJobTrigger(name=f"j{i}", namespace="ray", uid=f"u{i}").start().story.spread for i in range(1000)
    ]
    assert all(0.0 <= s < freshness for s in spreads)
    tenths = [sum(1 for s in spreads if int(s / freshness * 50) == tenth) for tenth in range(50)]
    assert max(tenths) < 100, "about 1,000 / 50 in each fiftieth of the window, not all at once"


def test_why_still_queued_is_told_again_only_when_its_verdict_changes_or_after_a_transition():
    story = Story()
    told = story.why_lines("ray", "job", ["Can be admitted by waiting: x.", "It needs 1 GPU."])
    assert told == [
        "RayJob ray/job: why still queued: Can be admitted by waiting: x.",
        "RayJob ray/job: why still queued: It needs 1 GPU.",
    ]
    assert story.why_lines("ray", "job", ["Can be admitted by waiting: x.", "It needs 2 GPU."]) == []
    assert len(story.why_lines("ray", "job", ["Can be admitted by waiting: x."], force=True)) == 1
    assert story.why_lines("ray", "job", ["Will not be admitted by waiting: y."])[0].endswith("waiting: y.")
    assert story.why_lines("ray", "job", []) == []


def test_why_still_queued_is_not_told_again_for_each_holder_that_comes_or_goes():
    """Thousands of queued tasks each wrote their whole explanation again at every admission and completion
    in their queue, as the verdict's holder count moved: a million lines per triggerer in a large backfill.
    The count and the names move; the explanation is told again when what it waits for changes."""
    story = Story()
    ending = "Can be admitted by waiting: for {} workload(s) holding its quota that end by themselves."
    assert len(story.why_lines("ray", "job", [ending.format(443), "It needs 1 GPU."])) == 2
    assert story.why_lines("ray", "job", [ending.format(442), "It needs 1 GPU."]) == []
    assert story.why_lines("ray", "job", [ending.format(12)[:-1] + " or preempting a.", "x"]) != []
    assert story.why_lines("ray", "job", [ending.format(11)[:-1] + " or preempting b, c.", "x"]) == []
    assert story.why_lines("ray", "job", ["Can be admitted by waiting: for preempting b.", "x"]) != []
    stuck = "Will not be admitted by waiting: it needs 8 GPU, and at most {} can ever be free."
    assert story.why_lines("ray", "job", [stuck.format(7)]) != []
    assert story.why_lines("ray", "job", [stuck.format(6)]) != [], "a stuck verdict's figures are its news"


def test_a_workload_priority_change_is_told_once_with_who_changed_it():
    story = Story()

    def workload(klass, value):
        return {"spec": {"priority": value, "priorityClassRef": {"name": klass}}}

    assert story.priority_line("ray", "job", workload("dev-priority", 100)) is None
    assert story.priority_line("ray", "job", workload("dev-priority", 100)) is None
    line = story.priority_line(
        "ray", "job", workload("prod-priority", 1000), "admin: dev-priority -> prod-priority"
    )
    assert line == (
        "RayJob ray/job: priority changed to prod-priority (1000), from dev-priority (100) (changed from Airflow "
        "by admin: dev-priority -> prod-priority); Kueue orders its queue and preempts by the new priority"
    )
    assert story.priority_line("ray", "job", workload("prod-priority", 1000)) is None
    assert story.priority_line("ray", "job", None) is None
