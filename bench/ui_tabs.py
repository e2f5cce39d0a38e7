"""What open Kueue pages cost the Kubernetes API: 20 browser tabs on the "Kueue queues" page.

Setup: kubesim (single-queue and team-queues setups, time-scale 10; devtools.kubesim_process), one
Airflow on a throwaway PostgreSQL (devtools.airflow, devtools.postgres) with the plugin's
api-server cache watching namespace ``ray``, and one headless Chromium (devtools.chromium) signed in as
admin. A steady churn keeps the queue changing throughout: a manual run of ``text_classifier_finetune``
(1 epoch: a 2.5 s RayJob here) every ``--churn-seconds``, 3 runs active at a time, so RayJobs are
created, queue, are admitted and finish all the time and every change reaches every open tab.

Two windows of ``--minutes`` each, same churn:

* **20 tabs**: ``--tabs`` tabs on ``/plugin/kueue-queues`` (Airflow's page; the plugin's iframe inside),
  all live (Chromium's background throttling is off);
* **no tab**: the same Airflow with every tab closed.

Per window: Kubernetes API requests per minute from kubesim's request log, in total and for the reads
only the pages make (ClusterQueue visibility ``GET .../clusterqueues/<cq>/pendingworkloads``; LocalQueue
and ClusterQueue lists and watches); the difference between the windows is what the tabs cost. And the
requests the tabs made to Airflow (``/kueue/api/v1/queues``, counted in each tab with the Resource Timing
API), per minute. Also: what polling per tab would have cost, computed, not measured (one list per
watched resource and one visibility read per ClusterQueue, per tab, per refresh).

``python -m bench.ui_tabs [--tabs 20] [--minutes 2] [--churn-seconds 10] [--out file.json]`` prints the
Markdown quoted in bench/README.md and writes the JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT / "plugins", ROOT):
    if str(path) not in sys.path:
        sys.path.append(str(path))

from devtools.airflow import PASSWORD, USERNAME, running_airflow  # noqa: E402
from devtools.chromium import Browser, ensure_chromium  # noqa: E402
from devtools.kubesim_process import KUEUE_MANIFESTS, start_kubesim  # noqa: E402
from devtools.postgres import metadata_database  # noqa: E402
from devtools.signals import stop_on_signals  # noqa: E402

DAG_ID = "text_classifier_finetune"
PAGE = "/plugin/kueue-queues"
UI_ONLY = {
    ("get", "clusterqueues", "pendingworkloads"),
    ("watch", "clusterqueues", ""),
    ("watch", "localqueues", ""),
}
"""Requests nothing but the Kueue pages' cache makes (the operator's preflight gets and lists queues, but
never watches them, and reads LocalQueue positions, not ClusterQueue ones)."""
COUNT_API_CALLS = """
return performance.getEntriesByType('resource').filter(e => e.name.includes('/kueue/api/v1/queues')).length
"""


class Churn(threading.Thread):
    """A manual dev run every ``interval`` seconds until stopped."""

    def __init__(self, airflow, interval: float) -> None:
        super().__init__(daemon=True)
        self.airflow = airflow
        self.interval = interval
        self.stopped = threading.Event()
        self.triggered = 0

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.airflow.trigger_dag_run(DAG_ID, {"priority": "dev-priority", "epochs": 1})
                self.triggered += 1
            except Exception as exc:  # noqa: BLE001 - a busy api-server: the next one comes anyway
                print(f"  churn: trigger failed: {exc}", flush=True)
            self.stopped.wait(self.interval)


def kubesim_requests(url: str) -> list[dict]:
    log = httpx.get(f"{url}/kubesim/requests", timeout=30).json()
    httpx.delete(f"{url}/kubesim/requests", timeout=30).raise_for_status()
    return log


def summarize(records: list[dict], minutes: float) -> dict:
    by_kind = Counter((r["verb"], r["resource"], r["subresource"] or "") for r in records)
    ui_only = sum(count for key, count in by_kind.items() if key in UI_ONLY)
    return {
        "requests": len(records),
        "per_minute": round(len(records) / minutes, 1),
        "ui_only_per_minute": round(ui_only / minutes, 1),
        "visibility_per_minute": round(by_kind[("get", "clusterqueues", "pendingworkloads")] / minutes, 1),
        "by_kind": {" ".join(k).strip(): v for k, v in sorted(by_kind.items())},
    }


def measure(tabs: int, minutes: float, churn_seconds: float) -> dict:
    binaries = ensure_chromium()
    result: dict = {"tabs": tabs, "minutes": minutes, "churn_seconds": churn_seconds}
    with tempfile.TemporaryDirectory(prefix="kueue-ui-bench-") as workdir:
        kubesim = start_kubesim(
            Path(workdir) / "kubesim",
            queues="single-queue",
            time_scale=10,
            extra_apply=[KUEUE_MANIFESTS / "team-queues"],
        )
        browser = None
        try:
            with (
                metadata_database() as database_url,
                running_airflow(
                    Path(workdir) / "airflow",
                    kubeconfig=kubesim.kubeconfig,
                    database_url=database_url,
                    extra_env={"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"},
                ) as airflow,
            ):
                airflow.wait_for_dags([DAG_ID])
                airflow.set_paused(DAG_ID, False)
                browser = Browser(binaries, airflow.url, "bench")
                browser.sign_in(USERNAME, PASSWORD)
                handles = []
                for index in range(tabs):
                    if index:
                        browser.driver.switch_to.new_window("tab")
                    started = time.monotonic()
                    try:
                        browser.open_in_airflow(PAGE, "Kueue")
                    except AssertionError:
                        browser.screenshot(Path(workdir) / "failed-tab.png")
                        Path("/tmp/kueue-ui-bench-failed-tab.png").write_bytes(
                            (Path(workdir) / "failed-tab.png").read_bytes()
                        )
                        raise
                    browser.js("performance.setResourceTimingBufferSize(100000)")
                    handles.append(browser.driver.current_window_handle)
                    print(f"  tab {index + 1} open in {time.monotonic() - started:.1f}s", flush=True)
                churn = Churn(airflow, churn_seconds)
                churn.start()
                time.sleep(30)  # the churn reaches its steady state (3 runs active)

                kubesim_requests(kubesim.url)
                before = {}
                for handle in handles:
                    browser.driver.switch_to.window(handle)
                    browser.enter_frame()
                    before[handle] = browser.js(COUNT_API_CALLS)
                time.sleep(minutes * 60)
                with_tabs = summarize(kubesim_requests(kubesim.url), minutes)
                calls = 0
                for handle in handles:
                    browser.driver.switch_to.window(handle)
                    browser.enter_frame()
                    calls += browser.js(COUNT_API_CALLS) - before[handle]
                with_tabs["airflow_api_calls_per_minute"] = round(calls / minutes, 1)
                with_tabs["airflow_api_calls_per_tab_minute"] = round(calls / minutes / tabs, 1)
                browser.quit()
                browser = None

                kubesim_requests(kubesim.url)
                time.sleep(minutes * 60)
                without = summarize(kubesim_requests(kubesim.url), minutes)
                churn.stopped.set()
                churn.join()
                watched = 1 + 3  # ClusterQueues; RayJobs, Workloads, LocalQueues of namespace ray
                cluster_queues = 3
                result.update(
                    with_tabs=with_tabs,
                    without_tabs=without,
                    tabs_cost_per_minute=round(with_tabs["per_minute"] - without["per_minute"], 1),
                    runs_triggered=churn.triggered,
                    polling_estimate_per_minute={
                        "refresh_every_s": 5,
                        "requests": tabs * (watched + cluster_queues) * 60 // 5,
                        "basis": f"{tabs} tabs x ({watched} lists + {cluster_queues} visibility reads) x 12 refreshes",
                    },
                )
        finally:
            if browser is not None:
                browser.quit()
            kubesim.stop()
    return result


def markdown(result: dict) -> str:
    w, wo = result["with_tabs"], result["without_tabs"]
    return "\n".join(
        [
            f"#### Kueue pages: {result['tabs']} open tab(s) (`python -m bench.ui_tabs`)",
            "",
            f"{result['minutes']:g}-minute windows, a dev run triggered every {result['churn_seconds']:g} s "
            f"({result['runs_triggered']} in all).",
            "",
            "| window | Kubernetes API requests / min | of which only the pages' cache makes | "
            "visibility reads / min | Airflow `/kueue/api` calls / min |",
            "|---|---|---|---|---|",
            f"| {result['tabs']} tab(s) on the queues page | {w['per_minute']} | {w['ui_only_per_minute']} | "
            f"{w['visibility_per_minute']} | {w['airflow_api_calls_per_minute']} "
            f"({w['airflow_api_calls_per_tab_minute']} per tab) |",
            f"| no tab open | {wo['per_minute']} | {wo['ui_only_per_minute']} | {wo['visibility_per_minute']} | 0 |",
            "",
            f"What the {result['tabs']} tab(s) cost the Kubernetes API: {result['tabs_cost_per_minute']} requests per "
            f"minute. Polling per tab instead (estimate, not measured: "
            f"{result['polling_estimate_per_minute']['basis']}): "
            f"{result['polling_estimate_per_minute']['requests']} per minute.",
            "",
            "Requests by kind with the tabs open: " + ", ".join(f"{k} {v}" for k, v in w["by_kind"].items()),
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tabs", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--churn-seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    result = measure(args.tabs, args.minutes, args.churn_seconds)
    result["started"] = started
    result["machine"] = {
        "python": platform.python_version(),
        "cpus": len(__import__("os").sched_getaffinity(0)),
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    stop_on_signals()  # a benchmark stopped with kill stops its kubesim and Airflow
    sys.exit(main())
