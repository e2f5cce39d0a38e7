"""Marking a deferred waiting task failed (PATCH task instance) deletes its RayJob, and the next
queued RayJob in the single ClusterQueue is admitted.

Two shapes a user meets: the pipeline's RayJobSensor (`wait` of the text classifier) and a
SubmitRayJobOperator that waits itself (`e2e_rayjob.submit`, deferred with the RayJob's ownership).
Both runs start together, so the one whose RayJob holds the single GPU is found, not assumed (the two
runs' submits overlap).
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(300)


def phase(job: dict) -> str:
    return (job.get("status") or {}).get("jobDeploymentStatus") or ""


@pytest.mark.parametrize(
    ("dag_id", "task_id", "conf"),
    [
        # 20 epochs: the pipeline's RayJob runs 460 simulated seconds, long enough to be killed mid-run.
        ("text_classifier_finetune", "wait", {"epochs": 20}),
        ("e2e_rayjob", "submit", {"entrypoint": "sleep infinity"}),
    ],
    ids=["pipeline-sensor", "deferred-operator"],
)
def test_mark_failed_deletes_the_rayjob_and_frees_quota(e2e, dag_id, task_id, conf):
    e2e.unpause(dag_id)
    runs = [e2e.start_run(dag_id, conf), e2e.start_run(dag_id, conf)]

    def holder_and_queued() -> tuple[str, str] | None:
        """(run whose RayJob runs, run whose RayJob waits suspended), once both tasks are deferred."""
        # Deferred is not enough: the kill reaches only a trigger the triggerer already runs.
        if any(not e2e.ti(dag_id, run, task_id).get("triggerer_job") for run in runs):
            return None
        jobs = {run: e2e.rayjobs_of(dag_id, run, "submit") for run in runs}
        running = [run for run, found in jobs.items() if found and phase(found[0]) == "Running"]
        queued = [run for run, found in jobs.items() if found and found[0]["spec"].get("suspend") is True]
        return (running[0], queued[0]) if len(running) == 1 and len(queued) == 1 else None

    holder, queued = wait_until(
        holder_and_queued, timeout=90, what="both tasks deferred, one RayJob running, one queued"
    )

    e2e.mark_failed(dag_id, holder, task_id)

    wait_until(
        lambda: not e2e.rayjobs_of(dag_id, holder, "submit"),
        timeout=30,
        what=lambda: (
            f"{holder}'s RayJob deleted; still {[phase(j) for j in e2e.rayjobs_of(dag_id, holder, 'submit')]}"
        ),
    )
    wait_until(
        lambda: [j for j in e2e.rayjobs_of(dag_id, queued, "submit") if not j["spec"].get("suspend")],
        timeout=30,
        what=f"{queued}'s RayJob admitted",
    )
    assert e2e.wait_run(dag_id, holder, timeout=60)["state"] == "failed"
    # Free the queue for the next test: the pipeline's RayJob ends by itself, the endless one must not.
    if dag_id == "e2e_rayjob":
        e2e.mark_failed(dag_id, queued, task_id)
        wait_until(lambda: not e2e.rayjobs_of(dag_id, queued, "submit"), timeout=30, what="cleanup")
    else:
        assert e2e.wait_run(dag_id, queued, timeout=180)["state"] == "success"
