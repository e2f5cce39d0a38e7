"""For a benchmark only, never shipped: Airflow 3.3.2's trigger runner with its event hand-over woken by the
event (``python -m bench.task_end --handover woken`` puts this folder first on the Airflow processes'
``PYTHONPATH``, so Python imports it at start-up as ``sitecustomize``).

Stock ``TriggerRunner.arun`` hands the events its triggers yielded to its supervisor once per pass of a
loop that sleeps ``anyio.move_on_after(1)`` on its stop event, so an event waits 0-1 s for the next pass.
Here the loop's sleep also ends when a trigger appends an event to ``TriggerRunner.events``: the proposal
of bench/README.md ("What Airflow would gain"), measured. Nothing else changes: the pass that follows is
the stock one (clean up, sync with the supervisor, create, cancel), and a stop still ends the sleep.

How: when ``airflow.jobs.triggerer_job_runner`` is first imported, (1) its ``anyio`` name becomes a view of
anyio whose ``Event`` (only ``arun`` makes one, the stop event it sleeps on) also wakes when told, and
(2) each ``TriggerRunner`` gets an ``events`` deque whose ``append`` tells the sleeping event.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.util
import sys
from collections import deque
from types import ModuleType, SimpleNamespace

TARGET = "airflow.jobs.triggerer_job_runner"
_sleepers: list[WakeableStopEvent] = []
"""The stop events the runner's loop sleeps on (one runner per triggerer process)."""


class WakeableStopEvent:
    """``anyio.Event`` for the runner's stop, whose ``wait`` also returns once woken (then re-arms)."""

    def __init__(self) -> None:
        self._stopped = False
        self._wake = asyncio.Event()
        _sleepers.append(self)

    def set(self) -> None:
        self._stopped = True
        self._wake.set()

    def is_set(self) -> bool:
        return self._stopped

    def wake(self) -> None:
        self._wake.set()

    async def wait(self) -> None:
        await self._wake.wait()
        if not self._stopped:
            self._wake.clear()


class WakingDeque(deque):
    """The runner's outbound events: appending one wakes the loop's sleep."""

    def append(self, item) -> None:  # type: ignore[override]
        super().append(item)
        for sleeper in _sleepers:
            sleeper.wake()


def _patch(module: ModuleType) -> None:
    import anyio

    module.anyio = SimpleNamespace(  # type: ignore[attr-defined]
        **{name: getattr(anyio, name) for name in dir(anyio) if not name.startswith("__")},
    )
    module.anyio.Event = WakeableStopEvent  # type: ignore[attr-defined]
    runner = module.TriggerRunner
    stock_init = runner.__init__

    def __init__(self, *args, **kwargs) -> None:
        stock_init(self, *args, **kwargs)
        self.events = WakingDeque(self.events)

    runner.__init__ = __init__
    print("bench.handover: TriggerRunner's hand-over is woken by its events", file=sys.stderr, flush=True)


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        stock_exec = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            stock_exec(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _PatchOnImport())
