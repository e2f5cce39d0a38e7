"""A RayJob's priority changed as the Kueue tab does it (its priority-class label, with who changed it):
Kueue carries the new class to the Workload, which then preempts the lower-priority job holding the
quota, and the waiting task's log tells the change with its author."""

from __future__ import annotations

import asyncio

from kueue_ray.naming import PRIORITY_CHANGED_BY_ANNOTATION
from kueue_ray.priority_change import relabel_patch

from tests.integration.kueue_ray.test_deferred import defer, first_event, submit


def test_a_pending_job_made_prod_takes_the_quota_and_the_log_says_who_changed_it(
    queues, rayjob_body, task_context, capfd
):
    blocker_context = task_context("blocker")
    submit(
        queues, rayjob_body(duration="inf"), blocker_context, task_id="blocker", wait_for_completion=False
    ).execute(blocker_context)
    context = task_context("train")
    trigger = defer(submit(queues, rayjob_body(duration="2"), context), context)

    out: list[str] = []

    async def scenario() -> dict:
        waiting = asyncio.create_task(first_event(trigger))
        # Changed while the task waits in the queue (its log said so), as a user on the tab would.
        for _ in range(400):
            out.append(capfd.readouterr().out)
            if f"{trigger.name}: QUEUED" in "".join(out):
                break
            await asyncio.sleep(0.05)
        patch = relabel_patch(queues.high)
        patch["metadata"]["annotations"] = {
            PRIORITY_CHANGED_BY_ANNOTATION: f"admin: {queues.low} -> {queues.high}"
        }
        await asyncio.to_thread(
            queues.custom.patch_namespaced_custom_object,
            "ray.io",
            "v1",
            queues.namespace,
            "rayjobs",
            trigger.name,
            patch,
        )
        return await waiting

    event = asyncio.run(scenario())
    assert event["status"] == "success", event
    out.append(capfd.readouterr().out)
    told = "\n".join(line for line in "".join(out).splitlines() if "kueue_ray.trigger.RayJobTrigger" in line)
    assert f"RayJob {queues.namespace}/{trigger.name}: priority changed to {queues.high} (" in told
    assert f"(changed from Airflow by admin: {queues.low} -> {queues.high})" in told
    workload = queues.workload(trigger.uid)
    assert workload["spec"]["priorityClassRef"]["name"] == queues.high
    # The task's timeline (the Kueue tab draws it) has the change where it happened, with its author.
    [change] = [t for t in event["timeline"]["transitions"] if t["reason"] == "PriorityChanged"]
    assert change["phase"] == "QUEUED"
    assert change["message"].endswith(f"-> {queues.high} (1000), changed from Airflow by admin")
