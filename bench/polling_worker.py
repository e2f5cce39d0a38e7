"""The polling baseline: N waits shaped like the cncf provider's ``KubernetesJobTrigger``, on one loop.

``KubernetesJobTrigger.run`` loops ``hook.get_job_status(...)`` then ``asyncio.sleep(poll_interval)``
(10 s by default), and ``AsyncKubernetesHook`` opens a fresh ``ApiClient`` for every call. This does the
same for a RayJob: one GET of the custom object per job per interval through ``AsyncKubernetesHook``,
stopping when the RayJob is Complete or Failed.

A triggerer picks deferred tasks up over time, not all in the same millisecond, so poller ``i`` of ``N``
makes its first poll ``i/N`` of an interval after start: the polls are spread evenly over each interval,
which is the steady state a real triggerer reaches. (Starting all N at once measures a thundering herd
of N kubeconfig loads instead, which no triggerer produces.)

Run as ``python -m bench.polling_worker JOBS.json LOG`` (same spec file as ``bench.trigger_worker``); it runs
until ``quit`` on stdin. ``usage`` answers ``{"usage": {...}, "polls": n, "periods": [...]}``: ``polls``
counts GETs answered so far, ``periods`` the seconds between consecutive poll starts of the same job
recorded since the previous ``usage`` (10 s plus the GET's own time when the loop keeps up; more when it
does not), so the parent can tell whether the poller kept its interval. On ``quit`` every job ends
between two polls, never in the middle of a GET, so the final ``polls`` is every GET it sent: kubesim's
request count over the poller's life divides by it exactly, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

from bench.harness.protocol import DONE, emit, read_commands, take_stdout, usage

POLL_INTERVAL_S = 10.0


class Tally:
    """Polls answered, and the poll-to-poll periods not yet reported to the parent."""

    def __init__(self) -> None:
        self.polls = 0
        self.periods: list[float] = []

    def take_periods(self) -> list[float]:
        taken, self.periods = self.periods, []
        return [round(p, 3) for p in taken]


async def pause(stopping: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds``; False when ``stopping`` was set meanwhile (or before)."""
    try:
        await asyncio.wait_for(stopping.wait(), seconds)
    except TimeoutError:
        return True
    return False


async def poll_one(
    hook, namespace: str, name: str, tally: Tally, interval: float, offset: float, stopping: asyncio.Event
) -> None:
    from kubernetes_asyncio import client

    previous = None
    if not await pause(stopping, offset):
        return
    while True:
        started = time.monotonic()
        if previous is not None:
            tally.periods.append(started - previous)
        previous = started
        async with hook.get_conn() as api_client:
            rayjob = await client.CustomObjectsApi(api_client).get_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayjobs", name
            )
        tally.polls += 1  # counted once answered: kubesim records a request when it has served it
        if (rayjob.get("status") or {}).get("jobDeploymentStatus") in DONE:
            return
        if not await pause(stopping, interval):
            return


async def main(spec_path: str, log_path: str) -> None:
    take_stdout(log_path)
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    spec = json.loads(Path(spec_path).read_text())
    interval = float(spec.get("poll_interval", POLL_INTERVAL_S))
    tally = Tally()
    stopping = asyncio.Event()
    hook = AsyncKubernetesHook(conn_id="kubernetes_default")
    jobs = spec["jobs"]
    tasks = [
        asyncio.create_task(
            poll_one(
                hook, spec["namespace"], job["name"], tally, interval, interval * i / len(jobs), stopping
            )
        )
        for i, job in enumerate(jobs)
    ]
    commands: asyncio.Queue[str] = asyncio.Queue()
    threading.Thread(target=read_commands, args=(asyncio.get_running_loop(), commands), daemon=True).start()
    emit({"started": len(tasks), "usage": usage()})
    while True:
        command = await commands.get()
        if command == "usage":
            emit({"usage": usage(), "polls": tally.polls, "periods": tally.take_periods()})
        elif command == "quit":
            break
    stopping.set()
    await asyncio.gather(*tasks, return_exceptions=True)  # a failed poll ends its job, not the tally
    emit({"final": usage(), "polls": tally.polls})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/dev/null"))
