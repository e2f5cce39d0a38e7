"""Two triggerers, as the Helm values run them: each holds its own shared watch, cheaply, and when the one
holding waits is killed mid-wait the other takes them over; every run succeeds with one RayJob, each
admission recorded when Kueue made it (a transition that happened while no triggerer watched is not lost).

The watches are counted at kubesim (`open_watches` in /kubesim/stats, by client address), matched to each
triggerer's process tree by its TCP connections: what the API server would see, not what the triggerer says.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections import Counter
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.e2e.harness import owner, rayjob_creations, wait_until

pytestmark = pytest.mark.timeout(420)

DAG = "e2e_rayjob"
RUNS = 4
"""Runs waiting at once on the single queue's one GPU: one running, the others queued behind it."""
MAX_WATCHES_PER_TRIGGERER = 4
EXPECTED_WATCHES = {("rayjobs.ray.io", "ray"), ("workloads.kueue.x-k8s.io", "ray")}
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"


def alive_triggerer_jobs(e2e) -> set[int]:
    response = e2e.airflow.api(
        "GET",
        "/jobs",
        params={"job_type": "TriggererJob", "is_alive": "true", "order_by": "-id", "limit": 50},
    )
    response.raise_for_status()
    return {job["id"] for job in response.json()["jobs"]}


def process_tree(pids) -> list[psutil.Process]:
    tree = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(pid)
            tree += [process, *process.children(recursive=True)]
    return tree


def watches_of(e2e, tree: list[psutil.Process]) -> list[tuple[str, str]]:
    """(resource, namespace) of each watch kubesim serves to a connection of this process tree."""
    kubesim_port = urlsplit(e2e.kubesim_url).port
    ports = set()
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            ports |= {
                c.laddr.port
                for c in process.net_connections(kind="tcp")
                if c.raddr and c.raddr.port == kubesim_port
            }
    stats = httpx.get(f"{e2e.kubesim_url}/kubesim/stats", timeout=30, verify=e2e.kubesim_verify).json()
    return [
        (watch["resource"], watch["namespace"])
        for watch in stats["open_watches"]
        for _ in range(watch["count"])
        if int(watch["peer"].rsplit(":", 1)[1]) in ports
    ]


def start_second_triggerer(e2e) -> tuple[int, int, subprocess.Popen, dict]:
    """Beside the session's one triggerer, a second: (first's job id, second's job id, the second's
    process, job id -> a callable giving that triggerer's process tree now)."""
    # The triggerer the session already runs, alone (a killed one's job stops counting as alive within
    # the e2e health threshold of 6 s).
    first_pids = [p.pid for p in e2e.airflow.component_processes("triggerer")]
    (first_job,) = wait_until(
        lambda: len(jobs := alive_triggerer_jobs(e2e)) == 1 and jobs,
        timeout=60,
        what="exactly one live triggerer before the second starts",
    )
    second = e2e.airflow.start_component("triggerer")
    (second_job,) = wait_until(
        lambda: len(jobs := alive_triggerer_jobs(e2e)) == 2 and jobs - {first_job},
        timeout=90,
        what="the second triggerer's job alive",
    )
    trees = {first_job: lambda: process_tree(first_pids), second_job: lambda: process_tree([second.pid])}
    return first_job, second_job, second, trees


def holders(e2e, run_ids: list[str]) -> dict[str, int | None]:
    """run id -> id of the triggerer job running its trigger (None once it is not deferred)."""
    held = {}
    for run_id in run_ids:
        ti = e2e.ti(DAG, run_id, "submit")
        held[run_id] = (ti.get("triggerer_job") or {}).get("id") if ti["state"] == "deferred" else None
    return held


def task_states(e2e, run_ids: list[str]) -> dict[str, tuple[str | None, int | None]]:
    """run id -> (the submit's state, the id of the triggerer job holding it): what a timeout reports."""
    states = {}
    for run_id in run_ids:
        ti = e2e.ti(DAG, run_id, "submit")
        states[run_id] = (ti["state"], (ti.get("triggerer_job") or {}).get("id"))
    return states


def kill(tree: list[psutil.Process]) -> None:
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(tree, timeout=30)


def quota_reserved_at(e2e, rayjob: dict) -> str:
    uid = rayjob["metadata"]["uid"]
    (workload,) = [
        w for w in e2e.workloads() if (w["metadata"].get("labels") or {}).get(JOB_UID_LABEL) == uid
    ]
    (condition,) = [c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved"]
    assert condition["status"] == "True"
    return condition["lastTransitionTime"]


def test_two_triggerers_hold_few_watches_and_hand_over_waits_without_loss(e2e):
    from kueue_ray.timeline import to_epoch

    e2e.collect_requests()
    first_job, second_job, second, trees = start_second_triggerer(e2e)

    try:
        run_ids = [e2e.start_run(DAG) for _ in range(RUNS)]
        # Each submit seen deferred and held by a triggerer, not necessarily all at once: under load the
        # first RayJob may end before the last submit defers (seen in CI). `held`: the waits held now.
        seen: dict[str, int] = {}

        def every_wait_seen_held() -> dict[str, int]:
            now = {run_id: job for run_id, job in holders(e2e, run_ids).items() if job}
            seen.update(now)
            return len(seen) == RUNS and now

        held = wait_until(
            every_wait_seen_held,
            timeout=180,
            what=lambda: f"every submit deferred to a triggerer (seen {seen}): {task_states(e2e, run_ids)}",
        )
        # Each triggerer holding waits has its two shared watches, however many waits it holds.
        holding = set(held.values())
        wait_until(
            lambda: all(set(watches_of(e2e, trees[job]())) == EXPECTED_WATCHES for job in holding),
            timeout=30,
            what=lambda: (
                f"the watches of {holding}: { {job: watches_of(e2e, trees[job]()) for job in trees} }"
            ),
        )
        for job, tree in trees.items():
            watches = watches_of(e2e, tree())
            assert len(watches) <= MAX_WATCHES_PER_TRIGGERER, (job, watches)
            assert not Counter(watches) - Counter(EXPECTED_WATCHES), (job, watches)

        # Kill, mid-wait, the triggerer holding the most waits; the other must take them over.
        victim = Counter(held.values()).most_common(1)[0][0]
        survivor = second_job if victim == first_job else first_job
        moved = [run_id for run_id, job in held.items() if job == victim]
        kill(trees[victim]())
        assert any(e2e.run(DAG, run_id)["state"] == "running" for run_id in moved), (
            "killed after the waits ended"
        )
        wait_until(
            lambda: (
                all(job in (None, survivor) for job in holders(e2e, moved).values())
                and any(job == survivor for job in holders(e2e, run_ids).values())
            ),
            timeout=120,
            what=lambda: f"the waits of {victim} taken over by {survivor}: {holders(e2e, run_ids)}",
        )
        # Taken over in the database first; the survivor's triggers then start and subscribe.
        watches = wait_until(
            lambda: set(w := watches_of(e2e, trees[survivor]())) == EXPECTED_WATCHES and w,
            timeout=30,
            what=lambda: f"the survivor's watches: {watches_of(e2e, trees[survivor]())}",
        )
        assert len(watches) <= MAX_WATCHES_PER_TRIGGERER, watches

        for run_id in run_ids:
            run = e2e.wait_run(DAG, run_id, timeout=300)
            assert run["state"] == "success", e2e.task_log(DAG, run_id, "submit")[-3000:]
    finally:
        # Leave one triggerer, as the session had: the survivor (the fixture restarts one if none is left).
        if len(alive_triggerer_jobs(e2e)) > 1:
            with contextlib.suppress(psutil.NoSuchProcess, subprocess.TimeoutExpired):
                kill(process_tree([second.pid]))

    requests = e2e.collect_requests()
    # One creation per run. Another run's RayJob made meanwhile is not counted (a scheduled pipeline an
    # earlier test left unpaused started its daily run at midnight UTC in one CI run: 5 creations for 4).
    ours = {(DAG, run_id, "submit") for run_id in run_ids}
    others = [job["metadata"]["name"] for job in e2e.rayjobs() if owner(job) not in ours]
    assert rayjob_creations(requests) - rayjob_creations(requests, others) == RUNS, (
        [
            (job["metadata"]["name"], owner(job), job["metadata"]["creationTimestamp"])
            for job in e2e.rayjobs()
        ],
        [
            (r["at"], r["name"], r["code"])
            for r in requests
            if r["resource"] == "rayjobs" and r["verb"] == "create"
        ],
        run_ids,
    )
    for run_id in run_ids:
        assert e2e.ti(DAG, run_id, "submit")["try_number"] == 1, "resumed, not retried"
        (rayjob,) = [job for job in e2e.rayjobs() if owner(job) == (DAG, run_id, "submit")]
        timeline = e2e.xcom(DAG, run_id, "submit", key="timeline")
        assert timeline["final_phase"] == "SUCCEEDED"
        assert timeline["preemption_count"] == 0
        # One admission, at the moment Kueue reserved the quota (timestamps have 1 s precision), whether the
        # trigger saw it live, or after the hand-over from the Workload's condition.
        (admission,) = timeline["admissions"]
        assert abs(to_epoch(admission["at"]) - to_epoch(quota_reserved_at(e2e, rayjob))) <= 2, (
            run_id,
            timeline,
        )
