"""Airflow's own floor for a deferred task that ends in the triggerer (``bench.task_end``): a task that
defers at once, and a trigger that yields ``TaskSuccessEvent`` the moment a flag file appears. No
Kubernetes, no XComs, no log lines of its own: what is left between the flag and the task's success is
Airflow's triggerer handing the event over and its supervisor writing the success.

The flags of one directory are looked for by one task per triggerer process, every ``POLL_S`` (one
``os.listdir``), so fifty waiting floor tasks cost one directory read per interval, not fifty; the floor
so includes up to ``POLL_S`` (5 ms) of looking.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger, TaskSuccessEvent

FLAGS_ENV = "BENCH_FLAGS_DIR"
"""The environment variable that names the flags' directory (the benchmark sets it for Airflow)."""
POLL_S = 0.005

_waiting: dict[str, dict[str, asyncio.Event]] = {}
"""Directory -> flag name -> the event of the trigger waiting for it (one event loop: the triggerer's)."""
_lookers: dict[str, asyncio.Task] = {}
"""Directory -> the task looking for its flags while anyone waits there."""


async def _look(directory: str) -> None:
    """Set the event of every flag of ``directory`` that exists, until nobody waits there."""
    while waiting := _waiting.get(directory):
        present = set(os.listdir(directory))
        for name in [name for name in waiting if name in present]:
            waiting.pop(name).set()
        await asyncio.sleep(POLL_S)


class FlagTrigger(BaseTrigger):
    """Fires ``TaskSuccessEvent`` once ``directory/name`` exists."""

    def __init__(self, directory: str, name: str) -> None:
        super().__init__()
        self.directory, self.name = directory, name

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("bench.floor.FlagTrigger", {"directory": self.directory, "name": self.name})

    async def run(self) -> AsyncIterator[TaskSuccessEvent]:  # type: ignore[override]
        event = asyncio.Event()
        _waiting.setdefault(self.directory, {})[self.name] = event
        looker = _lookers.get(self.directory)
        if looker is None or looker.done():
            _lookers[self.directory] = asyncio.create_task(_look(self.directory))
        try:
            await event.wait()
        finally:
            waiting = _waiting.get(self.directory)
            if waiting is not None:
                waiting.pop(self.name, None)
                if not waiting:
                    del _waiting[self.directory]
        yield TaskSuccessEvent()


class FlagOperator(BaseOperator):
    """Defers at once on ``FlagTrigger`` for the flag named after its DAG run, in ``$BENCH_FLAGS_DIR``."""

    def execute(self, context: Any) -> None:
        directory = os.environ[FLAGS_ENV]
        self.defer(
            trigger=FlagTrigger(directory, flag_name(context["run_id"])), method_name="execute_complete"
        )

    def execute_complete(self, context: Any, event: Any = None) -> None:
        """Not reached: the trigger ends the task in the triggerer."""


def flag_name(run_id: str) -> str:
    """The flag file of a DAG run (run ids may hold characters a file name should not)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)


def flip(directory: Path, run_id: str) -> None:
    """Raise the flag of ``run_id``: its floor task's trigger fires within ``POLL_S``."""
    (directory / flag_name(run_id)).touch()
