"""Three triggerers (issue 33): 3 × N deferred RayJob waits spread over three triggerer processes, as the
Helm values deploy them (``triggerer.replicas: 3``), against one kubesim.

One run per N against one kubesim subprocess (time-scale 1: a simulated minute is a minute), through the
shared harness (``bench.harness``):

1. Setup: the trigger benchmark's 1-CPU ClusterQueue held by a blocker, then 3 × N RayJobs queued behind
   it. Triggerer k waits on RayJobs k, k + 3, k + 6, ...: Airflow hands triggers to triggerers in no
   order of their RayJobs, so each triggerer holds a third of every admission wave.
2. Startup: the three ``bench.trigger_worker`` processes (N ``RayJobTrigger``s each, on one loop, as a
   triggerer runs them) started one after another, each until its watch streams are open and kubesim was
   quiet for 3 s: requests and watch streams per triggerer, RSS.
3. Waiting: all three wait for ``window_s``: requests per minute, watch streams open in all.
4. Waves: quota for ``detect_n`` RayJobs at once, until ``detect_n`` triggers fired across the three;
   detection latency = the TriggerEvent's wall time − a raw watch seeing ``Complete``, per triggerer and
   together, and in two parts: until the triggerer's hub saw it (delivery: kubesim's fan-out and the
   triggerer's loop reading its stream), and from there to the event (the trigger's own part). Then the
   quota is the blocker's alone again and kubesim settles.
5. Restart: triggerer 0 is killed (SIGKILL, as a crashed or evicted pod's process), ``restart_n`` more
   RayJobs run and complete while it is down (a third of them its own), then a new process starts its
   triggers that had not fired, as the same deferred tasks resumed by a restarted triggerer. What it costs
   the API server: kubesim's requests from its start to a minute after, by verb and resource (a read of
   one object would mean a cost per task; a list is read in pages of 500, so its pages follow the objects
   in the namespace); what it costs the tasks: for each of its RayJobs that completed while it was down,
   the new process's start → its TriggerEvent, and the same from the moment its imports were done and
   its triggers started (the downtime itself is the deployment's: Airflow's triggerer heartbeat, the
   pod's restart).

Run it with ``python -m bench.run --only triggerers`` (the quick profile: N = 1,000 per triggerer; the full
profile: N = 1,000 and 10,000, whose restarts side by side say whether a restart grows with N).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path

from bench.harness.accounting import by_verb, delta, requests_of, settled, streams_closed
from bench.harness.cluster import observe_terminal, raise_quota, setup_jobs
from bench.harness.phases import Phases, wait_until
from bench.harness.triggers import STREAMS, start_triggers, waves, write_spec
from bench.harness.workers import (
    LOG_DIR,
    ROOT,
    Worker,
    fresh_workdir,
    in_kubesim,
    kubeconfig_for,
    log_warnings,
    worker_env,
)
from bench.kube import Api, connect
from bench.stats import summary_ms

TRIGGERERS = 3
"""The Helm values' ``triggerer.replicas``."""
TARGETS = {
    "max_streams_per_triggerer": 2,
    "max_peak_rss_mib_at_10000": 300,
    "max_object_reads_after_restart": 0,
}
"""Issue 33's targets: ≤ 2 watches per triggerer per namespace; < 300 MiB per triggerer at 10,000; a
restart costs O(resources), not O(tasks): no read of one RayJob or Workload, only lists and watches."""
RESTART_WINDOW_S = 60.0
"""The minute after a triggerer's restart whose requests are counted (from its process's start)."""
SETTLE_TIMEOUT_S = 300.0
"""How long kubesim may take to go quiet after the waves (or the downtime) before the run goes on without
it: 181-205 s at 3 × 10,000 with the plugin as in run AF."""


async def settle(api: Api, timeout_s: float = SETTLE_TIMEOUT_S) -> tuple[dict, bool]:
    """kubesim's stats once no request and no write came for 3 s, and True; or its stats at ``timeout_s``
    and False, so that a run whose aftermath is slow still reports every other figure, and says so (it
    lost them all before)."""
    try:
        return await api.quiet(quiet_s=3.0, timeout_s=timeout_s), True
    except TimeoutError:
        return await api.stats(), False


def shares(jobs: list[dict], triggerers: int = TRIGGERERS) -> list[list[dict]]:
    """Triggerer k's RayJobs: every ``triggerers``-th from the k-th, so each holds a part of every wave.

    >>> shares([{"name": str(i)} for i in range(7)], 3)
    [[{'name': '0'}, {'name': '3'}, {'name': '6'}], [{'name': '1'}, {'name': '4'}], [{'name': '2'}, {'name': '5'}]]
    """
    return [jobs[k::triggerers] for k in range(triggerers)]


RESTARTED_USER = "system:serviceaccount:bench:triggerer-0-restarted"
"""Who the restarted triggerer authenticates as in kubesim's request log (a token of its own)."""


def object_reads(requests_by_verb: dict) -> int:
    """Reads of single RayJobs or Workloads among ``by_verb`` counts: the requests that would grow with
    the tasks a triggerer holds.

    >>> object_reads({"get rayjobs.ray.io": 2, "list rayjobs.ray.io": 1, "get workloads.kueue.x-k8s.io": 1})
    3
    """
    return sum(
        count
        for key, count in requests_by_verb.items()
        if key in ("get rayjobs.ray.io", "get workloads.kueue.x-k8s.io")
    )


QUEUE_READS = frozenset(
    {
        "get localqueues.visibility.kueue.x-k8s.io/pendingworkloads",
        "get localqueues.kueue.x-k8s.io",
        "get clusterqueues.kueue.x-k8s.io",
    }
)
"""The reads a triggerer repeats per LocalQueue while its tasks queue, however many: the queue positions
(fresh for ``HubSettings.pending_workloads_ttl_seconds``) and the ClusterQueue behind the LocalQueue
(``trigger_story.QUEUE_STATE_TTL_SECONDS``), each shared by every trigger waiting in the queue. They follow
the time a start takes, not its tasks: a start slowed by a loaded machine makes one more round of them."""


def beyond_queue_reads(requests_by_verb: dict) -> dict:
    """``by_verb`` counts without the periodic ``QUEUE_READS``: what a start costs by the resources it
    lists and watches.

    >>> beyond_queue_reads({"list rayjobs.ray.io": 1, "get localqueues.kueue.x-k8s.io": 2})
    {'list rayjobs.ray.io': 1}
    """
    return {key: count for key, count in requests_by_verb.items() if key not in QUEUE_READS}


async def run_while_down(api: Api, url: str, cpu: int, count: int, seen: dict[str, float]) -> None:
    """Let ``count`` more queued RayJobs run (quota for them beside the blocker) and wait until a raw watch
    saw each complete, then give the quota back to the blocker alone."""
    stop = asyncio.Event()
    observer = asyncio.ensure_future(observe_terminal(url, seen, stop))
    await asyncio.sleep(0.5)
    before = len(seen)
    await raise_quota(api, cpu)

    async def completed() -> bool:
        return len(seen) - before >= count

    await wait_until(completed, timeout_s=600)
    await raise_quota(api, 1)
    stop.set()
    await observer


async def measure(
    url: str,
    kubeconfig: str,
    n: int,
    *,
    workdir: Path,
    triggerers: int = TRIGGERERS,
    window_s: float = 60.0,
    detect_n: int = 1000,
    restart_n: int = 300,
    restart_window_s: float = RESTART_WINDOW_S,
    settle_timeout_s: float = SETTLE_TIMEOUT_S,
    plugins: Path = ROOT / "plugins",
) -> dict:
    """One N per triggerer: set up, start the triggerers, wait, the waves, then one triggerer's restart;
    the triggerers run the plugin in ``plugins`` (another checkout's, for a side-by-side run)."""
    env = worker_env(kubeconfig, plugins=plugins)
    phases = Phases()
    async with connect(url) as api:
        jobs = await setup_jobs(api, n * triggerers, phases)
        specs = [
            write_spec(workdir / f"triggerer-{k}.json", share)
            for k, share in enumerate(shares(jobs, triggerers))
        ]
        logs = [workdir / f"triggerer-{k}.log" for k in range(triggerers)]

        # -- startup, one triggerer after another --
        startups = []
        for k in range(triggerers):
            startups.append(await start_triggers(api, specs[k], env, logs[k], phases, phase=f"startup_{k}"))
        workers = [startup.worker for startup in startups]
        per_triggerer = [
            {
                "requests": delta(startup.started, startup.before, api),
                "by_verb": by_verb(startup.started, startup.before),
                "streams": startup.started["watches_open"] - startup.before["watches_open"],
                "rss_mib_after_imports": (startup.reply.get("imported") or {}).get("rss_mib"),
                "rss_mib_after_startup": startup.usage["usage"]["rss_mib"],
            }
            for startup in startups
        ]

        # -- everything waits --
        mark = await api.stats()
        await asyncio.sleep(window_s)
        waited = await api.stats()
        phases.mark("waiting")
        waiting = {
            "window_s": window_s,
            "requests": delta(waited, mark, api),
            "requests_per_min": round(delta(waited, mark, api) * 60 / window_s, 1),
            "by_verb": by_verb(waited, mark),
            "streams_open": waited["watches_open"] - startups[0].before["watches_open"],
        }

        # -- detect_n completions across the three --
        waves_from = time.time()
        seen, done = await waves(api, url, workers, phases, cpu=1 + detect_n, fire=detect_n)
        waves_to = time.time()
        await raise_quota(api, 1)
        wave_latencies = [worker.latencies(seen) for worker in workers]
        parts = [worker.detection_parts(seen) for worker in workers]
        settled_after_waves, quiet_after_waves = await settle(api, settle_timeout_s)
        phases.mark("waves_settle")

        # -- triggerer 0 restarts: killed, RayJobs complete meanwhile, a new process takes its triggers --
        usage_before_kill = await workers[0].usage()
        fired_before_kill = set().union(*(worker.fired for worker in workers))
        open_before = (await api.stats())["watches_open"]
        killed_at = time.time()
        workers[0].kill()
        await streams_closed(api, open_before - STREAMS)
        phases.mark("kill")
        down_seen: dict[str, float] = {}
        await run_while_down(api, url, 1 + restart_n, restart_n, down_seen)
        _, quiet_after_down = await settle(api, settle_timeout_s)
        phases.mark("down")
        fired_before = set(workers[0].fired)
        remaining = [job for job in shares(jobs, triggerers)[0] if job["name"] not in fired_before]
        if not set(job["name"] for job in remaining) - set(down_seen):
            raise ValueError(
                f"triggerer 0 has nothing left to wait for after its downtime (N = {n} per triggerer, "
                f"detect_n = {detect_n}, restart_n = {restart_n}): a restart with no waiting trigger opens no "
                "watch; raise N or lower detect_n / restart_n"
            )
        deferred_at = json.loads((workdir / "triggerer-0.json").read_text())["deferred_at"]
        spec = write_spec(workdir / "triggerer-0-restarted.json", remaining, deferred_at=deferred_at)
        # Its own identity, so its first minute counts its requests alone: the other two triggerers' safety
        # relists (every resync_interval) can fall into that minute too.
        token = secrets.token_hex(16)
        await api.create("/kubesim/users", {token: RESTARTED_USER})
        own_env = worker_env(
            kubeconfig_for(kubeconfig, token, workdir / "restarted.kubeconfig"), plugins=plugins
        )
        before = await api.stats()
        restarted_at = time.time()
        restarted = Worker("bench.trigger_worker", spec, own_env, workdir / "triggerer-0-restarted.log")
        await restarted.start()
        triggers_at = time.time()  # its imports done and its triggers started: its first protocol line
        await settled(api, streams=before["watches_open"] + STREAMS)
        started_at = time.time()
        await asyncio.sleep(max(0.0, restart_window_s - (time.time() - restarted_at)))
        after = await api.stats()
        log = await api.get("/kubesim/requests")
        phases.mark("restart_minute")
        first_minute = requests_of(log, RESTARTED_USER)
        startup = requests_of(log, RESTARTED_USER, until=started_at)
        its_own = {job["name"] for job in remaining} & set(down_seen)
        caught_up = [restarted.fired[name][0] - restarted_at for name in its_own if name in restarted.fired]
        after_imports = [
            restarted.fired[name][0] - triggers_at for name in its_own if name in restarted.fired
        ]
        restart = {
            "killed_at": killed_at,
            "down_s": round(restarted_at - killed_at, 1),
            "quiet_before": quiet_after_down,
            "triggers": len(remaining),
            "completed_while_down": len(set(down_seen) - fired_before_kill),
            "its_own_completed_while_down": len(its_own),
            "its_own_fired_after_restart": len(caught_up),
            "startup_s": round(started_at - restarted_at, 2),
            "startup_requests": sum(startup.values()),
            "startup_by_verb": startup,
            "window_s": restart_window_s,
            "requests_first_minute": sum(first_minute.values()),
            "first_minute_by_verb": first_minute,
            "object_reads_first_minute": object_reads(first_minute),
            "watches_opened_first_minute": len(restarted.watch_opens),  # the log names a watch once it ends
            # everyone's in that minute, the other triggerers' safety relists included
            "all_requests_first_minute": delta(after, before, api),
            "all_first_minute_by_verb": by_verb(after, before),
            "imports_s": round(triggers_at - restarted_at, 2),
            "catch_up": summary_ms(caught_up),
            "catch_up_after_imports": summary_ms(after_imports),
            "rss_mib_after_startup": (await restarted.usage())["usage"]["rss_mib"],
            "peak_rss_mib_before_kill": usage_before_kill["usage"]["peak_rss_mib"],
            # each watch request of its hub that ended in its first minute, and how: why it listed again
            "watch_ends_first_minute": [
                {key: end[key] for key in ("resource", "lasted_s", "ended")} for end in restarted.watch_ends
            ],
        }

        finals = [None] + [await worker.stop() for worker in workers[1:]]
        final_restarted = await restarted.stop()
        phases.mark("stop")

    for k, row in enumerate(per_triggerer):
        row["peak_rss_mib"] = (
            usage_before_kill["usage"]["peak_rss_mib"] if k == 0 else finals[k]["final"]["peak_rss_mib"]
        )
        row["fired_in_waves"] = len(wave_latencies[k])
        row["detection_latency"] = summary_ms(wave_latencies[k])
        row["stalled_in_waves"] = workers[k].stalled(waves_from, waves_to)
        row["log_warnings"] = log_warnings(logs[k])
    restart["peak_rss_mib"] = final_restarted["final"]["peak_rss_mib"]
    restart["log_warnings"] = log_warnings(workdir / "triggerer-0-restarted.log")
    return {
        "n_per_triggerer": n,
        "triggerers": triggerers,
        "waits": n * triggerers,
        "workdir": str(workdir),
        "phases": phases.durations(),
        "per_triggerer": per_triggerer,
        "waiting": waiting,
        "waves": {
            "fired": sum(len(latencies) for latencies in wave_latencies),
            "requests": delta(done, waited, api) - 1,  # minus the raw watch's initial list
            "by_verb": by_verb(done, waited),
            "requests_until_settled": delta(settled_after_waves, waited, api) - 1,
            "quiet_after": quiet_after_waves,
            "detection_latency": summary_ms([t for latencies in wave_latencies for t in latencies]),
            # detection in two parts: the raw watch → the triggerer's hub saw it; the hub → the event
            "delivery": summary_ms([t for delivery, _ in parts for t in delivery]),
            "trigger_part": summary_ms([t for _, own in parts for t in own]),
        },
        "restart": restart,
    }


def verdicts(row: dict) -> list[dict]:
    """Issue 33's three-triggerer targets against one N's figures (None: no target at this N)."""
    streams = [t["streams"] for t in row["per_triggerer"]]
    peaks = [t["peak_rss_mib"] for t in row["per_triggerer"]]
    restart = row["restart"]
    at_10k = row["n_per_triggerer"] >= 10000
    return [
        {
            "target": f"≤ {TARGETS['max_streams_per_triggerer']} watch streams per triggerer (one namespace)",
            "measured": f"{streams} (all open while waiting: {row['waiting']['streams_open']})",
            "ok": max(streams) <= TARGETS["max_streams_per_triggerer"],
        },
        {
            "target": f"< {TARGETS['max_peak_rss_mib_at_10000']} MiB per triggerer at 10,000",
            "measured": f"peak {peaks} MiB",
            "ok": max(peaks) < TARGETS["max_peak_rss_mib_at_10000"] if at_10k else None,
        },
        {
            "target": "a restart costs O(resources), not O(tasks): no read of a single object",
            "measured": f"{restart['requests_first_minute']} requests in the minute after "
            f"({restart['first_minute_by_verb']}) for {restart['triggers']} triggers",
            "ok": restart["object_reads_first_minute"] <= TARGETS["max_object_reads_after_restart"],
        },
    ]


def run_one(n: int, *, log_dir: Path = LOG_DIR, time_scale: float = 1.0, name: str = "", **settings) -> dict:
    """One N per triggerer against a fresh kubesim; the workers' logs stay in
    ``log_dir``/triggerers-<N><name>."""
    workdir = fresh_workdir(log_dir, f"triggerers-{n}{name}")

    async def one(url: str, kubeconfig: str) -> dict:
        return await measure(url, kubeconfig, n, workdir=workdir, **settings)

    return in_kubesim(one, time_scale=time_scale)


def run(sizes: tuple[int, ...] = (1000,), **settings) -> dict:
    """Every N per triggerer in turn, each against its own kubesim."""
    rows: list[dict] = []
    for n in sizes:
        try:
            row = run_one(n, **settings)
        except Exception as exc:  # noqa: BLE001 - the other sizes still measure
            rows.append({"n_per_triggerer": n, "error": f"{type(exc).__name__}: {exc}"})
            continue
        row["verdicts"] = verdicts(row)
        rows.append(row)
    return {"rows": rows, "targets": TARGETS, "log_dir": str(settings.get("log_dir", LOG_DIR))}


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.triggerers --before DIR``: the same run with another checkout's plugin first, then
    this one's, printed side by side (``bench.run --only triggerers`` runs this checkout's alone)."""
    import argparse
    import json

    from bench.report import render_triggerers

    parser = argparse.ArgumentParser(prog="python -m bench.triggerers", description=main.__doc__)
    parser.add_argument("--before", required=True, help="a checkout whose plugins/ runs first")
    parser.add_argument("--n", type=int, default=1000, help="waits per triggerer")
    parser.add_argument("--detect-n", type=int, default=1000)
    parser.add_argument("--restart-n", type=int, default=300)
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--out", help="write the JSON result here")
    args = parser.parse_args(argv)
    settings = {"window_s": args.window, "detect_n": args.detect_n, "restart_n": args.restart_n}
    result = {}
    for label, plugins in (("before", Path(args.before) / "plugins"), ("after", ROOT / "plugins")):
        row = run_one(args.n, name=f"-{label}", plugins=plugins, **settings)
        row["verdicts"] = verdicts(row)
        result[label] = {"rows": [row], "plugins": str(plugins)}
        print(f"## {label}: {plugins}\n")
        print("\n".join(render_triggerers(result[label])) + "\n", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    import sys

    from devtools.signals import stop_on_signals

    stop_on_signals()  # a benchmark stopped with kill stops its kubesim and trigger processes
    sys.exit(main())
