"""The task log against kubesim, read as a user reads it: the queue position moves while the job waits,
the preemptor is named by RayJob, DAG and run, memory is in Gi, and nothing is said twice. The same story
whether the task waits in the triggerer (deferred) or in a worker slot."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from datetime import datetime

from kueue_ray import narration
from kueue_ray.hub import HUB

from tests.integration.kueue_ray.conftest import KUEUE, wait_for
from tests.integration.kueue_ray.test_deferred import defer, first_event, submit, until

PHASE = re.compile(r"RayJob \S+: (?:still )?([A-Z]+)\b")


def story(capfd, logger: str) -> list[str]:
    """The task-log lines about the RayJob that ``logger`` wrote (structlog prints them to stdout here)."""
    return [
        line
        for line in capfd.readouterr().out.splitlines()
        if logger in line and PHASE.search(line) is not None
    ]


def phases(lines: list[str]) -> list[str]:
    return [PHASE.search(line).group(1) for line in lines]


def stamp(line: str) -> datetime:
    return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))


def queue_blockers(queues, rayjob_body, task_context, count: int, duration: str) -> None:
    """``count`` RayJobs of one priority, and a second more once Kueue has made their Workloads: Kueue
    orders one priority's Workloads by their creationTimestamp, to the second, and then by their random
    UIDs, so a RayJob submitted in the same second as a blocker could be queued before it."""
    for index in range(count):
        context = task_context(f"blocker{index}")
        submit(
            queues,
            rayjob_body(duration=duration),
            context,
            task_id=f"blocker{index}",
            wait_for_completion=False,
        ).execute(context)
    wait_for(
        lambda: (
            len(queues.custom.list_namespaced_custom_object(*KUEUE, queues.namespace, "workloads")["items"])
            >= count
        )
    )
    time.sleep(1.0)


def preempt_when_running(queues, rayjob_body, task_context) -> str:
    """Once the ``train`` RayJob runs, submit a prod-priority one that needs its quota; its name."""
    urgent_context = task_context("urgent")
    urgent = submit(
        queues,
        rayjob_body(duration="2"),
        urgent_context,
        task_id="urgent",
        priority=queues.high,
        wait_for_completion=False,
    )
    return urgent.execute(urgent_context)["name"]


def running(queues, task_id: str) -> bool:
    return any(
        (job.get("status") or {}).get("jobDeploymentStatus") == "Running"
        and f"-{task_id}-" in job["metadata"]["name"]
        for job in queues.rayjobs()
    )


def test_a_deferred_wait_relogs_the_queue_position_as_it_moves_at_most_once_per_interval(
    queues, rayjob_body, task_context, capfd, monkeypatch
):
    monkeypatch.setattr(narration, "POSITION_RELOG_SECONDS", 1.0)
    monkeypatch.setattr(HUB.settings, "pending_workloads_ttl_seconds", 0.2)
    queue_blockers(queues, rayjob_body, task_context, count=3, duration="60")  # 3 s each at 20x
    context = task_context("train")
    trigger = defer(submit(queues, rayjob_body(duration="2"), context), context)
    capfd.readouterr()

    event = asyncio.run(first_event(trigger))

    assert event["status"] == "success", event
    lines = story(capfd, "kueue_ray.trigger.RayJobTrigger")
    positions = [
        int(m.group(1)) for line in lines if (m := re.search(r"position (\d+) in the ClusterQueue", line))
    ]
    shown = "\n".join(lines)  # whole, not cut short as a list's repr is in pytest's message
    assert positions[0] == 3 and positions[-1] == 1, shown
    # Never back up the queue, and relog a position only when it moved. The ClusterQueue position may
    # repeat where more than it is said: on the real stack under load it read 3, 2, 2, 1 once (2026-12-06,
    # the lines cut short in the log): a transition line, or a relog whose LocalQueue count moved.
    assert positions == sorted(positions, reverse=True), shown
    moved = [line.split(" — ", 1)[1] for line in lines if ": still QUEUED — position" in line]
    assert moved, "the position moved from 3 to 1 without a line saying so"
    assert len(set(moved)) == len(moved), shown
    told = [stamp(line) for line in lines if "position" in line]
    assert all(
        (later - earlier).total_seconds() >= 0.9 for earlier, later in zip(told, told[1:], strict=False)
    )


def test_a_preempted_deferred_wait_names_the_preemptor_and_queues_once(
    queues, rayjob_body, task_context, capfd
):
    context = task_context("train")
    op = submit(queues, rayjob_body(duration="40"), context)
    trigger = defer(op, context)

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        await until(lambda: running(queues, "train"))
        name = await asyncio.to_thread(preempt_when_running, queues, rayjob_body, task_context)
        return name, await waiting

    urgent, event = asyncio.run(scenario())

    assert event["status"] == "success" and event["preemptions"] == 1, event
    lines = story(capfd, "kueue_ray.trigger.RayJobTrigger")
    [preempted] = [line for line in lines if ": PREEMPTED " in line]
    assert (
        f"Preempted to accommodate RayJob {queues.namespace}/{urgent} (DAG ml_pipeline, run manual__1, task urgent)"
        in preempted
    )
    start = phases(lines).index("PREEMPTED")
    requeued = lines[start : start + phases(lines)[start:].index("ADMITTED")]
    # Queued once per thing Kueue says: real Kueue may first say "Waiting for the Kueue scheduler." and
    # name the short quota a cycle later (two lines, each new); never the same words twice.
    queued = [line.split(": QUEUED ", 1)[1] for line in requeued if ": QUEUED " in line]
    assert queued and len(set(queued)) == len(queued), lines
    assert any("Gi more needed" in line for line in queued), lines
    assert not any("Ki more needed" in line for line in queued), lines

    op.execute_complete(context, event=event)
    summary = capfd.readouterr().out
    assert (
        f"preempted at {event['timeline']['preemptions'][0]['at']}: Preempted to accommodate RayJob"
        in summary
    )


def test_a_wait_in_the_worker_names_the_preemptor_too(queues, rayjob_body, task_context, capfd):
    """Polling may miss the short PREEMPTED phase; the end-of-task summary still names who preempted."""
    context = task_context("train")
    op = submit(queues, rayjob_body(duration="40"), context, deferrable=False, poll_interval=0.1)
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(result=op.execute(context)))
    worker.start()
    asyncio.run(until(lambda: running(queues, "train")))
    urgent = preempt_when_running(queues, rayjob_body, task_context)
    worker.join(60)

    assert outcome["result"]["name"] == op._owned[0]
    log = capfd.readouterr().out
    assert re.search(
        rf"preempted at \S+: Preempted to accommodate RayJob {queues.namespace}/{urgent} "
        r"\(DAG ml_pipeline, run manual__1, task urgent\) \(Workload UID: ",
        log,
    ), log[-3000:]
