"""A triggerer that stalls and recovers does not delete the RayJobs another triggerer took over.

Airflow 3.3's triggerer cancels, with the "user action" message that makes it call ``on_kill``, every
trigger the database no longer assigns to it. A triggerer stopped past ``triggerer_health_check_threshold``
(6 s in this session: a GC pause, a slow node) loses its triggers to the other triggerer, and when it
resumes it "kills" them. The trigger reads its task instance's state first: still deferred, so the RayJob
stays, and the task the other triggerer now waits for succeeds.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time

import psutil
import pytest

from tests.e2e.harness import rayjob_creations, wait_until
from tests.e2e.test_12_two_triggerers import (
    alive_triggerer_jobs,
    kill,
    process_tree,
    start_second_triggerer,
)

pytestmark = pytest.mark.timeout(420)

DAG = "e2e_rayjob"
STALL_SECONDS = 12.0
"""Longer than the session's health-check threshold (6 s) plus a loop of the other triggerer."""


def holder(e2e, run_id: str) -> int | None:
    ti = e2e.ti(DAG, run_id, "submit")
    return (ti.get("triggerer_job") or {}).get("id") if ti["state"] == "deferred" else None


def signal_tree(tree: list[psutil.Process], signum: int) -> None:
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signum)


def test_a_stalled_triggerer_that_recovers_leaves_the_taken_over_rayjob_alone(e2e):
    e2e.collect_requests()
    first_job, second_job, second, trees = start_second_triggerer(e2e)
    stalled: list[psutil.Process] = []
    try:
        # 25 epochs of 20 simulated seconds: 50 s here, longer than the stall and the hand-over.
        run_id = e2e.start_run(DAG, {"values": {"num_epochs": 25}})
        victim = wait_until(lambda: holder(e2e, run_id), timeout=120, what="submit deferred to a triggerer")
        survivor = second_job if victim == first_job else first_job
        wait_until(
            lambda: any(
                (job.get("status") or {}).get("jobDeploymentStatus") == "Running"
                for job in e2e.rayjobs_of(DAG, run_id, "submit")
            ),
            timeout=120,
            what="the RayJob running",
        )

        stalled = trees[victim]()
        signal_tree(stalled, signal.SIGSTOP)
        stopped_at = time.monotonic()
        wait_until(
            lambda: holder(e2e, run_id) == survivor,
            timeout=60,
            what=lambda: f"the trigger taken over by {survivor}: held by {holder(e2e, run_id)}",
        )
        time.sleep(max(0.0, STALL_SECONDS - (time.monotonic() - stopped_at)))
        signal_tree(stalled, signal.SIGCONT)
        stalled = []

        run = e2e.wait_run(DAG, run_id, timeout=240)
        assert run["state"] == "success", e2e.task_log(DAG, run_id, "submit")[-3000:]
    finally:
        signal_tree(stalled, signal.SIGCONT)
        # Leave one triggerer, as the session had.
        if len(alive_triggerer_jobs(e2e)) > 1:
            with contextlib.suppress(psutil.NoSuchProcess, subprocess.TimeoutExpired):
                kill(process_tree([second.pid]))

    ti = e2e.ti(DAG, run_id, "submit")
    assert ti["try_number"] == 1, "resumed, not retried"
    (rayjob,) = e2e.rayjobs_of(DAG, run_id, "submit")
    assert not rayjob["metadata"].get("deletionTimestamp")
    assert rayjob["status"]["jobStatus"] == "SUCCEEDED"
    assert rayjob_creations(e2e.collect_requests()) == 1
    # What each triggerer wrote for this try (one file per triggerer: attempt=1.log.trigger.<job id>.log):
    # when the recovered triggerer ran on_kill for the trigger it lost (Airflow 3.3.2 does on its next
    # loop), it said why it deleted nothing. Under load its own copy may have seen the RayJob succeed and
    # fired first: Airflow still invokes on_kill, which a fired trigger ends at once, saying nothing. The
    # trigger may also move back from the survivor once the recovered triggerer heartbeats again; once in
    # CI the survivor's state read then went unanswered (Airflow's channel), which it says instead.
    folder = e2e.airflow.home / "logs" / f"dag_id={DAG}" / f"run_id={run_id}" / "task_id=submit"
    for path in sorted(folder.glob("attempt=1.log*")):
        written = path.read_text()
        before_kill, killed, _ = written.partition("invoking on_kill")
        if killed and "Trigger fired event" not in before_kill:
            said = ("its task instance is still deferred", "its task instance's state was not read within")
            assert any(why in written for why in said), f"{path.name}:\n{written[-3000:]}"
