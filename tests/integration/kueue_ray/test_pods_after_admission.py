"""Between admission and the Ray job running, the task log tells the Ray cluster's pods: here a head
whose image the registry lacks waits in ImagePullBackOff with the kubelet's message, and the log says
so until the image can be pulled and the job runs."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from kueue_ray.narration import POD_CHECK_SECONDS

from tests.integration.kueue_ray.test_deferred import defer, first_event, submit


def unpullable_head(rayjob_body, image: str, **sizes: str) -> dict:
    body = rayjob_body(duration="2", **sizes)
    body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = image
    return body


def assert_told_the_image_pull(out: list[str], rayjob: str, image: str) -> None:
    told = [line for line in "".join(out).splitlines() if "Ray cluster starting, pods:" in line]
    assert told, "".join(out)
    # The first read may come before KubeRay made the pods ("no pods yet").
    assert any(f"RayJob {rayjob}: Ray cluster starting, pods: head " in t for t in told), told
    assert any(
        f'Pending (ImagePullBackOff: Back-off pulling image "{image}": ErrImagePull: ' in t for t in told
    )


def test_the_log_tells_the_head_pod_waiting_on_an_image_pull(
    queues, rayjob_body, task_context, kubesim, capfd
):
    image = f"rayproject/ray:missing-{queues.namespace}"
    body = unpullable_head(rayjob_body, image)
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
    assert_told_the_image_pull(out, f"{queues.namespace}/{trigger.name}", image)
    # Once the image pulls, the job runs and succeeds: the fault held it, nothing else.
    assert event["status"] == "success", event


def test_a_wait_in_a_worker_tells_the_pods_too(queues, rayjob_body, task_context, kubesim, capfd):
    """``deferrable=False`` holds a worker slot and reads on its own: the same pod lines as the trigger's."""
    image = f"rayproject/ray:missing-{queues.namespace}-worker"
    body = unpullable_head(rayjob_body, image)
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
    assert_told_the_image_pull(out, f"{queues.namespace}/{result['name']}", image)


STARTING = 8
"""Ray clusters starting at once in one namespace: more than the pod lists one read per check may send."""


def test_starting_clusters_cost_a_pod_list_per_namespace_and_check_not_one_per_task(
    queues, rayjob_body, task_context, kubesim, capfd
):
    """Every trigger of a namespace whose Ray cluster starts is told its pods from one shared list per
    ``POD_CHECK_SECONDS`` (``ray.io/cluster in (...)``), not a list of its own."""
    image = f"rayproject/ray:missing-{queues.namespace}-many"
    kubesim.set_faults(unpullable_images=[image])
    triggers = []
    for i in range(STARTING):  # small enough that all eight are admitted at once
        body = unpullable_head(rayjob_body, image, cpu="250m", memory="1000M", gpu="0")
        context = task_context(f"train-{i}")
        triggers.append(defer(submit(queues, body, context, task_id=f"train-{i}"), context))
    capfd.readouterr()
    kubesim.clear_requests()

    async def scenario() -> tuple[float, str]:
        started, out = time.monotonic(), []
        waits = [asyncio.create_task(first_event(trigger)) for trigger in triggers]
        try:
            while not all(f"{t.name}: Ray cluster starting, pods: head " in "".join(out) for t in triggers):
                assert time.monotonic() - started < 120, "".join(out)
                await asyncio.sleep(0.2)
                out.append(capfd.readouterr().out)
            return time.monotonic() - started, "".join(out)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            kubesim.set_faults(unpullable_images=[])

    elapsed, told = asyncio.run(scenario())
    assert told.count("ImagePullBackOff") + told.count("ErrImagePull") >= STARTING, told
    pod_lists = [
        r
        for r in kubesim.requests()
        if (r["verb"], r["resource"], r["namespace"]) == ("list", "pods", queues.namespace)
    ]
    # One read per check interval, and a top-up for the clusters that asked while one was under way.
    assert len(pod_lists) <= 3 + elapsed / POD_CHECK_SECONDS, (len(pod_lists), elapsed)
