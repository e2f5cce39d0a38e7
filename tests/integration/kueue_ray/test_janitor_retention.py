"""The janitor's retention against kubesim: this integration's finished RayJobs are deleted once their
retention has passed and their task ended, their Workload, submitter Job and pods follow by garbage
collection; nothing else is touched (a RayJob finished too recently, one whose task or run may still
read it, one still running, one not created by Airflow)."""

from __future__ import annotations

import time

from kubernetes import client

from tests.integration.kueue_ray.conftest import wait_for
from tests.integration.kueue_ray.test_janitor import AirflowStates, janitor, phase_of, submit


class RunStates(AirflowStates):
    """``AirflowStates`` that also answers ``get_dagrun_state`` (the runs' states: ``run_states``)."""

    def __init__(self, runs, run_states):
        super().__init__(runs)
        self.run_states = run_states

    def get_dagrun_state(self, dag_id: str, run_id: str) -> str:
        return self.run_states[run_id]


def finished(queues, uid: str) -> bool:
    return phase_of(queues, uid) in ("Complete", "Failed")


def dependents(queues, api, rayjob: dict) -> dict[str, int]:
    """What the RayJob owns, directly or through its submitter Job: Workload, Job, the Job's pods."""
    name = rayjob["name"]
    batch = client.BatchV1Api(api)
    jobs = [j for j in batch.list_namespaced_job(queues.namespace).items if j.metadata.name == name]
    pods = queues.core.list_namespaced_pod(
        queues.namespace, label_selector=f"batch.kubernetes.io/job-name={name}"
    )
    return {
        "workload": int(queues.workload(rayjob["uid"]) is not None),
        "job": len(jobs),
        "pods": len(pods.items),
    }


def test_finished_rayjobs_are_deleted_after_retention_with_what_they_own_and_nothing_else(
    api, queues, rayjob_body, task_context
):
    body = rayjob_body(cpu="1", memory="4G", duration="1", submission_mode="K8sJobMode")
    expired = submit(queues, body, task_context("submit", run_id="done"), "submit")
    run_going = submit(queues, body, task_context("submit", run_id="going"), "submit")
    retrying = submit(queues, body, task_context("submit", run_id="retrying"), "submit")
    wait_for(lambda: all(finished(queues, j["uid"]) for j in (expired, run_going, retrying)), timeout=120)
    assert dependents(queues, api, expired) == {"workload": 1, "job": 1, "pods": 1}
    running = submit(queues, rayjob_body(duration="inf"), task_context("submit", run_id="live"), "submit")
    by_hand = rayjob_body(duration="1")
    by_hand["metadata"].update(name="by-hand", labels={"kueue.x-k8s.io/queue-name": queues.local_queue})
    by_hand["spec"]["shutdownAfterJobFinishes"] = True
    queues.custom.create_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayjobs", by_hand)
    states = RunStates(
        {
            "done": {"submit": "success"},
            "going": {"submit": "success", "wait": None},
            "retrying": {"submit": "up_for_retry"},
            "live": {"submit": "success"},
        },
        {"done": "success", "going": "running", "retrying": "failed", "live": "success"},
    )

    # Finished seconds ago, retention one hour: nothing is due, and Airflow is asked only about the
    # active RayJob (the orphan rule's question).
    assert janitor(queues, states, retention_days=1 / 24) == []
    assert states.asked == ["live"]

    time.sleep(2)  # endTime and the server's Date have whole seconds
    dry = janitor(queues, states, retention_days=1 / 86400, dry_run=True)
    assert [(f["name"], f["result"]) for f in dry] == [(expired["name"], "not deleted (dry run)")]
    assert phase_of(queues, expired["uid"]) == "Complete"

    found = janitor(queues, states, retention_days=1 / 86400)

    assert [(f["name"], f["result"]) for f in found] == [(expired["name"], "deleted")]
    assert found[0]["reason"].startswith("finished (Complete)")
    assert found[0]["reason"].endswith("retention of 1 s, and its task submit ended success")
    wait_for(lambda: phase_of(queues, expired["uid"]) == "gone")
    wait_for(lambda: dependents(queues, api, expired) == {"workload": 0, "job": 0, "pods": 0})
    left = {r["metadata"]["name"] for r in queues.rayjobs()}
    assert left == {run_going["name"], retrying["name"], running["name"], "by-hand"}
    assert dependents(queues, api, run_going)["workload"] == 1
