"""SubmitRayJobOperator against kubesim: preflight, submission, adoption, waiting, failure messages."""

from __future__ import annotations

import re

import pytest
from airflow.sdk.exceptions import AirflowFailException
from kueue_ray.operators import SubmitRayJobOperator

from tests.integration.real_backend import QUEUE_POSITION, RAY_JOB_RUNS


def operator(queues, body, **kwargs):
    defaults = dict(
        task_id="train",
        template=body,
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        deferrable=False,
        poll_interval=0.1,
        log_tail_lines=0,
    )
    defaults.update(kwargs)
    return SubmitRayJobOperator(**defaults)


@RAY_JOB_RUNS
def test_submit_and_wait_in_worker_until_succeeded(queues, rayjob_body, task_context):
    context = task_context("train")
    result = operator(queues, rayjob_body()).execute(context)
    assert result["namespace"] == queues.namespace
    [rayjob] = queues.rayjobs()
    assert result == {
        "name": rayjob["metadata"]["name"],
        "namespace": queues.namespace,
        "uid": rayjob["metadata"]["uid"],
    }
    timeline = context["ti"].xcom["timeline"]
    assert timeline["final_phase"] == "SUCCEEDED"
    assert [a["cluster_queue"] for a in timeline["admissions"]] == [queues.cluster_queue]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"local_queue": "no-such-queue"},
            "local_queue: LocalQueue 'no-such-queue' does not exist in namespace",
        ),
        (
            {"priority": "no-such-priority"},
            "priority: WorkloadPriorityClass 'no-such-priority' does not exist",
        ),
    ],
)
def test_preflight_rejects_missing_queue_or_priority_and_creates_nothing(
    queues, rayjob_body, task_context, change, expected
):
    with pytest.raises(AirflowFailException, match=expected) as error:
        operator(queues, rayjob_body(), **change).execute(task_context("train"))
    assert "Fix: use one of" in str(error.value)
    assert queues.rayjobs() == []


def test_preflight_rejects_a_request_that_can_never_fit(queues, rayjob_body, task_context):
    # K8sJobMode adds Kueue's submitter pod set (500m CPU) to a head that already fills the queue.
    body = rayjob_body(submission_mode="K8sJobMode")
    with pytest.raises(AirflowFailException) as error:
        operator(queues, body).execute(task_context("train"))
    message = str(error.value)
    assert (
        f"RayJob needs 2.5 CPU (head 2 + submitter 0.5) but ClusterQueue {queues.cluster_queue} provides at most 2"
        in message
    )
    assert "use submissionMode HTTPMode" in message
    assert queues.rayjobs() == []


def test_a_retry_adopts_the_running_rayjob_instead_of_submitting_a_duplicate(
    queues, rayjob_body, task_context
):
    first = operator(queues, rayjob_body(duration="inf"), wait_for_completion=False).execute(
        task_context("train")
    )
    second = operator(queues, rayjob_body(duration="inf"), wait_for_completion=False).execute(
        task_context("train", try_number=2)
    )
    assert second == first
    [rayjob] = queues.rayjobs()
    assert rayjob["metadata"]["annotations"]["airflow.apache.org/try-number"] == "2"


@RAY_JOB_RUNS
def test_a_retry_replaces_a_rayjob_that_failed_in_an_earlier_try(queues, rayjob_body, task_context):
    from airflow.sdk.exceptions import AirflowException

    failing = rayjob_body(duration="1", outcome="AppFailed")
    with pytest.raises(AirflowException, match="did not succeed"):
        operator(queues, failing).execute(task_context("train"))
    [failed] = queues.rayjobs()
    result = operator(queues, rayjob_body(duration="1")).execute(task_context("train", try_number=2))
    assert result["name"] == failed["metadata"]["name"]
    assert result["uid"] != failed["metadata"]["uid"]
    assert [r["metadata"]["uid"] for r in queues.rayjobs()] == [result["uid"]]


def test_a_rayjob_name_owned_by_another_task_is_never_adopted(queues, rayjob_body, task_context):
    from airflow.sdk.exceptions import AirflowException

    op = operator(queues, rayjob_body(duration="inf"), wait_for_completion=False)
    reference = op.execute(task_context("train"))
    queues.custom.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        queues.namespace,
        "rayjobs",
        reference["name"],
        {"metadata": {"annotations": {"airflow.apache.org/dag-id": "someone-else"}}},
    )
    with pytest.raises(AirflowException, match="already exists and belongs to"):
        op.execute(task_context("train", try_number=2))


@RAY_JOB_RUNS
def test_the_driver_log_tail_ends_up_in_the_task_log(queues, rayjob_body, task_context, capfd):
    body = rayjob_body(cpu="1", memory="4G", submission_mode="K8sJobMode")
    operator(queues, body, log_tail_lines=200).execute(task_context("train"))
    out = capfd.readouterr().out
    tail = out[out.index("Last 200 lines of the Ray driver (submitter) log:") :]
    assert "submitted successfully" in tail
    # The repr of bytes would start a token with b' or b" (a job name may end in "b", so match tokens).
    assert not re.search(r"(?<![\w-])b['\"]", tail), "log lines, not the repr of bytes"


@QUEUE_POSITION
def test_waiting_in_the_worker_reports_the_queue_position_and_times_out(
    queues, rayjob_body, task_context, capfd
):
    from airflow.sdk.exceptions import AirflowException

    operator(queues, rayjob_body(duration="inf"), wait_for_completion=False, task_id="blocker").execute(
        task_context("blocker")
    )
    with pytest.raises(AirflowException, match="not admitted within queue_timeout=1s"):
        operator(queues, rayjob_body(), queue_timeout=1).execute(task_context("train"))
    out = capfd.readouterr().out
    assert "position 1 of 1 pending in its LocalQueue" in out
    active = [r["metadata"]["name"] for r in queues.rayjobs() if not r["metadata"].get("deletionTimestamp")]
    assert len(active) == 1 and "blocker" in active[0], "the timed-out RayJob is withdrawn from the queue"
