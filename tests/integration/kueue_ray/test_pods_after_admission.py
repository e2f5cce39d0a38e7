"""Between admission and the Ray job running, the task log tells the Ray cluster's pods: here a head
whose image the registry lacks waits in ImagePullBackOff with the kubelet's message, and the log says
so until the image can be pulled and the job runs."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from tests.integration.kueue_ray.test_deferred import defer, first_event, submit


def test_the_log_tells_the_head_pod_waiting_on_an_image_pull(
    queues, rayjob_body, task_context, kubesim, capfd
):
    image = f"rayproject/ray:missing-{queues.namespace}"
    body = rayjob_body(duration="2")
    body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = image
    kubesim.set_faults(unpullable_images=[image])
    context = task_context("train")
    trigger = defer(submit(queues, body, context), context)
    out: list[str] = []

    async def scenario() -> dict:
        waiting = asyncio.create_task(first_event(trigger))
        try:
            for _ in range(400):
                out.append(capfd.readouterr().out)
                if "ImagePullBackOff" in "".join(out):
                    break
                await asyncio.sleep(0.05)
        finally:
            kubesim.set_faults(unpullable_images=[])
        return await waiting

    event = asyncio.run(scenario())
    out.append(capfd.readouterr().out)
    told = [line for line in "".join(out).splitlines() if "Ray cluster starting, pods:" in line]
    assert told, "".join(out)
    assert f"RayJob {queues.namespace}/{trigger.name}: Ray cluster starting, pods: head " in told[0]
    assert any(
        f'Pending (ImagePullBackOff: Back-off pulling image "{image}": ErrImagePull: ' in t for t in told
    )
    # Once the image pulls, the job runs and succeeds: the fault held it, nothing else.
    assert event["status"] == "success", event


def test_a_wait_in_a_worker_tells_the_pods_too(queues, rayjob_body, task_context, kubesim, capfd):
    """``deferrable=False`` holds a worker slot and reads on its own: the same pod lines as the trigger's."""
    image = f"rayproject/ray:missing-{queues.namespace}-worker"
    body = rayjob_body(duration="2")
    body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = image
    kubesim.set_faults(unpullable_images=[image])
    context = task_context("train")
    op = submit(queues, body, context, deferrable=False, poll_interval=0.2)
    out: list[str] = []
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(op.execute, context)
        try:
            for _ in range(400):
                out.append(capfd.readouterr().out)
                if "ImagePullBackOff" in "".join(out) or waiting.done():
                    break
                time.sleep(0.05)
        finally:
            kubesim.set_faults(unpullable_images=[])
        result = waiting.result(timeout=120)
    out.append(capfd.readouterr().out)
    told = [line for line in "".join(out).splitlines() if "Ray cluster starting, pods:" in line]
    assert told, "".join(out)
    assert f"RayJob {queues.namespace}/{result['name']}: Ray cluster starting, pods: head " in told[0]
    assert any(
        f'Pending (ImagePullBackOff: Back-off pulling image "{image}": ErrImagePull: ' in t for t in told
    )
