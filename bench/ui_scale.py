"""The Kueue pages with a large cluster: 1,000 pending and 10,000 finished workloads in 4 ClusterQueues.
``python -m bench.ui_scale [--finished 10000] [--pending 1000] [--samples 200] [--before DIR] [--out file.json]``
(``--before``: first the same measurement with another checkout's ``plugins/``, e.g.
``git archive <rev> plugins | tar -x -C /tmp/before`` and ``--before /tmp/before/plugins``, then this
checkout's, in one run. A revision older than the templates' move into ``plugins/kueue_ray/templates/``
also needs its ``include/`` beside: ``git archive <rev> plugins include``.)

Setup: one Airflow (``bench.harness.airflow.airflow_stack``: scheduler, dag-processor, triggerer,
api-server on a throwaway PostgreSQL) against kubesim (single-queue setup, time-scale 50), the plugin's
api-server cache watching namespace ``ray`` as shipped. Four more ClusterQueues (``ui-scale-0`` to
``-3``, a LocalQueue each in ``ray``). ``--finished`` RayJobs with the operator's labels and an Airflow
task's annotations (DAG ``bench_ui_scale``, one run id each, so an admin's page shows every row) run to
completion through kubesim's Kueue and KubeRay, spread over the four queues: their Workloads stay
``Finished`` and their RayJobs ``Complete``, in the cache as in a cluster that has run for weeks. Then
each queue's quota is held by a blocker that runs forever and ``--pending`` more such RayJobs wait behind
the blockers; one manual run of ``bench_ui_scale`` (``bench/dags/ui_scale.py``) submits a RayJob to
``ui-scale-0`` and returns, so one task's Kueue tab shows a RayJob pending behind 250 others.

Measured once the api-server's page shows every pending workload, through Airflow's api-server with an
admin's bearer token (what a browser tab asks, Airflow's authentication included), sequentially:

* **queues page**: ``GET /kueue/api/v1/queues`` without ``known``, ``--samples`` times: round-trip p50 /
  p99 / max and the answer's size (bytes, as sent, and how many pending rows it carries);
* **unchanged poll**: the same with ``known=<version>`` (a page that is up to date; answered 204);
* **Kueue tab**: ``GET /kueue/api/v1/task-instance`` of the run's submit task (an XCom read in Airflow's
  database, the snapshot, the queue's pending list);
* **api-server RSS**: the resident memory of Airflow's api-server process (the one that loads the plugin
  and its cache) after Airflow started (before any RayJob) and after the measurements;
* **cache requests per minute**: kubesim's requests not made by the harness, over a ``--window`` (90 s) with one
  simulated open tab (a poll every 2 s, as ``kueue.js`` polls) and over another with twenty; the
  difference is what the extra nineteen tabs cost the Kubernetes API.

Targets (issue 33): page p99 < 200 ms, unchanged poll < 20 ms, cache requests independent of the number of
open tabs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import aiohttp
import httpx

from bench.harness.airflow import NAMESPACE, airflow_stack, dag_bundles
from bench.harness.cluster import create_each, rayjob_body
from bench.harness.phases import Phases, wait_until
from bench.kube import KUEUE, RAY, Api
from bench.stats import summary_ms
from devtools.signals import stop_on_signals

DAG_ID = "bench_ui_scale"
QUEUES = 4
TIME_SCALE = 50.0
PAGE_P99_TARGET_MS = 200
UNCHANGED_TARGET_MS = 20
FINISHED_BATCH = 400
"""Finished RayJobs created at a time (each queue's quota runs 400 at once)."""
VISIBILITY_READ = "get clusterqueues pendingworkloads"
"""The one request a page's poll can cause (the cache's pending list of a ClusterQueue)."""
POLL_S = 2.0
"""How often an open page asks (``kueue.js``'s ``POLL_SECONDS``)."""
RAYJOBS = f"{RAY}/namespaces/{NAMESPACE}/rayjobs"
HELD = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "2"}
"""Each queue's quota while it holds pending workloads, all of it requested by its blocker: the DAG's
text-classifier RayJob (2 CPUs, 8G, 1 GPU for its head) fits it, so the operator's preflight accepts it."""


def cluster_queue(name: str, quota: dict[str, str]) -> dict:
    """A ClusterQueue of the single-queue setup's shape (CPU and memory of flavor ``default``, GPUs of
    flavor ``gpu``) with ``quota``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"namespaceSelector": {}, **resource_groups(quota)},
    }


def resource_groups(quota: dict[str, str]) -> dict:
    def group(flavor: str, names: list[str]) -> dict:
        resources = [{"name": n, "nominalQuota": quota[n]} for n in names]
        return {"coveredResources": names, "flavors": [{"name": flavor, "resources": resources}]}

    return {"resourceGroups": [group("default", ["cpu", "memory"]), group("gpu", ["nvidia.com/gpu"])]}


def job(name: str, queue: int, *, duration: str, requests: dict[str, str]) -> dict:
    """A RayJob as the operator labels and annotates it (the cache watches by the managed-by label; the
    page names the task from the annotations)."""
    from kueue_ray.naming import QUEUE_LABEL, AirflowIdentity

    identity = AirflowIdentity(DAG_ID, "submit", f"bench__{name}")
    body = rayjob_body(
        name,
        labels={**identity.labels(), QUEUE_LABEL: f"ui-scale-{queue}"},
        requests=requests,
        entrypoint=f"sleep {'infinity' if duration == 'inf' else duration}",
    )
    body["metadata"]["annotations"].update(identity.annotations())
    return body


async def queue_counts(api: Api) -> list[dict]:
    """Each benchmark ClusterQueue's status counts."""
    found = [await api.get(f"{KUEUE}/clusterqueues/ui-scale-{i}") for i in range(QUEUES)]
    return [cq.get("status") or {} for cq in found]


async def fill(url: str, headers: dict, finished: int, pending: int, phases: Phases) -> None:
    """The queues, the finished RayJobs run to completion, then the blockers and the pending RayJobs."""
    async with aiohttp.ClientSession(headers=headers) as session:
        api = Api(url, session)
        wide = {"cpu": "400", "memory": "400Gi", "nvidia.com/gpu": "8"}
        for i in range(QUEUES):
            await api.create(f"{KUEUE}/clusterqueues", cluster_queue(f"ui-scale-{i}", wide))
            await api.create(
                f"{KUEUE}/namespaces/{NAMESPACE}/localqueues",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "LocalQueue",
                    "metadata": {"name": f"ui-scale-{i}"},
                    "spec": {"clusterQueue": f"ui-scale-{i}"},
                },
            )
        one = {"cpu": "1", "memory": "1Gi"}

        async def all_finished() -> bool:
            counts = await queue_counts(api)
            return all(not c.get("pendingWorkloads") and not c.get("reservingWorkloads") for c in counts)

        # In batches that fit the quota: a Kueue with thousands pending spends its cycles on them, and ten
        # thousand RayJobs created at once took kubesim longer than the benchmark allows.
        for start in range(0, finished, FINISHED_BATCH):
            await create_each(
                min(FINISHED_BATCH, finished - start),
                lambda i, start=start: api.create(
                    RAYJOBS, job(f"done-{start + i:05d}", (start + i) % QUEUES, duration="1", requests=one)
                ),
                parallel=32,
            )
            await wait_until(all_finished, timeout_s=600, interval_s=2)
        phases.mark("finished")
        for i in range(QUEUES):
            await api.patch(f"{KUEUE}/clusterqueues/ui-scale-{i}", {"spec": resource_groups(HELD)})
            await api.create(RAYJOBS, job(f"blocker-{i}", i, duration="inf", requests=HELD))

        async def blocked() -> bool:
            return all(c.get("reservingWorkloads") == 1 for c in await queue_counts(api))

        await wait_until(blocked, timeout_s=300)
        await create_each(
            pending,
            lambda i: api.create(RAYJOBS, job(f"wait-{i:05d}", i % QUEUES, duration="inf", requests=one)),
            parallel=32,
        )

        async def queued() -> bool:
            return sum(c.get("pendingWorkloads") or 0 for c in await queue_counts(api)) >= pending

        await wait_until(queued, timeout_s=600, interval_s=2)
        phases.mark("pending")


def api_server_rss_mib() -> float | None:
    """Resident memory of Airflow's api-server process (the largest, if it runs workers)."""
    import psutil

    from devtools.airflow import component_of

    sizes = []
    for process in psutil.process_iter(["cmdline", "memory_info"]):
        try:
            if component_of(process.info["cmdline"] or []) == "api-server":
                sizes.append(process.info["memory_info"].rss)
        except (psutil.Error, TypeError):
            continue
    return round(max(sizes) / 2**20, 1) if sizes else None


def timed(client: httpx.Client, path: str, samples: int, **params: str) -> tuple[dict, list[httpx.Response]]:
    seconds, answers = [], []
    for _ in range(samples):
        started = time.perf_counter()
        response = client.get(path, params=params)
        seconds.append(time.perf_counter() - started)
        answers.append(response)
    return summary_ms(seconds), answers


def page_shows_everything(client: httpx.Client, pending: int) -> bool:
    page = client.get("/kueue/api/v1/queues").json()
    rows = sum(
        len(cq["pending"]["items"]) for cq in page["cluster_queues"] if cq["name"].startswith("ui-scale")
    )
    return rows >= pending + 1


def cache_requests(sim_url: str, headers: dict, client: httpx.Client, tabs: int, window_s: float) -> dict:
    """kubesim's requests in a window while ``tabs`` threads poll like open pages (the harness makes none
    then): per minute in total, and how many of each kind (verb, resource, subresource)."""
    stop = threading.Event()

    def tab() -> None:
        known = None
        with httpx.Client(base_url=client.base_url, headers=client.headers, timeout=60) as own:
            while not stop.is_set():
                answer = own.get("/kueue/api/v1/queues", params={"known": known} if known else {})
                if answer.status_code == 200:
                    known = str(answer.json()["version"])
                stop.wait(POLL_S)

    threads = [threading.Thread(target=tab, daemon=True) for _ in range(tabs)]
    for thread in threads:
        thread.start()
    time.sleep(POLL_S * 2)  # every tab has its first full answer
    started = time.time()
    time.sleep(window_s)
    ended = time.time()
    log = httpx.get(f"{sim_url}/kubesim/requests", headers=headers).json()
    stop.set()
    for thread in threads:
        thread.join()
    kinds = Counter(
        " ".join(filter(None, (r["verb"], r["resource"], r["subresource"])))
        for r in log
        if started <= r["at"] <= ended
    )
    return {"per_min": round(sum(kinds.values()) * 60 / window_s, 1), "kinds": dict(kinds)}


def measure(
    finished: int, pending: int, samples: int, window_s: float, workdir: Path, plugins: Path | None = None
) -> dict:
    """One Airflow's figures; ``plugins``: another checkout's ``plugins/`` for every Airflow component
    (e.g. the code before a change), else this checkout's."""
    phases = Phases()
    extra_env = {"AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": dag_bundles()}
    if plugins is not None:
        from devtools.airflow import ROOT

        extra_env |= {"AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins), "PYTHONPATH": f"{plugins}:{ROOT}"}
    with airflow_stack(workdir, [DAG_ID], time_scale=TIME_SCALE, extra_env=extra_env) as stack:
        airflow, sim = stack.airflow, stack.sim
        rss_before = api_server_rss_mib()
        phases.mark("airflow")
        asyncio.run(fill(sim.url, sim.headers, finished, pending, phases))
        airflow.set_paused(DAG_ID, False)
        run_id = airflow.trigger_dag_run(DAG_ID)
        client = airflow.client
        deadline = time.monotonic() + 600
        while not page_shows_everything(client, pending):
            if time.monotonic() > deadline:
                page = client.get("/kueue/api/v1/queues").json()
                shown = {
                    cq["name"]: (cq["counts"], len(cq["pending"]["items"])) for cq in page["cluster_queues"]
                }
                runs = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances").json()
                states = [(ti["task_id"], ti["state"]) for ti in runs.get("task_instances", [])]
                raise TimeoutError(f"the Kueue page never showed every pending workload: {shown}; {states}")
            time.sleep(2)
        phases.mark("cache")
        page, answers = timed(client, "/kueue/api/v1/queues", samples)
        last = answers[-1]
        version = str(last.json()["version"])
        unchanged, polls = timed(client, "/kueue/api/v1/queues", samples, known=version)
        tab, tabs = timed(
            client, "/kueue/api/v1/task-instance", samples, dag_id=DAG_ID, run_id=run_id, task_id="submit"
        )
        position = tabs[-1].json().get("position")
        phases.mark("timed")
        one_tab = cache_requests(sim.url, sim.headers, client, 1, window_s)
        twenty_tabs = cache_requests(sim.url, sim.headers, client, 20, window_s)
        phases.mark("tabs")
        rss_after = api_server_rss_mib()
    return {
        "finished": finished,
        "pending": pending,
        "samples": samples,
        "window_s": window_s,
        "cluster_queues": len(last.json()["cluster_queues"]),
        "airflow_startup_s": stack.startup_s,
        "phases": phases.durations(),
        "page": page
        | {
            "bytes": len(last.content),
            "pending_rows": sum(len(cq["pending"]["items"]) for cq in last.json()["cluster_queues"]),
        },
        "page_statuses": sorted({a.status_code for a in answers}),
        "unchanged": unchanged,
        "unchanged_statuses": sorted({a.status_code for a in polls}),
        "tab": tab | {"bytes": len(tabs[-1].content)},
        "tab_statuses": sorted({a.status_code for a in tabs}),
        "tab_position": {
            k: (position or {}).get(k) for k in ("in_cluster_queue", "pending_in_cluster_queue")
        },
        "api_server_rss_mib": {"after_start": rss_before, "after": rss_after},
        "cache_requests_per_min": {"1 tab": one_tab, "20 tabs": twenty_tabs},
    }


def independent(r: dict) -> bool:
    """Twenty tabs cost no more than one, give or take one round of the cache's own refresh: each
    ClusterQueue's pending list is read again every ``visibility_max_age`` (30 s) while anyone looks, so a
    window can catch one round more than another. (Watches that end and are opened again are the
    cache's life, not the tabs'.)"""
    cache = r["cache_requests_per_min"]
    one, twenty = (cache[n]["kinds"].get(VISIBILITY_READ, 0) for n in ("1 tab", "20 tabs"))
    return twenty <= one + r["cluster_queues"]


def verdict(value: float, target: float) -> str:
    return "met" if value < target else "**missed**"


def render(r: dict) -> str:
    page, unchanged, tab = r["page"], r["unchanged"], r["tab"]
    rss, cache = r["api_server_rss_mib"], r["cache_requests_per_min"]
    return "\n".join(
        [
            f"{r['pending']} pending and {r['finished']} finished workloads in 4 ClusterQueues; "
            f"{r['samples']} sequential requests each through Airflow's api-server; Airflow up in "
            f"{r['airflow_startup_s']} s; phases {json.dumps({k: v['s'] for k, v in r['phases'].items()})}.",
            "",
            "| figure | measured | target | verdict |",
            "|---|---|---|---|",
            f"| queues page JSON, p50 / p99 / max | {page['p50_ms']} / {page['p99_ms']} / {page['max_ms']} ms "
            f"({page['bytes']:,} bytes, {page['pending_rows']} pending rows; statuses {r['page_statuses']}) "
            f"| p99 < {PAGE_P99_TARGET_MS} ms | {verdict(page['p99_ms'], PAGE_P99_TARGET_MS)} |",
            f"| unchanged poll (`known`), p50 / p99 / max | {unchanged['p50_ms']} / {unchanged['p99_ms']} / "
            f"{unchanged['max_ms']} ms (statuses {r['unchanged_statuses']}) | < {UNCHANGED_TARGET_MS} ms | "
            f"{verdict(unchanged['p99_ms'], UNCHANGED_TARGET_MS)} (p99) |",
            f"| Kueue tab of a pending task, p50 / p99 / max | {tab['p50_ms']} / {tab['p99_ms']} / "
            f"{tab['max_ms']} ms ({tab['bytes']:,} bytes; statuses {r['tab_statuses']}; position "
            f"{r['tab_position']['in_cluster_queue']} of {r['tab_position']['pending_in_cluster_queue']}) | "
            "none set | |",
            f"| api-server RSS, after start → after the run | {rss['after_start']} → {rss['after']} MiB | "
            "none set | |",
            f"| Kubernetes API requests per minute by the cache, 1 tab vs 20 tabs ({r['window_s']:g} s "
            f"windows) | {cache['1 tab']['per_min']} ({cache['1 tab']['kinds']}) vs {cache['20 tabs']['per_min']} "
            f"({cache['20 tabs']['kinds']}) | independent of tabs | "
            f"{'met' if independent(r) else '**missed**'} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ui_scale", description=__doc__.split("\n")[0])
    parser.add_argument("--finished", type=int, default=10000)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--window", type=float, default=90.0)
    parser.add_argument(
        "--before", type=Path, help="a plugins/ folder (e.g. git archive of an older commit) measured first"
    )
    parser.add_argument("--out", help="write the JSON result here")
    args = parser.parse_args(argv)
    codes = {"before": args.before, "this checkout": None} if args.before else {"this checkout": None}
    results = {}
    for code, plugins in codes.items():
        with tempfile.TemporaryDirectory(prefix="bench-ui-scale-") as directory:
            sizes = (args.finished, args.pending, args.samples, args.window)
            results[code] = measure(*sizes, Path(directory), plugins)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    print("\n\n".join(f"**{code}**: {render(result)}" for code, result in results.items()))
    return 0


if __name__ == "__main__":
    stop_on_signals()  # a benchmark stopped with kill stops its kubesim and Airflow
    sys.exit(main())
