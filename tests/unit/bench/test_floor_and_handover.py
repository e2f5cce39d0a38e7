"""The pieces of bench.task_end's floor comparison: the floor's trigger fires when its flag appears and not
before, and the benchmark-only patched trigger runner ends its sleep when a trigger yields an event."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from airflow.triggers.base import TaskSuccessEvent

from bench.floor import FlagTrigger, flag_name, flip

ROOT = Path(__file__).resolve().parents[3]


def test_the_floor_trigger_fires_when_its_flag_appears_and_the_others_keep_waiting(tmp_path):
    triggers = [FlagTrigger(str(tmp_path), flag_name(f"manual__run:{i}")) for i in range(3)]

    async def scenario():
        events = [asyncio.create_task(t.run().__anext__()) for t in triggers]
        await asyncio.sleep(0.05)
        assert not any(e.done() for e in events)
        flip(tmp_path, "manual__run:1")
        done, pending = await asyncio.wait(events, timeout=2, return_when=asyncio.FIRST_COMPLETED)
        assert done == {events[1]} and isinstance(events[1].result(), TaskSuccessEvent)
        await asyncio.sleep(0.05)
        assert not any(e.done() for e in pending)
        for name in ("manual__run:0", "manual__run:2"):
            flip(tmp_path, name)
        await asyncio.wait_for(asyncio.gather(*pending), 2)

    asyncio.run(scenario())
    assert FlagTrigger(str(tmp_path), "x").serialize() == (
        "bench.floor.FlagTrigger",
        {"directory": str(tmp_path), "name": "x"},
    )


def test_the_patched_trigger_runner_wakes_when_a_trigger_yields_and_still_stops():
    probe = """
import asyncio, time
from airflow.jobs import triggerer_job_runner as runner_module

runner = runner_module.TriggerRunner()

async def main():
    sleep = runner_module.anyio.Event()  # what arun sleeps on, at most a second a pass
    async def yielded():
        await asyncio.sleep(0.1)
        runner.events.append("event")
    asyncio.create_task(yielded())
    started = time.monotonic()
    with runner_module.anyio.move_on_after(1):
        await sleep.wait()
    woken = time.monotonic() - started
    started = time.monotonic()
    with runner_module.anyio.move_on_after(0.3):
        await sleep.wait()
    slept = time.monotonic() - started
    sleep.set()
    await asyncio.wait_for(sleep.wait(), 1)
    print(round(woken, 2), round(slept, 2), sleep.is_set(), list(runner.events))

asyncio.run(main())
"""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "bench" / "handover"), str(ROOT / "plugins"), str(ROOT)]),
    }
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    woken, slept, stopped, events = done.stdout.split(maxsplit=3)
    assert float(woken) < 0.5, "woken by the event, not by the end of the second"
    assert float(slept) >= 0.29, "no event: the pass sleeps as before"
    assert stopped == "True" and events.strip() == "['event']"
