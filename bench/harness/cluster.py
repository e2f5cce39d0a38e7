"""The cluster every kubesim benchmark waits in: one namespace, a 1-CPU ClusterQueue whose quota a
``blocker`` RayJob holds forever, and N RayJobs (or RayServices) queued behind it until the benchmark
raises the quota. Also kubesim's fault rules and a raw watch of the RayJobs' terminal statuses."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable

import aiohttp

from bench.harness.phases import Phases, wait_until
from bench.harness.protocol import DONE
from bench.kube import KUEUE, RAY, Api

NAMESPACE = "bench"
QUEUE = "bench-lq"
CLUSTER_QUEUE = "bench-cq"
FLAVOR = "bench-flavor"
MANAGED = {"app.kubernetes.io/managed-by": "airflow-kueue-ray", "kueue.x-k8s.io/queue-name": QUEUE}
"""The labels the plugin's operators put on what they submit (the hub watches by the first)."""
WATCHED = ["rayjobs.ray.io", "workloads.kueue.x-k8s.io"]
"""What the hub watches: one stream each, whatever N; the resources a fault rule names to refuse them."""
RAYJOBS = f"{RAY}/namespaces/{NAMESPACE}/rayjobs"


def rayjob_body(
    name: str,
    *,
    labels: dict[str, str],
    requests: dict[str, str],
    entrypoint: str,
    image: str = "rayproject/ray:2.52.0",
    startup_s: str = "1",
) -> dict:
    """A RayJob of one head with ``requests`` (as limits too) that kubesim starts ``startup_s`` simulated
    seconds after admission; ``shutdownAfterJobFinishes`` because KubeRay's webhook demands it of a
    Kueue-managed RayJob.

    >>> body = rayjob_body("j", labels={}, requests={"cpu": "1"}, entrypoint="sleep 2")
    >>> body["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    {'requests': {'cpu': '1'}, 'limits': {'cpu': '1'}}
    """
    head = {"name": "ray-head", "image": image, "resources": {"requests": requests, "limits": requests}}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": labels, "annotations": {"kubesim.dev/startup": startup_s}},
        "spec": {
            "entrypoint": entrypoint,
            "submissionMode": "HTTPMode",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}}
            },
        },
    }


DEPLOYMENT = "bench"
"""The Airflow deployment the benchmark's RayJobs say they belong to."""


def stamped(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations the plugin's operator stamps on the RayJob of one task try
    (``kueue_ray.naming.AirflowIdentity``; ``tests/unit/bench`` checks they match), for a task ``wait`` of
    DAG ``bench`` in a run of its own per RayJob (a backfill's shape): what a waiting triggerer caches of
    each."""
    run_id = f"backfill__2026-01-01T00:00:00+00:00-{name}"
    labels = {
        **MANAGED,
        "airflow.apache.org/dag-id": "bench",
        "airflow.apache.org/task-id": "wait",
        "kueue-ray.airflow.apache.org/deployment": DEPLOYMENT,
        "kueue-ray.airflow.apache.org/task-instance": hashlib.sha256(
            json.dumps([DEPLOYMENT, "bench", run_id, "wait", -1]).encode()
        ).hexdigest()[:10],
    }
    annotations = {
        "airflow.apache.org/dag-id": "bench",
        "airflow.apache.org/run-id": run_id,
        "airflow.apache.org/task-id": "wait",
        "airflow.apache.org/map-index": "-1",
        "airflow.apache.org/try-number": "1",
        "kueue-ray.airflow.apache.org/deployment": DEPLOYMENT,
    }
    return labels, annotations


def rayjob(name: str, *, managed: bool, duration: str) -> dict:
    """A 1-CPU RayJob in the benchmark's queue that runs ``duration`` seconds (``inf``: forever);
    ``managed`` ones carry what the plugin's operator stamps (``stamped``), so the triggers' hub sees them
    and caches what it would of a real one."""
    labels, annotations = stamped(name) if managed else ({"kueue.x-k8s.io/queue-name": QUEUE}, {})
    body = rayjob_body(
        name,
        labels=labels,
        requests={"cpu": "1", "memory": "1Gi"},
        entrypoint=f"sleep {'infinity' if duration == 'inf' else duration}",
    )
    body["metadata"]["annotations"].update(annotations)
    return body


def cluster_queue_quota(cpu: int) -> dict:
    """The ClusterQueue's quota as a merge patch: ``cpu`` CPUs (and as many Gi) of the one flavor."""
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


async def raise_quota(api: Api, cpu: int) -> None:
    """Let ``cpu`` - 1 queued 1-CPU RayJobs run beside the blocker."""
    await api.patch(f"{KUEUE}/clusterqueues/{CLUSTER_QUEUE}", cluster_queue_quota(cpu))


async def setup_queue(api: Api) -> None:
    await api.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    await api.create(
        f"{KUEUE}/resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
    )
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE}}
    cq["spec"] = {"namespaceSelector": {}, **cluster_queue_quota(1)["spec"]}
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


async def block_queue(api: Api, phases: Phases) -> None:
    """The queue set up and the blocker running (holding its whole quota); ends the ``setup`` phase."""
    await setup_queue(api)
    await api.create(RAYJOBS, rayjob("blocker", managed=False, duration="inf"))

    async def blocker_runs() -> bool:
        found = await api.get(f"{RAYJOBS}/blocker")
        return (found.get("status") or {}).get("jobDeploymentStatus") == "Running"

    await wait_until(blocker_runs, timeout_s=120)
    phases.mark("setup")


async def create_each(n: int, create: Callable[[int], Awaitable[dict]], *, parallel: int = 16) -> list[dict]:
    """``create(i)`` for i in 0..n-1, ``parallel`` at a time; their results in that order."""
    gate = asyncio.Semaphore(parallel)

    async def one(i: int) -> dict:
        async with gate:
            return await create(i)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def create_jobs(api: Api, n: int, *, duration: str, parallel: int = 16) -> list[dict]:
    """Create N managed RayJobs, a few requests at a time; their names and uids, in creation order."""

    async def one(i: int) -> dict:
        created = await api.create(RAYJOBS, rayjob(f"job-{i:05d}", managed=True, duration=duration))
        return {"name": created["metadata"]["name"], "uid": created["metadata"]["uid"]}

    return await create_each(n, one, parallel=parallel)


async def queued(api: Api, n: int, phases: Phases) -> None:
    """Until N Workloads (and the blocker's) exist and kubesim is quiet; ends the ``queue`` phase."""

    async def all_workloads() -> bool:
        # kubesim's object counts, not a list: listing N Workloads twice a second loads the server under test
        return (await api.stats())["objects"].get("Workload", 0) >= n + 1

    await wait_until(all_workloads, timeout_s=600)
    await api.quiet()
    phases.mark("queue")


async def setup_jobs(api: Api, n: int, phases: Phases) -> list[dict]:
    """The blocker running, then N RayJobs queued behind it and settled (every Workload pending)."""
    await block_queue(api, phases)
    jobs = await create_jobs(api, n, duration="2")
    phases.mark("create")
    await queued(api, n, phases)
    return jobs


async def set_faults(api: Api, rules: list[dict]) -> None:
    """Replace kubesim's fault rules (``[]`` clears them)."""
    async with api.session.post(api.url + "/kubesim/faults", json={"rules": rules}) as response:
        response.raise_for_status()


async def observe_terminal(
    url: str, seen: dict[str, float], stop: asyncio.Event, *, all_namespaces: bool = False
) -> None:
    """A raw watch of the managed RayJobs: the wall time each one's terminal status reached a watcher
    (``all_namespaces``: through the cluster-wide path, which a rule naming the namespace does not refuse)."""
    path = f"{url}{RAY}/rayjobs" if all_namespaces else f"{url}{RAYJOBS}"
    async with aiohttp.ClientSession() as session:
        async with session.get(path, params={"limit": "1"}) as response:
            rv = (await response.json())["metadata"]["resourceVersion"]
        params = {"watch": "true", "resourceVersion": rv, "labelSelector": "app.kubernetes.io/managed-by"}
        async with session.get(path, params=params, timeout=aiohttp.ClientTimeout(total=None)) as response:
            reader = asyncio.ensure_future(_read_terminal(response, seen))
            await stop.wait()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def _read_terminal(response: aiohttp.ClientResponse, seen: dict[str, float]) -> None:
    async for line in response.content:
        received = time.time()
        obj = json.loads(line)["object"]
        name = obj["metadata"]["name"]
        if name not in seen and (obj.get("status") or {}).get("jobDeploymentStatus") in DONE:
            seen[name] = received
