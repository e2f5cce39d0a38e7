"""SubmitRayJobOperator against kubesim: preflight, submission, adoption, waiting, failure messages."""

from __future__ import annotations

import re
import time

import pytest
from airflow.sdk.exceptions import AirflowFailException
from kueue_ray.operators import SubmitRayJobOperator


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


def test_a_request_the_single_queue_can_never_admit_is_refused_fast_with_the_team_queues_fix(
    queues, rayjob_body, task_context
):
    """Eight GPUs in the single-queue setup's user-queue (one GPU): refused at preflight in seconds, naming
    the queues that would hold it, with nothing created."""
    started = time.monotonic()
    with pytest.raises(AirflowFailException) as error:
        operator(queues, rayjob_body(gpu="8")).execute(task_context("train"))
    assert time.monotonic() - started < 15
    message = str(error.value)
    assert f"RayJob needs 8 nvidia.com/gpu (head 8) but ClusterQueue {queues.cluster_queue}" in message
    assert "Fix: use team-a/team-b (the team-queues setup" in message
    assert queues.rayjobs() == []


def test_a_refused_request_names_the_local_queues_of_its_namespace_that_can_admit_it(
    queues, rayjob_body, task_context
):
    big = f"{queues.namespace}-big-cq"
    queues.custom.create_cluster_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": big},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"{queues.namespace}-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "8"},
                                    {"name": "memory", "nominalQuota": "32G"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    queues.created.append(("clusterqueues", big))
    queues.custom.create_namespaced_custom_object(
        "kueue.x-k8s.io",
        "v1beta2",
        queues.namespace,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "gpu-queue"},
            "spec": {"clusterQueue": big},
        },
    )
    with pytest.raises(AirflowFailException) as error:
        operator(queues, rayjob_body(gpu="8")).execute(task_context("train"))
    assert "Fix: use LocalQueue gpu-queue, whose ClusterQueue can admit it; or raise nominalQuota" in str(
        error.value
    )
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


def test_a_retry_after_a_failed_try_submits_anew_and_leaves_the_failed_rayjob_readable(
    queues, rayjob_body, task_context
):
    from airflow.sdk.exceptions import AirflowException

    failing = rayjob_body(duration="1", outcome="AppFailed")
    with pytest.raises(AirflowException, match="did not succeed"):
        operator(queues, failing).execute(task_context("train"))
    [failed] = queues.rayjobs()
    result = operator(queues, rayjob_body(duration="1")).execute(task_context("train", try_number=2))
    assert result["name"] != failed["metadata"]["name"]
    by_uid = {r["metadata"]["uid"]: r for r in queues.rayjobs()}
    assert set(by_uid) == {failed["metadata"]["uid"], result["uid"]}
    assert by_uid[failed["metadata"]["uid"]]["status"]["jobStatus"] == "FAILED", (
        "the failed try stays readable"
    )


def test_clearing_a_succeeded_task_runs_the_work_again(queues, rayjob_body, task_context, capfd):
    first_try = task_context("train")
    first = operator(queues, rayjob_body(duration="1")).execute(first_try)
    capfd.readouterr()
    cleared = task_context("train", try_number=2)
    second = operator(queues, rayjob_body(duration="1")).execute(cleared)
    assert second["uid"] != first["uid"]
    by_uid = {r["metadata"]["uid"]: r for r in queues.rayjobs()}
    assert by_uid[second["uid"]]["status"]["jobStatus"] == "SUCCEEDED", "the second RayJob ran to completion"
    assert by_uid[first["uid"]]["status"]["jobStatus"] == "SUCCEEDED", "the first one is untouched"
    assert by_uid[first["uid"]]["metadata"]["annotations"]["airflow.apache.org/try-number"] == "1"
    out = capfd.readouterr().out
    assert (
        f"RayJob {queues.namespace}/{first['name']} of try 1 already ended SUCCEEDED; this try 2 submits a new"
        in out
    )
    assert cleared["ti"].xcom["timeline"]["final_phase"] == "SUCCEEDED"


def test_reuse_succeeded_takes_an_earlier_success_and_warns(queues, rayjob_body, task_context, capfd):
    first = operator(queues, rayjob_body(duration="1")).execute(task_context("train"))
    capfd.readouterr()
    again = operator(queues, rayjob_body(duration="1"), reuse_succeeded=True).execute(
        task_context("train", try_number=2)
    )
    assert again == first
    assert len(queues.rayjobs()) == 1
    out = capfd.readouterr().out
    assert re.search(r"\[warning\s*\] reuse_succeeded=True: RayJob .* of try 1 succeeded", out), out


def test_a_later_try_adopts_an_unfinished_rayjob_made_before_rayjobs_carried_their_deployment(
    queues, rayjob_body, task_context
):
    from kueue_ray.naming import DEPLOYMENT_LABEL, AirflowIdentity

    # What a try of the previous release created: the task instance's legacy name, no deployment.
    legacy = AirflowIdentity("ml_pipeline", "train", "manual__1", -1, 1)
    body = rayjob_body(duration="inf")
    body["metadata"] = {
        "name": legacy.legacy_rayjob_name(),
        "labels": {**legacy.labels(), "kueue.x-k8s.io/queue-name": queues.local_queue},
        "annotations": legacy.annotations(),
    }
    body["spec"].update(suspend=True, shutdownAfterJobFinishes=True)
    created = queues.custom.create_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayjobs", body)
    adopted = operator(queues, rayjob_body(duration="inf"), wait_for_completion=False).execute(
        task_context("train", try_number=2)
    )
    assert adopted["uid"] == created["metadata"]["uid"]
    [rayjob] = queues.rayjobs()
    assert rayjob["metadata"]["labels"][DEPLOYMENT_LABEL] == "tests", "from now on it is this deployment's"
    assert rayjob["metadata"]["annotations"]["airflow.apache.org/try-number"] == "2"


def test_two_deployments_running_the_same_task_and_run_id_each_get_their_own_rayjob(
    queues, rayjob_body, task_context, monkeypatch
):
    import kueue_ray.deployment

    ours = operator(queues, rayjob_body(duration="inf"), wait_for_completion=False).execute(
        task_context("train")
    )
    monkeypatch.setenv("AIRFLOW__KUEUE_RAY__DEPLOYMENT", "staging")
    kueue_ray.deployment.current.cache_clear()
    try:
        theirs = operator(queues, rayjob_body(duration="inf"), wait_for_completion=False).execute(
            task_context("train")
        )
    finally:
        kueue_ray.deployment.current.cache_clear()
    assert theirs["name"] != ours["name"] and theirs["uid"] != ours["uid"]
    owners = {
        r["metadata"]["uid"]: r["metadata"]["labels"]["kueue-ray.airflow.apache.org/deployment"]
        for r in queues.rayjobs()
    }
    assert owners == {ours["uid"]: "tests", theirs["uid"]: "staging"}


def test_a_rayjob_name_owned_by_another_task_is_never_adopted(queues, rayjob_body, task_context):
    from airflow.sdk.exceptions import AirflowException
    from kueue_ray.naming import AirflowIdentity

    squatter = rayjob_body(duration="inf")
    mine = AirflowIdentity("ml_pipeline", "train", "manual__1", -1, 1, "tests")
    squatter["metadata"] = {"name": mine.rayjob_name(), "annotations": {"airflow.apache.org/dag-id": "other"}}
    queues.custom.create_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayjobs", squatter)
    with pytest.raises(AirflowException, match="already exists and belongs to"):
        operator(queues, rayjob_body(duration="inf"), wait_for_completion=False).execute(
            task_context("train")
        )


def test_the_driver_log_tail_ends_up_in_the_task_log(queues, rayjob_body, task_context, capfd):
    body = rayjob_body(cpu="1", memory="4G", submission_mode="K8sJobMode")
    operator(queues, body, log_tail_lines=200).execute(task_context("train"))
    out = capfd.readouterr().out
    tail = out[out.index("Last 200 lines of the Ray driver (submitter) log:") :]
    assert "submitted successfully" in tail
    # The repr of bytes would start a token with b' or b" (a job name may end in "b", so match tokens).
    assert not re.search(r"(?<![\w-])b['\"]", tail), "log lines, not the repr of bytes"


def test_waiting_in_the_worker_reports_the_queue_position_and_times_out(
    queues, rayjob_body, task_context, capfd
):
    from airflow.sdk.exceptions import AirflowException

    operator(queues, rayjob_body(duration="inf"), wait_for_completion=False, task_id="blocker").execute(
        task_context("blocker")
    )
    # The queue timeout counts from the submission: long enough for real Kueue's manager, on a loaded
    # machine, to have made the Workload whose position the wait reports.
    with pytest.raises(AirflowException, match="not admitted within queue_timeout=5s"):
        operator(queues, rayjob_body(), queue_timeout=5).execute(task_context("train"))
    out = capfd.readouterr().out
    assert "position 1 in the ClusterQueue (1 of 1 pending in its LocalQueue)" in out
    active = [r["metadata"]["name"] for r in queues.rayjobs() if not r["metadata"].get("deletionTimestamp")]
    assert len(active) == 1 and "blocker" in active[0], "the timed-out RayJob is withdrawn from the queue"
