"""The measured process of the trigger benchmark: N RayJobTriggers on one event loop, as a triggerer runs them.

Run as ``python -m bench.trigger_worker JOBS.json LOG`` with ``AIRFLOW_CONN_KUBERNETES_DEFAULT`` pointing at
kubesim. ``JOBS.json`` is ``{"namespace", "queue", "resync_interval", "deferred_at", "jobs": [{"name",
"uid"}]}``, with ``"kind": "rayservice"`` for ``RayServiceTrigger``s (``bench.service_waits``) instead of
``RayJobTrigger``s.

It talks to its parent over pipes, so the parent can cut the run into phases without touching this
process's CPU or memory: each fired TriggerEvent is one stdout line ``{"fired", "t", "status"}`` (``t`` is
the wall time the event was yielded); a ``usage`` line on stdin answers ``{"usage": {...}}`` with the CPU
seconds and RSS so far; ``quit`` (or EOF) ends the process. Trigger log lines go to a file at INFO, as the
triggerer writes task logs, so their formatting cost is counted.

Every watch request of the hub is reported as one line ``{"watch_open": {...}}`` when it starts (kubesim's
request log names a watch only once it ends) and one ``{"watch_end": {...}}`` when it ends: the resource,
the ``timeoutSeconds`` it asked for, when it opened, how long it lasted and how it ended (the hub returns
quietly when the server ends a stream, when its own deadline passes and when the client's request timeout
raises TimeoutError, so only the duration tells them apart). That is how the benchmark explains a watch
re-opened while it measures.

Each pass of the event loop that held it longer than ``STALL_REPORT_S`` is reported as ``{"stall"}``.

The first watch event in which the hub sees a RayJob terminal is reported as one line ``{"hub_seen",
"t"}``: detection (a raw watch seeing it → the TriggerEvent) splits there into the delivery to this
process's watch and the trigger's own part.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

from bench.harness.protocol import DONE, emit, read_commands, take_stdout, usage


def report_watch_ends() -> None:
    """Wrap the hub's single-watch method so each watch request's end is reported (see the module doc).

    The wrapper only times and forwards the call; the hub behaves exactly as it does in a triggerer.
    """
    from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import API_TIMEOUT
    from kueue_ray.hub.scope import _WatchLoop
    from kueue_ray.kube.watch_target import SERVER_TIMEOUT_GRACE_SECONDS

    watch = _WatchLoop._watch

    async def timed_watch(loop: _WatchLoop, api, timeout: int) -> bool:
        opened_wall, opened = time.time(), time.monotonic()
        emit({"watch_open": {"resource": loop.resource.plural, "opened": round(opened_wall, 3)}})
        ended = "returned"
        try:
            return await watch(loop, api, timeout)
        except BaseException as exc:
            ended = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise
        finally:
            emit(
                {
                    "watch_end": {
                        "resource": loop.resource.plural,
                        "timeout_s": timeout,
                        "grace_s": SERVER_TIMEOUT_GRACE_SECONDS,
                        # the total timeout the cncf ApiClient puts on a request whose call_api sees no
                        # timeout_seconds keyword (a watch passes it as a query parameter)
                        "client_timeout_s": API_TIMEOUT,
                        "opened": round(opened_wall, 3),
                        "lasted_s": round(time.monotonic() - opened, 3),
                        "ended": ended,
                    }
                }
            )

    _WatchLoop._watch = timed_watch


def report_terminal_seen() -> None:
    """Wrap the watch loops' event method so the hub's first sight of each RayJob's terminal status is
    reported (see the module doc). The wrapper only looks and forwards the call."""
    from kueue_ray.hub.resources import RAYJOB
    from kueue_ray.hub.scope import _WatchLoop

    apply_event = _WatchLoop.apply_event
    reported: set[str] = set()

    def seen(loop: _WatchLoop, kind: str, obj: dict) -> None:
        if loop.resource.kind == RAYJOB and kind != "DELETED":
            name = (obj.get("metadata") or {}).get("name")
            if name not in reported and (obj.get("status") or {}).get("jobDeploymentStatus") in DONE:
                reported.add(name)
                emit({"hub_seen": name, "t": time.time()})
        apply_event(loop, kind, obj)

    _WatchLoop.apply_event = seen


STALL_REPORT_S = 0.1
"""A pass of the event loop longer than this is reported as ``{"stall": {"t", "s"}}`` (its end, its length)."""


async def report_stalls(interval_s: float = 0.05) -> None:
    """Measure the event loop's lateness: a task that asks to wake every ``interval_s`` and reports each
    wake later than ``STALL_REPORT_S``: the time no other coroutine (a watch stream's reader among them)
    could run."""
    while True:
        asked = time.monotonic()
        await asyncio.sleep(interval_s)
        late = time.monotonic() - asked - interval_s
        if late > STALL_REPORT_S:
            emit({"stall": {"t": round(time.time(), 3), "s": round(late, 3)}})


PROFILE_ENV = "BENCH_CPROFILE"
"""Set (to anything) to profile the worker with cProfile from its triggers' start to its end, written next
to the log (``LOG.prof``): where the loop's time goes. Profiling slows the worker, so not for figures."""


TRACEMALLOC_ENV = "BENCH_TRACEMALLOC"
"""Set (to anything) to trace allocations made after the imports: each ``usage`` command then writes the
live allocations by source line next to the log (``LOG.allocations-<fired>-fired.txt``); set to a number
above 1, also the largest by call chain of that many frames (who made what stays alive). Tracing slows
the worker and adds to its RSS, so its figures are not the benchmark's; it says where the memory goes."""


def tracemalloc_frames() -> int:
    """How many frames ``BENCH_TRACEMALLOC`` asks to keep per allocation (1 unless a number above it)."""
    value = os.environ.get(TRACEMALLOC_ENV, "")
    return int(value) if value.isdigit() and int(value) > 1 else 1


def write_allocations(path: Path, top: int = 40) -> None:
    snapshot = tracemalloc.take_snapshot()
    by_line = snapshot.statistics("lineno")
    by_file = snapshot.statistics("filename")
    total = sum(stat.size for stat in by_line)
    lines = [
        f"live allocations traced since the imports: {total / 2**20:.1f} MiB in {len(by_line)} lines",
        "",
    ]
    lines += ["by file:"] + [
        f"{s.size / 2**20:8.2f} MiB {s.count:9d} blocks  {s.traceback}" for s in by_file[:top]
    ]
    lines += ["", "by line:"] + [
        f"{s.size / 2**20:8.2f} MiB {s.count:9d} blocks  {s.traceback}" for s in by_line[:top]
    ]
    if tracemalloc.get_traceback_limit() > 1:
        lines += ["", "by call chain (innermost last):"]
        for stat in snapshot.statistics("traceback")[:top]:
            lines += [f"{stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks"]
            lines += [f"        {frame.filename}:{frame.lineno}" for frame in stat.traceback]
    path.write_text("\n".join(lines) + "\n")


async def wait_one(trigger, fired: list) -> None:
    async for event in trigger.run():
        fired.append(trigger.name)
        emit({"fired": trigger.name, "t": time.time(), "status": event.payload.get("status")})
        return


def make_triggers(spec: dict) -> list:
    """One trigger per job of the spec, as the operator would defer to it."""
    from kueue_ray.rayservice.trigger import RayServiceTrigger
    from kueue_ray.trigger import RayJobTrigger
    from kueue_ray.wait_policy import WaitPolicy

    policy = WaitPolicy(fail_on_inadmissible=False, resync_interval=spec["resync_interval"])
    common = {
        "namespace": spec["namespace"],
        "queue": spec["queue"],
        "policy": policy,
        "deferred_at": spec.get("deferred_at"),
    }
    if spec.get("kind") == "rayservice":
        return [
            RayServiceTrigger(
                name=job["name"],
                uid=job["uid"],
                generation=job.get("generation"),
                **common,
            )
            for job in spec["jobs"]
        ]
    return [RayJobTrigger(name=job["name"], uid=job["uid"], **common) for job in spec["jobs"]]


MALLOC_TRIM_ENV = "BENCH_MALLOC_TRIM"
"""Set (to anything) to answer each ``usage`` command also with the usage after glibc's ``malloc_trim(0)``
(``after_trim``): how much of the RSS is freed memory the allocator kept rather than live objects. The
trim changes the process, so a figure read after one is not the benchmark's."""


def trimmed_usage() -> dict:
    """The usage after returning the allocator's free pages to the system (glibc only)."""
    import ctypes

    ctypes.CDLL("libc.so.6").malloc_trim(0)
    return usage()


RSS_TRACE_ENV = "BENCH_RSS_TRACE"
"""Set (to anything) to sample the RSS every 50 ms after the imports into ``LOG.rss`` (seconds since the
imports, MiB): when the peak happens. A thread of the worker's, so only for finding out, not for figures."""


def trace_rss(path: str) -> None:
    with open(path, "w") as out:
        started = time.monotonic()
        while True:
            out.write(f"{time.monotonic() - started:.2f} {usage()['rss_mib']}\n")
            out.flush()
            time.sleep(0.05)


async def main(spec_path: str, log_path: str) -> None:
    from kueue_ray.hook import AsyncRayJobHook  # noqa: F401 - the hub's first request imports it anyway
    from kueue_ray.rayservice.trigger import RayServiceTrigger  # noqa: F401 - imported before measuring
    from kueue_ray.trigger import RayJobTrigger  # noqa: F401 - imported before measuring

    # What the imports cost (Airflow, the provider, both Kubernetes clients) before any trigger exists.
    imported = usage()
    if os.environ.get(RSS_TRACE_ENV):
        threading.Thread(target=trace_rss, args=(f"{log_path}.rss",), daemon=True).start()
    if os.environ.get(TRACEMALLOC_ENV):
        tracemalloc.start(tracemalloc_frames())
    take_stdout(log_path)
    report_watch_ends()
    report_terminal_seen()
    spec = json.loads(Path(spec_path).read_text())
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    triggers = make_triggers(spec)
    profile = None
    if os.environ.get(PROFILE_ENV):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    stalls = asyncio.create_task(report_stalls())
    fired: list[str] = []
    tasks = [asyncio.create_task(wait_one(trigger, fired)) for trigger in triggers]
    commands: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    threading.Thread(target=read_commands, args=(loop, commands), daemon=True).start()
    emit({"started": len(tasks), "usage": usage(), "imported": imported})
    while True:
        command = await commands.get()
        if command == "usage":
            reply = {"usage": usage(), "fired_total": len(fired)}
            if os.environ.get(MALLOC_TRIM_ENV):
                reply["after_trim"] = trimmed_usage()
            emit(reply)
            if tracemalloc.is_tracing():
                write_allocations(Path(f"{log_path}.allocations-{len(fired)}-fired.txt"))
        elif command == "quit":
            break
    for task in [*tasks, stalls]:
        task.cancel()
    await asyncio.gather(*tasks, stalls, return_exceptions=True)
    if profile is not None:
        profile.disable()
        profile.dump_stats(f"{log_path}.prof")
    emit({"final": usage()})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "/dev/null"))
