"""The simulated inside of a Ray cluster: the dashboard's job table and the driver that runs a job.

KubeRay learns a Ray job's fate only by asking the head's dashboard (``GetJobInfo``); the submitter
pod learns it by following the driver log. This module is that dashboard: one job table per
RayCluster, each job an asyncio task that prints driver-like output and ends the way the RayJob's
``kubesim.dev/*`` annotations say. Deleting the RayCluster kills its jobs, as losing the head would.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime

from kubesim.clock import Clock

DURATION = "kubesim.dev/duration"
STARTUP = "kubesim.dev/startup"
OUTCOME = "kubesim.dev/outcome"
FAIL_ATTEMPTS = "kubesim.dev/fail-attempts"

OUTCOMES = ("Succeeded", "AppFailed", "SubmissionFailed")
TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
PROGRESS_EVERY = 3.0  # simulated seconds between two progress lines of the driver
PENDING_FOR = 1.0  # simulated seconds a submitted job stays PENDING before its driver starts


def startup_seconds(annotations: dict | None) -> float:
    """Simulated seconds until a RayCluster's pods are running (annotation, default 5)."""
    return _seconds((annotations or {}).get(STARTUP), 5.0)


def _seconds(value: str | None, default: float) -> float:
    if value is None or value == "":
        return default
    if str(value).lower() == "inf":
        return math.inf
    try:
        return max(0.0, float(value))
    except ValueError:
        return default


@dataclass(frozen=True)
class Behaviour:
    """How one attempt of a RayJob ends, read from its annotations when the job is submitted."""

    duration: float = 30.0
    outcome: str = "Succeeded"

    @classmethod
    def for_attempt(cls, annotations: dict | None, failed_so_far: int) -> Behaviour:
        """``failed_so_far`` is ``status.failed``: attempts before it that failed (preemptions do not count)."""
        annotations = annotations or {}
        outcome = annotations.get(OUTCOME, "Succeeded")
        if outcome not in OUTCOMES:
            outcome = "Succeeded"
        try:
            fail_attempts = int(annotations.get(FAIL_ATTEMPTS, "0"))
        except ValueError:
            fail_attempts = 0
        if fail_attempts > 0:
            outcome = "AppFailed" if failed_so_far < fail_attempts else "Succeeded"
        return cls(duration=_seconds(annotations.get(DURATION), 30.0), outcome=outcome)


@dataclass
class RayJobRun:
    """One row of the dashboard's job table (what ``GetJobInfo`` returns) plus its driver log."""

    job_id: str
    entrypoint: str
    behaviour: Behaviour
    status: str = "PENDING"
    message: str = "Job has not started yet. It may be waiting for the runtime environment to be set up."
    start_time: datetime | None = None
    end_time: datetime | None = None
    lines: list[str] = field(default_factory=list)
    gone: bool = False  # the cluster died under the job: followers stop without a verdict
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL or self.gone

    def emit(self, line: str) -> None:
        self.lines.append(line)
        self._wake()

    def _wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def follow(self) -> AsyncIterator[str]:
        """Every driver line, from the first, until the job ends (``ray job logs --follow``)."""
        sent = 0
        while True:
            waiter = self.changed
            while sent < len(self.lines):
                yield self.lines[sent]
                sent += 1
            if self.finished:
                return
            await waiter.wait()


class RayDashboards:
    """The dashboards of every simulated RayCluster, keyed by (namespace, cluster name)."""

    def __init__(self, clock: Clock, on_change: Callable[[str, str], None]) -> None:
        """``on_change(namespace, cluster)`` is called whenever a job's status changes."""
        self._clock = clock
        self._on_change = on_change
        self._jobs: dict[tuple[str, str], dict[str, RayJobRun]] = {}

    def get_job(self, namespace: str, cluster: str, job_id: str) -> RayJobRun | None:
        return self._jobs.get((namespace, cluster), {}).get(job_id)

    def submit(
        self, namespace: str, cluster: str, job_id: str, entrypoint: str, behaviour: Behaviour
    ) -> RayJobRun:
        """Submit (idempotent per submission id, like ``ray job submit --submission-id``)."""
        table = self._jobs.setdefault((namespace, cluster), {})
        if job_id in table:
            return table[job_id]
        run = RayJobRun(job_id=job_id, entrypoint=entrypoint, behaviour=behaviour)
        table[job_id] = run
        run.task = asyncio.get_running_loop().create_task(self._drive(namespace, cluster, run))
        return run

    def stop_job(self, namespace: str, cluster: str, job_id: str) -> None:
        """``StopJob``: a running job ends STOPPED."""
        run = self.get_job(namespace, cluster, job_id)
        if run is None or run.finished:
            return
        if run.task:
            run.task.cancel()
        self._finish(namespace, cluster, run, "STOPPED", "Job was intentionally stopped.")
        run.emit(f"Job '{run.job_id}' was stopped")

    def drop_cluster(self, namespace: str, cluster: str) -> None:
        """The cluster is gone: its drivers die and its job table with it."""
        for run in self._jobs.pop((namespace, cluster), {}).values():
            if run.task:
                run.task.cancel()
            run.gone = True
            run._wake()

    def close(self) -> None:
        for namespace, cluster in list(self._jobs):
            self.drop_cluster(namespace, cluster)

    def _finish(self, namespace: str, cluster: str, run: RayJobRun, status: str, message: str) -> None:
        run.status, run.message, run.end_time = status, message, self._clock.now()
        self._on_change(namespace, cluster)

    async def _drive(self, namespace: str, cluster: str, run: RayJobRun) -> None:
        """The driver process: PENDING, then RUNNING with progress lines, then the verdict."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._clock.sleep(PENDING_FOR)
            run.status, run.message, run.start_time = (
                "RUNNING",
                "Job is currently running.",
                self._clock.now(),
            )
            self._on_change(namespace, cluster)
            for line in _driver_preamble(namespace, cluster, run):
                run.emit(line)
            await self._run_epochs(run)
            if run.behaviour.outcome == "AppFailed":
                tail = _traceback(run)
                for line in tail:
                    run.emit(line)
                message = (
                    "Job entrypoint command failed with exit code 1, last available logs "
                    "(truncated to 20,000 chars):\n" + "\n".join(tail)
                )
                self._finish(namespace, cluster, run, "FAILED", message)
                run.emit(f"Job '{run.job_id}' failed")
            else:
                run.emit("Training finished.")
                self._finish(namespace, cluster, run, "SUCCEEDED", "Job finished successfully.")
                run.emit(f"Job '{run.job_id}' succeeded")

    async def _run_epochs(self, run: RayJobRun) -> None:
        duration = run.behaviour.duration
        total = None if math.isinf(duration) else max(1, math.ceil(duration / PROGRESS_EVERY))
        epoch = 0
        remaining = duration
        while remaining > 0:
            step = min(PROGRESS_EVERY, remaining)
            await self._clock.sleep(step)
            remaining -= step
            epoch += 1
            loss = 2.3 * (0.85**epoch)
            of_total = f"/{total}" if total else ""
            run.emit(f"epoch {epoch}{of_total} step={epoch * 100} loss={loss:.4f} throughput=1280 samples/s")


def _driver_preamble(namespace: str, cluster: str, run: RayJobRun) -> list[str]:
    return [
        f"INFO worker.py:1723 -- Connecting to existing Ray cluster at address: {cluster}-head-svc.{namespace}"
        ".svc.cluster.local:6379...",
        f"INFO worker.py:1908 -- Connected to Ray cluster. View the dashboard at "
        f"http://{cluster}-head-svc.{namespace}.svc.cluster.local:8265",
        f"Running entrypoint for job {run.job_id}: {run.entrypoint}",
    ]


def _traceback(run: RayJobRun) -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/home/ray/workdir/main.py", line 42, in <module>',
        "    train()",
        '  File "/home/ray/workdir/main.py", line 37, in train',
        "    raise RuntimeError(message)",
        f"RuntimeError: simulated application failure in job {run.job_id} ({OUTCOME}=AppFailed)",
    ]
