"""The simulated inside of a Ray cluster: the dashboard's job table and the driver that runs a job.

KubeRay learns a Ray job's fate only by asking the head's dashboard (``GetJobInfo``); the submitter
pod learns it by following the driver log. This module is that dashboard: one job table per
RayCluster, each job an asyncio task that prints driver-like output and ends the way the RayJob itself
says (``Behaviour``: its entrypoint and runtime environment, read as a real cluster would run them).
Deleting the RayCluster kills its jobs, as losing the head would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime

import yaml

from kubesim.clock import Clock
from kubesim.entrypoint import (
    DEFAULT_DURATION,
    DEFAULT_STARTUP,
    EPOCH_SECONDS,
    EPOCH_VARIABLES,
    Entrypoint,
    seconds,
)

# Test-only overrides: the project's RayJob templates never send these (KubeRay would copy them onto the
# RayCluster of a real cluster); tests use them for what no real RayJob field can say (e.g. "fail the first
# attempt only").
DURATION = "kubesim.dev/duration"
STARTUP = "kubesim.dev/startup"
OUTCOME = "kubesim.dev/outcome"
FAIL_ATTEMPTS = "kubesim.dev/fail-attempts"

OUTCOMES = ("Succeeded", "AppFailed", "SubmissionFailed")
TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
RUNTIME_ENV_SETUP = 60.0
"""Simulated seconds Ray spends installing a runtime environment's packages (``pip``, ``uv``, ``conda``)
before the driver starts; the Ray job is PENDING meanwhile. Every RayJob gets a fresh cluster, so it pays
this every attempt."""
PACKAGE_MANAGERS = ("pip", "uv", "conda")
PROGRESS_EVERY = 3.0  # simulated seconds between two progress lines of a driver without epochs
PENDING_FOR = 1.0  # simulated seconds a submitted job stays PENDING before its driver starts


def startup_seconds(annotations: dict | None) -> float:
    """Simulated seconds until a RayCluster's pods are running (test-only annotation, default 5)."""
    return seconds((annotations or {}).get(STARTUP), DEFAULT_STARTUP)


def _runtime_env(runtime_env_yaml: str | None) -> dict:
    try:
        env = yaml.safe_load(runtime_env_yaml or "") or {}
    except yaml.YAMLError:
        return {}
    return env if isinstance(env, dict) else {}


def runtime_env_setup_seconds(runtime_env_yaml: str | None) -> float:
    """``RUNTIME_ENV_SETUP`` when the runtime environment installs packages, else 0."""
    env = _runtime_env(runtime_env_yaml)
    return RUNTIME_ENV_SETUP if any(env.get(manager) for manager in PACKAGE_MANAGERS) else 0.0


def runtime_env_epochs(runtime_env_yaml: str | None) -> int | None:
    """``NUM_EPOCHS`` (or ``EPOCHS``) from the runtime environment's ``env_vars``."""
    env = _runtime_env(runtime_env_yaml).get("env_vars") or {}
    if not isinstance(env, dict):
        return None
    for name in EPOCH_VARIABLES:
        value = str(env.get(name, "")).strip()
        if value.isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class Behaviour:
    """How one attempt of a RayJob runs and ends, read from the RayJob when the job is submitted.

    From what the RayJob already says, as a real cluster would run it: the entrypoint (``Entrypoint``)
    and the runtime environment (``NUM_EPOCHS`` / ``EPOCHS``; packages to install first). Duration = the
    entrypoint's sleeps plus ``EPOCH_SECONDS`` per epoch, ``DEFAULT_DURATION`` when it says neither, after
    ``RUNTIME_ENV_SETUP`` when there are packages to install; a non-zero ``exit`` fails the Ray job
    (``AppFailed``). The test-only ``kubesim.dev/*`` annotations override duration and outcome.
    """

    duration: float = DEFAULT_DURATION
    outcome: str = "Succeeded"
    epochs: int | None = None
    exit_code: int = 0
    simulated_failure: bool = False
    """The failure comes from the test-only outcome annotation (the driver raises), not the entrypoint."""
    setup: float = 0.0
    """Simulated seconds the job stays PENDING while Ray installs its runtime environment."""

    @classmethod
    def for_attempt(cls, rayjob: dict | None, failed_so_far: int) -> Behaviour:
        """``failed_so_far`` is ``status.failed``: attempts before it that failed (preemptions do not count)."""
        rayjob = rayjob or {}
        spec = rayjob.get("spec") or {}
        annotations = (rayjob.get("metadata") or {}).get("annotations") or {}
        entrypoint = Entrypoint.parse(spec.get("entrypoint") or "")
        epochs = entrypoint.epochs
        if epochs is None:
            epochs = runtime_env_epochs(spec.get("runtimeEnvYAML"))
        duration = entrypoint.sleep + (epochs or 0) * EPOCH_SECONDS
        if entrypoint.sleep == 0 and not epochs:
            duration = DEFAULT_DURATION
        outcome, exit_code, simulated = "Succeeded", entrypoint.exit_code, False
        if exit_code != 0:
            outcome = "AppFailed"
        if OUTCOME in annotations:
            outcome = annotations[OUTCOME] if annotations[OUTCOME] in OUTCOMES else "Succeeded"
            exit_code, simulated = (1, True) if outcome == "AppFailed" else (0, False)
        try:
            fail_attempts = int(annotations.get(FAIL_ATTEMPTS, "0"))
        except ValueError:
            fail_attempts = 0
        if fail_attempts > 0:
            failing = failed_so_far < fail_attempts
            outcome, exit_code, simulated = ("AppFailed", 1, True) if failing else ("Succeeded", 0, False)
        if DURATION in annotations:
            duration = seconds(annotations.get(DURATION), DEFAULT_DURATION)
        return cls(
            duration=duration,
            outcome=outcome,
            epochs=epochs,
            exit_code=exit_code,
            simulated_failure=simulated,
            setup=runtime_env_setup_seconds(spec.get("runtimeEnvYAML")),
        )


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

    def list_jobs(self, namespace: str, cluster: str) -> list[RayJobRun]:
        return list(self._jobs.get((namespace, cluster), {}).values())

    def delete_job(self, namespace: str, cluster: str, job_id: str) -> bool:
        """``DeleteJob``: forgets a finished job (Ray refuses to delete one that has not ended)."""
        run = self.get_job(namespace, cluster, job_id)
        if run is None or not run.finished:
            return False
        del self._jobs[(namespace, cluster)][job_id]
        return True

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
            await self._clock.sleep(PENDING_FOR + run.behaviour.setup)
            run.status, run.message, run.start_time = (
                "RUNNING",
                "Job is currently running.",
                self._clock.now(),
            )
            self._on_change(namespace, cluster)
            for line in _driver_preamble(namespace, cluster, run):
                run.emit(line)
            await self._run(run)
            behaviour = run.behaviour
            if behaviour.outcome == "AppFailed":
                for line in _traceback(run) if behaviour.simulated_failure else ():
                    run.emit(line)
                message = (
                    f"Job entrypoint command failed with exit code {behaviour.exit_code}, last available logs "
                    "(truncated to 20,000 chars):\n" + "\n".join(run.lines[-10:])
                )
                self._finish(namespace, cluster, run, "FAILED", message)
                run.emit(f"Job '{run.job_id}' failed")
            else:
                if behaviour.epochs:
                    run.emit("Training finished.")
                self._finish(namespace, cluster, run, "SUCCEEDED", "Job finished successfully.")
                run.emit(f"Job '{run.job_id}' succeeded")

    async def _run(self, run: RayJobRun) -> None:
        """Spend the job's duration: one line per epoch when it trains epochs, progress lines when it runs
        for an unknown reason (nothing said how long), silence when it only sleeps."""
        behaviour = run.behaviour
        duration = behaviour.duration
        if behaviour.epochs:
            per_epoch = duration / behaviour.epochs
            for epoch in range(1, behaviour.epochs + 1):
                await self._clock.sleep(per_epoch)
                loss = 2.3 * (0.85**epoch)
                run.emit(
                    f"epoch {epoch}/{behaviour.epochs} step={epoch * 100} loss={loss:.4f} "
                    "throughput=1280 samples/s"
                )
            return
        quiet = Entrypoint.parse(run.entrypoint).sleep > 0
        step, remaining = 0, duration
        while remaining > 0:
            wait = remaining if quiet else min(PROGRESS_EVERY, remaining)
            await self._clock.sleep(wait)
            remaining -= wait
            step += 1
            if not quiet:
                run.emit(f"step={step * 100} loss={2.3 * (0.85**step):.4f} throughput=1280 samples/s")


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
