"""The polling baseline: N waits shaped like the cncf provider's ``KubernetesJobTrigger``, on one loop.

``KubernetesJobTrigger.run`` loops ``hook.get_job_status(...)`` then ``asyncio.sleep(poll_interval)``
(10 s by default), and ``AsyncKubernetesHook`` opens a fresh ``ApiClient`` for every call. This does the
same for a RayJob: one GET of the custom object per job per interval through ``AsyncKubernetesHook``,
stopping when the RayJob is Complete or Failed.

Run as ``python -m bench.polling_worker JOBS.json LOG`` (same spec file as ``bench.trigger_worker``); it runs
until ``quit`` on stdin, answering ``usage`` with ``{"usage": {...}, "polls": n}`` (``polls`` counts GETs
answered), so the parent can relate kubesim's request count to polls made.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from pathlib import Path

from bench.trigger_worker import emit, read_commands, take_stdout, usage

POLL_INTERVAL_S = 10.0
DONE = frozenset({"Complete", "Failed"})


async def poll_one(hook, namespace: str, name: str, counter: list[int], interval: float) -> None:
    from kubernetes_asyncio import client

    while True:
        async with hook.get_conn() as api_client:
            rayjob = await client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayjobs", name
            )
        counter[0] += 1  # counted once answered: kubesim records a request when it has served it
        if (rayjob.get("status") or {}).get("jobDeploymentStatus") in DONE:
            return
        await asyncio.sleep(interval)


async def main(spec_path: str, log_path: str) -> None:
    take_stdout(log_path)
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    spec = json.loads(Path(spec_path).read_text())
    interval = float(spec.get("poll_interval", POLL_INTERVAL_S))
    counter = [0]
    hook = AsyncKubernetesHook(conn_id="kubernetes_default")
    tasks = [
        asyncio.create_task(poll_one(hook, spec["namespace"], job["name"], counter, interval))
        for job in spec["jobs"]
    ]
    commands: asyncio.Queue[str] = asyncio.Queue()
    threading.Thread(target=read_commands, args=(asyncio.get_running_loop(), commands), daemon=True).start()
    emit({"started": len(tasks), "usage": usage()})
    while True:
        command = await commands.get()
        if command == "usage":
            emit({"usage": usage(), "polls": counter[0]})
        elif command == "quit":
            break
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    emit({"final": usage(), "polls": counter[0]})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/dev/null"))
