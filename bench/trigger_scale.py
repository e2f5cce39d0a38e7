"""Trigger scale (issue 7 §1): N RayJobTriggers waiting on N queued RayJobs, against a polling baseline.

One run, per N, against one kubesim subprocess (its CPU is not ours):

1. Setup: a ClusterQueue whose quota (1 CPU) is held by a ``blocker`` RayJob that runs forever, then N
   RayJobs of 1 CPU each queued behind it (QuotaReserved=False, Pending: "insufficient unused quota").
2. Polling baseline: ``bench.polling_worker`` (one GET per job per 10 s through ``AsyncKubernetesHook``,
   as the cncf ``KubernetesJobTrigger``) runs for a real window while everything waits. kubesim's request
   delta divided by the GETs it issued gives its requests per poll; its 10-simulated-minute count is
   ``requests_per_poll × N × 600 s / 10 s``.
3. ``bench.trigger_worker`` starts N ``RayJobTrigger``s on one loop. Startup traffic is counted until
   kubesim is quiet; then two waiting windows of different length count what waiting alone costs. The
   safety-net resync (the watch hub's relist of the namespace, every ``resync_interval``) is too rare for
   those windows; a probe process with a short interval measures what one costs.
4. Waves: the ClusterQueue quota is raised so N/4 RayJobs run at a time; as they finish, the next quarter
   is admitted, and so on until every trigger fired. A separate raw watch in this process records when
   each RayJob's terminal status (Complete) reached a watcher; the detection latency is the trigger's
   TriggerEvent wall time minus that.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp

from bench.kube import KUEUE, RAY, Api
from bench.stats import summary_ms
from bench.trigger_worker import PREFIX
from kubesim.testing import run_kubesim

ROOT = Path(__file__).resolve().parents[1]
CRDS_DIR = ROOT.parent / "shared" / "crds"
NAMESPACE = "bench"
QUEUE = "bench-lq"
CLUSTER_QUEUE = "bench-cq"
FLAVOR = "bench-flavor"
MANAGED = {"app.kubernetes.io/managed-by": "airflow-kueue-ray", "kueue.x-k8s.io/queue-name": QUEUE}
SIMULATED_MINUTES = 10
POLL_INTERVAL_S = 10.0
DEFAULT_RESYNC_S = 300.0
"""RayJobTrigger's default ``resync_interval`` (kueue_ray.hub.DEFAULT_RESYNC_SECONDS): the hub's relist period."""
REPLY_TIMEOUT_S = 600.0
RESYNC_PROBE_JOBS = 100
RESYNC_PROBE_S = 6.0
DONE = frozenset({"Complete", "Failed"})


def rayjob(name: str, *, managed: bool, duration: str) -> dict:
    labels = dict(MANAGED) if managed else {"kueue.x-k8s.io/queue-name": QUEUE}
    requests = {"cpu": "1", "memory": "1Gi"}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"kubesim.dev/duration": duration, "kubesim.dev/startup": "1"},
        },
        "spec": {
            "entrypoint": "python train.py",
            "submissionMode": "HTTPMode",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "ray-head",
                                    "image": "rayproject/ray:2.52.0",
                                    "resources": {"requests": requests, "limits": requests},
                                }
                            ]
                        }
                    },
                }
            },
        },
    }


def _cluster_queue_quota(cpu: int) -> dict:
    return {
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": FLAVOR,
                            "resources": [
                                {"name": "cpu", "nominalQuota": str(cpu)},
                                {"name": "memory", "nominalQuota": f"{cpu}Gi"},
                            ],
                        }
                    ],
                }
            ]
        }
    }


async def setup_queue(api: Api) -> None:
    await api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    await api.create(
        f"{KUEUE}/resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
    )
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE}}
    cq["spec"] = {"namespaceSelector": {}, **_cluster_queue_quota(1)["spec"]}
    await api.create(f"{KUEUE}/clusterqueues", cq)
    await api.create(
        f"{KUEUE}/namespaces/{NAMESPACE}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE},
            "spec": {"clusterQueue": CLUSTER_QUEUE},
        },
    )


async def create_jobs(api: Api, n: int, *, duration: str, parallel: int = 16) -> list[dict]:
    """Create N managed RayJobs, a few requests at a time; their names and uids, in creation order."""
    gate = asyncio.Semaphore(parallel)

    async def one(i: int) -> dict:
        async with gate:
            created = await api.create(
                f"{RAY}/namespaces/{NAMESPACE}/rayjobs",
                rayjob(f"job-{i:05d}", managed=True, duration=duration),
            )
        return {"name": created["metadata"]["name"], "uid": created["metadata"]["uid"]}

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def wait_until(predicate, *, timeout_s: float, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(interval_s)


LIVE_WORKERS: list[Worker] = []
"""Every worker started, so `run_one` can end them all if the harness fails half-way."""


class Worker:
    """A child process speaking the line protocol of ``bench.trigger_worker`` / ``bench.polling_worker``."""

    def __init__(self, module: str, spec_path: Path, env: dict, log_path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, str(spec_path), str(log_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.fired: dict[str, tuple[float, str]] = {}
        self.replies: asyncio.Queue[dict] = asyncio.Queue()
        LIVE_WORKERS.append(self)

    async def start(self) -> dict:
        loop = asyncio.get_running_loop()

        def read() -> None:
            for line in self.process.stdout:
                if not line.startswith(PREFIX):
                    continue
                record = json.loads(line[len(PREFIX) :])
                if "fired" in record:
                    self.fired[record["fired"]] = (record["t"], record["status"])
                else:
                    loop.call_soon_threadsafe(self.replies.put_nowait, record)

        # A daemon thread, not asyncio.to_thread: a worker that never exits must not hang the harness.
        threading.Thread(target=read, daemon=True).start()
        return await asyncio.wait_for(self.replies.get(), REPLY_TIMEOUT_S)

    async def usage(self) -> dict:
        """The worker's CPU and RSS so far; a busy loop (1,000 pollers) may take a while to answer."""
        self.process.stdin.write("usage\n")
        self.process.stdin.flush()
        return await asyncio.wait_for(self.replies.get(), REPLY_TIMEOUT_S)

    async def stop(self) -> dict:
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        final = await asyncio.wait_for(self.replies.get(), REPLY_TIMEOUT_S)
        self.process.wait(timeout=60)
        return final

    def kill(self) -> None:
        """End the worker if it is still running (the harness failed half-way)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


async def observe_terminal(url: str, seen: dict[str, float], stop: asyncio.Event) -> None:
    """A raw watch of the managed RayJobs: the wall time each one's terminal status reached a watcher."""
    path = f"{url}{RAY}/namespaces/{NAMESPACE}/rayjobs"
    async with aiohttp.ClientSession() as session:
        async with session.get(path, params={"limit": "1"}) as response:
            rv = (await response.json())["metadata"]["resourceVersion"]
        params = {"watch": "true", "resourceVersion": rv, "labelSelector": "app.kubernetes.io/managed-by"}
        async with session.get(path, params=params, timeout=aiohttp.ClientTimeout(total=None)) as response:
            reader = asyncio.ensure_future(_read_terminal(response, seen))
            await stop.wait()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def _read_terminal(response, seen: dict[str, float]) -> None:
    async for line in response.content:
        received = time.time()
        obj = json.loads(line)["object"]
        name = obj["metadata"]["name"]
        if name not in seen and (obj.get("status") or {}).get("jobDeploymentStatus") in DONE:
            seen[name] = received


def _delta(after: dict, before: dict, api: Api) -> int:
    return api.foreign_requests(after) - api.foreign_requests(before)


async def measure(
    url: str,
    kubeconfig: str,
    n: int,
    *,
    windows: tuple[float, float],
    poll_window: float,
    resync_probe_s: float,
    workdir: Path,
) -> dict:
    env = {
        **os.environ,
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}
        ),
        "PYTHONPATH": f"{ROOT / 'plugins'}:{ROOT}",
    }
    connector = aiohttp.TCPConnector(limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:
        api = Api(url, session)
        await setup_queue(api)
        await api.create(
            f"{RAY}/namespaces/{NAMESPACE}/rayjobs", rayjob("blocker", managed=False, duration="inf")
        )

        async def blocker_runs() -> bool:
            found = await api.get(f"{RAY}/namespaces/{NAMESPACE}/rayjobs/blocker")
            return (found.get("status") or {}).get("jobDeploymentStatus") == "Running"

        await wait_until(blocker_runs, timeout_s=120)
        created_at = time.monotonic()
        jobs = await create_jobs(api, n, duration="2")
        create_s = time.monotonic() - created_at

        async def all_pending() -> bool:
            listed = await api.get(f"{KUEUE}/namespaces/{NAMESPACE}/workloads")
            return len(listed["items"]) >= n + 1

        await wait_until(all_pending, timeout_s=300)
        await api.quiet()
        spec = workdir / f"jobs-{n}.json"
        spec.write_text(
            json.dumps(
                {
                    "namespace": NAMESPACE,
                    "queue": QUEUE,
                    "resync_interval": DEFAULT_RESYNC_S,
                    "poll_interval": POLL_INTERVAL_S,
                    "jobs": jobs,
                }
            )
        )

        # -- polling baseline, while everything waits --
        poller = Worker("bench.polling_worker", spec, env, workdir / "poll.log")
        try:
            before = await api.stats()
            await poller.start()
            await asyncio.sleep(poll_window)
            poll_usage = await poller.usage()
            after = await api.stats()
            poll_final = await poller.stop()
        finally:
            poller.kill()
        poll_requests = _delta(after, before, api)
        polls = poll_usage["polls"]
        per_poll = poll_requests / polls if polls else float("nan")
        polling = {
            "window_s": poll_window,
            "polls": polls,
            "requests": poll_requests,
            "requests_per_poll": round(per_poll, 3),
            # share of the polls the 10 s shape asks for in the window (one at start, then one per interval)
            "share_of_nominal_polls_done": round(polls / (n * (int(poll_window // POLL_INTERVAL_S) + 1)), 2),
            # None when no poll was answered within the window (too short for N fresh clients on this box)
            "requests_10_sim_min": round(per_poll * n * SIMULATED_MINUTES * 60 / POLL_INTERVAL_S)
            if polls
            else None,
            "cpu_s": poll_final["final"]["cpu_s"],
            "peak_rss_mib": poll_final["final"]["peak_rss_mib"],
        }
        await api.quiet()

        # -- the triggers: startup, two waiting windows, then the waves --
        before = await api.stats()
        trigger = Worker("bench.trigger_worker", spec, env, workdir / f"trigger-{n}.log")
        await trigger.start()
        started = await _settled(api, streams=before["watches_open"] + 2)
        start_usage = await trigger.usage()
        window_requests = []
        mark = started
        for window in windows:
            await asyncio.sleep(window)
            now = await api.stats()
            window_requests.append({"window_s": window, "requests": _delta(now, mark, api)})
            mark = now
        wait_usage = await trigger.usage()
        streams_open = mark["watches_open"] - before["watches_open"]
        resync = await _resync_probe(api, jobs[: min(n, RESYNC_PROBE_JOBS)], env, workdir, resync_probe_s)
        mark = await api.stats()  # the waves start here: the probe's own traffic is not theirs

        seen: dict[str, float] = {}
        stop = asyncio.Event()
        observer = asyncio.ensure_future(observe_terminal(url, seen, stop))
        await asyncio.sleep(0.5)
        waves_start = time.monotonic()
        await api.patch(f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}", _cluster_queue_quota(1 + max(1, n // 4)))

        async def all_fired() -> bool:
            return len(trigger.fired) >= n

        await wait_until(all_fired, timeout_s=600)
        waves_s = time.monotonic() - waves_start
        done = await api.stats()
        stop.set()
        await observer
        end_usage = await trigger.usage()
        final = await trigger.stop()

    latencies = [trigger.fired[name][0] - seen[name] for name in trigger.fired if name in seen]
    statuses: dict[str, int] = {}
    for _, status in trigger.fired.values():
        statuses[status] = statuses.get(status, 0) + 1
    startup_requests = _delta(started, before, api)
    wave_requests = _delta(done, mark, api) - 1  # minus the observer's initial list (its own session)
    # The hub relists per namespace, whatever N: what one resync costs times the resyncs in 10 minutes.
    resyncs_10min = SIMULATED_MINUTES * 60 / DEFAULT_RESYNC_S
    waiting_10min = round(resync["requests_per_resync"] * resyncs_10min)
    trigger_10min = startup_requests + wave_requests + waiting_10min
    return {
        "n": n,
        "create_s": round(create_s, 1),
        "polling": polling,
        "trigger": {
            "startup_requests": startup_requests,
            "startup_by_verb": _by_verb(started, before),
            "waves_by_verb": _by_verb(done, mark),
            "waiting_windows": window_requests,
            "watch_streams_open_while_waiting": streams_open,
            "wave_requests": wave_requests,
            "waves_s": round(waves_s, 1),
            "events": statuses,
            "latency_samples": len(latencies),
            "detection_latency": summary_ms(latencies),
            "cpu_s": {
                "startup": start_usage["usage"]["cpu_s"],
                "after_waiting": wait_usage["usage"]["cpu_s"],
                "after_waves": end_usage["usage"]["cpu_s"],
            },
            "rss_mib": {
                "after_startup": start_usage["usage"]["rss_mib"],
                "after_waiting": wait_usage["usage"]["rss_mib"],
                "peak": final["final"]["peak_rss_mib"],
            },
            "resync_probe": resync,
            "waiting_requests_10_sim_min": waiting_10min,
            "requests_10_sim_min": trigger_10min,
        },
        "polling_over_trigger_10_sim_min": round(polling["requests_10_sim_min"] / max(1, trigger_10min), 1)
        if polling["requests_10_sim_min"] is not None
        else None,
    }


async def _settled(api: Api, *, streams: int, quiet_s: float = 3.0) -> dict:
    """Stats once the new worker has its watch streams open and then made no request for ``quiet_s``."""

    async def streaming() -> bool:
        return (await api.stats())["watches_open"] >= streams

    await wait_until(streaming, timeout_s=300, interval_s=0.2)
    return await api.quiet(quiet_s=quiet_s)


async def _resync_probe(api: Api, jobs: list[dict], env: dict, workdir: Path, interval: float) -> dict:
    """What one safety-net resync costs: triggers with a short ``resync_interval`` over a fixed window.

    Run in its own process on the first jobs while they wait, after the main process's windows, so that
    the 300 s default can be accounted for over 10 simulated minutes without waiting 10 real minutes.
    The hub relists each resource every ``interval`` seconds (jittered down by up to 10%) after its first
    list, so a window of twice that length, once startup traffic has settled, holds two resyncs. A relist
    lists the whole namespace, so its cost does not depend on how many triggers the probe runs;
    ``requests_per_trigger_per_resync`` is only there to compare with the per-trigger re-reads it replaced.
    """
    spec = workdir / "resync.json"
    spec.write_text(
        json.dumps({"namespace": NAMESPACE, "queue": QUEUE, "resync_interval": interval, "jobs": jobs})
    )
    before = await api.stats()
    probe = Worker("bench.trigger_worker", spec, env, workdir / "resync.log")
    await probe.start()
    # Quiet for less than half an interval: the probe's own resyncs must not look like startup traffic.
    settled = await _settled(api, streams=before["watches_open"] + 2, quiet_s=min(2.0, interval / 2))
    await asyncio.sleep(2 * interval)
    after = await api.stats()
    await probe.stop()
    await api.quiet()
    requests = _delta(after, settled, api)
    resyncs = 2
    return {
        "jobs": len(jobs),
        "resync_interval_s": interval,
        "window_s": 2 * interval,
        "requests": requests,
        "by_verb": _by_verb(after, settled),
        "requests_per_resync": requests / resyncs,
        "requests_per_trigger_per_resync": round(requests / (len(jobs) * resyncs), 3),
    }


def _by_verb(after: dict, before: dict) -> dict:
    """Request counts by verb and resource between two stats; the harness's own ``quiet`` polls (the only
    namespace lists in the run) are left out."""
    keys = set(after["requests"]) | set(before["requests"])
    delta = {k: after["requests"].get(k, 0) - before["requests"].get(k, 0) for k in keys}
    return {k: v for k, v in sorted(delta.items()) if v and k != "list namespaces"}


def run_one(
    n: int,
    *,
    windows: tuple[float, float] = (10.0, 20.0),
    poll_window: float = 25.0,
    resync_probe_s: float = RESYNC_PROBE_S,
    time_scale: float = 1.0,
) -> dict:
    """One N against a fresh kubesim; ``time_scale`` shortens the RayJobs' simulated run (smoke test)."""
    try:
        return _run_one(n, windows, poll_window, resync_probe_s, time_scale)
    finally:
        while LIVE_WORKERS:
            LIVE_WORKERS.pop().kill()


def _run_one(n: int, windows, poll_window: float, resync_probe_s: float, time_scale: float) -> dict:
    with (
        tempfile.TemporaryDirectory(prefix="bench-trigger-") as directory,
        run_kubesim(mode="subprocess", crds_dir=CRDS_DIR, time_scale=time_scale) as sim,
    ):
        return asyncio.run(
            measure(
                sim.url,
                sim.kubeconfig,
                n,
                windows=windows,
                poll_window=poll_window,
                resync_probe_s=resync_probe_s,
                workdir=Path(directory),
            )
        )


def run(sizes: tuple[int, ...] = (100, 1000), **kwargs) -> dict:
    """Every N in turn, each against its own fresh kubesim."""
    return {"rows": [run_one(n, **kwargs) for n in sizes]}
