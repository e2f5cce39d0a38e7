"""The Kueue pages in a real browser, during `make demo`'s walkthrough (devtools.demo): three dev backfill
runs of text_classifier_finetune queue on the single ClusterQueue and a prod run preempts the running one.
The walkthrough's own outcome is checked here too, as `make demo` checks it: the demo's table, prod first,
the preempted run's log, and backfills clamped to dev-priority although their conf asks for prod.

Chromium (headless) shows Airflow's own UI; the Kueue pages are Airflow's iframes. What is asserted is
what a user sees there:

* the queues page lists the pending workloads in Kueue's order with Kueue's positions (compared with
  Kueue's visibility API at the same moment), the admitted ones, and the prod run among them;
* a pending task's Kueue tab moves up the queue by itself when a RayJob ahead finishes (no reload);
* the preempted task's Kueue tab shows the preemption in its timeline and names the prod run;
* a user who may not read the DAG sees counts only on the queues page and nothing on its tasks' tab,
  while seeing their own DAG's RayJob;
* a deploy task's Kueue tab shows its RayService serving, admitted through its RayCluster's Workload;
* the queues page links that Workload to the deploy task, with what it uses, beside the team queue's
  preemption policy in words and its cohort.

The cluster going away is the package's last test (test_unreachable_cluster.py): it stops the kubesim.

The screenshots in docs/screenshots/ (README.md) are taken here, at those moments.
"""

from __future__ import annotations

import threading
import time
from datetime import date

import httpx
import pytest
from kueue_ray.links import kueue_tab_path

from devtools import demo
from devtools.airflow import ROOT
from devtools.demo import running_backfill_rayjob
from tests.browser.conftest import SANDBOX_DAG
from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(1200)

DAG = "text_classifier_finetune"
QUEUE = "cluster-queue"
QUEUES_PAGE = "/plugin/kueue-queues"
QUEUES_FRAME = "Kueue"  # the navigation label, which Airflow gives the page's iframe as its title
SCREENSHOTS = ROOT / "docs" / "screenshots"
SERVING_DAG = "aurora_finetune_and_serve"

PAGE_PENDING = f"""
return [...document.querySelectorAll('.pending[data-cq="{QUEUE}"] .pending-row')].map(
  r => [Number(r.dataset.position), r.dataset.workload, r.dataset.runId])
"""
PAGE_ADMITTED = f"""
return [...document.querySelectorAll('.admitted[data-cq="{QUEUE}"] .admitted-row')].map(r => r.dataset.runId)
"""
PAGE_HIDDEN = f"""
return [...document.querySelectorAll('[data-cq="{QUEUE}"] .hidden-count')].map(n => Number(n.dataset.hidden))
"""
TEAM_A_ADMITTED = """
return [...document.querySelectorAll('.admitted[data-cq="team-a-cq"] .admitted-row')].map(r => ({
  run: r.dataset.runId || null, task: r.dataset.taskId || null, workload: r.dataset.workload,
  requests: r.querySelector('.requests').innerText,
  object: r.querySelector('.owner-object') ? r.querySelector('.owner-object').innerText : null,
  tab: r.querySelector('a.muted') ? r.querySelector('a.muted').getAttribute('href') : null,
}))
"""
RECORD_POSITIONS = """
window.__positions = [];
window.__banners = [];
window.__recorder = setInterval(() => {
  const node = document.getElementById('position');
  const value = node ? node.dataset.position : null;
  if (value !== null && value !== window.__positions[window.__positions.length - 1]) window.__positions.push(value);
  const banner = document.getElementById('banner');
  const said = banner && !banner.hidden ? `${new Date().toISOString()} ${banner.innerText}` : '';
  const last = window.__banners[window.__banners.length - 1] || '';
  if (said.slice(25) !== last.slice(25)) window.__banners.push(said);
}, 100);
"""


def kueue_pending(ui) -> list[list]:
    """Kueue's own answer: the ClusterQueue's pending workloads with 1-based positions."""
    summary = ui.custom.api_client.call_api(
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{QUEUE}/pendingworkloads",
        "GET",
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    return [[i["positionInClusterQueue"] + 1, i["metadata"]["name"]] for i in summary.get("items") or ()]


LAST_COMPARED: dict = {}
"""What ``page_matches_kueue`` compared last: said when a wait for it runs out."""


def page_matches_kueue(browser, ui, backfill_runs: int):
    """The page's (position, workload) rows equal Kueue's list, with ``backfill_runs`` of the backfill's
    runs among them (the DAG's own scheduled run may be queued too)."""
    rows = browser.js(PAGE_PENDING)
    expected = kueue_pending(ui)
    LAST_COMPARED.update(
        page=rows, kueue=expected, banner=browser.js("return document.getElementById('banner').innerText")
    )
    shown = [[position, workload] for position, workload, _ in rows]
    backfill = sum(run_id.startswith("backfill__") for _, _, run_id in rows)
    return backfill == backfill_runs and shown == expected and rows


class KueuePositions:
    """What Kueue's visibility API said one Workload's 1-based position was, each time that changed (a
    thread asks every 0.25 s; "" once it is no longer pending): what its Kueue tab had to follow."""

    def __init__(self, ui, workload: str) -> None:
        self.ui, self.workload = ui, workload
        self.changes: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._record, daemon=True)
        self._thread.start()

    def _record(self) -> None:
        while not self._stop.wait(0.25):
            try:
                pending = kueue_pending(self.ui)
            except Exception:  # a slow or refused read: the next one tells
                continue
            position = next((str(p) for p, name in pending if name == self.workload), "")
            if not self.changes or self.changes[-1][1] != position:
                self.changes.append((time.monotonic(), position))

    def stop(self) -> list[tuple[str, float]]:
        """Each position Kueue gave, with how many seconds it held it."""
        self._stop.set()
        self._thread.join()
        ends = [at for at, _ in self.changes[1:]] + [time.monotonic()]
        return [(position, end - at) for (at, position), end in zip(self.changes, ends, strict=True)]


def tab(run_id: str, task_id: str, dag_id: str = DAG) -> str:
    return kueue_tab_path(dag_id, run_id, task_id)


@pytest.fixture(scope="module")
def walkthrough(ui, browsers, ui_kubesim, passwords):
    """Run the walkthrough while the browsers look; return what they saw at each moment."""
    seen: dict = {}
    ops, ops_tab, outsider = browsers("ops"), browsers("ops", "tab"), browsers("outsider")
    # Unpaused first, so the DAG's own scheduled run queues ahead of the backfill.
    ui.unpause(DAG)
    ui.unpause(SANDBOX_DAG)
    sandbox_run = ui.start_run(SANDBOX_DAG)
    # The serving pipeline's scheduled run (unpausing makes it) runs beside the walkthrough, on the team
    # queues (team-a), not the single queue.
    ui.unpause(SERVING_DAG)
    ops.open_in_airflow(QUEUES_PAGE, QUEUES_FRAME)

    def before_prod() -> None:
        # 0. The running backfill run's wait task saw its RayJob run (then its timeline shows the
        #    preemption after the running span, not a catch-up).
        running = running_backfill_rayjob(ui.rayjobs())
        running_run = running["metadata"]["annotations"]["airflow.apache.org/run-id"]
        wait_until(
            lambda: ": RUNNING (" in ui.every_try_log(DAG, running_run, "wait"),
            timeout=60,
            what="the running backfill run's wait task seeing it run",
        )
        # 1. Two dev runs wait behind the running one: the page shows Kueue's order and positions.
        seen["before_prod"] = ops.wait(
            lambda: page_matches_kueue(ops, ui, 2), 60, "2 backfill runs pending, as Kueue has them"
        )
        # The last backfill run in the queue (the DAG's scheduled run may queue behind it and outlast
        # the walkthrough).
        [_, workload, last_backfill] = [
            row for row in seen["before_prod"] if row[2].startswith("backfill__")
        ][-1]
        ops_tab.open_in_airflow(tab(last_backfill, "wait"), "Kueue")
        ops_tab.js(RECORD_POSITIONS)
        seen["kueue_positions"] = KueuePositions(ui, workload)

    def after_prod(prod_id: str) -> None:
        # 2. The prod run arrives and preempts the running dev run.
        seen["prod_id"] = prod_id
        ops.wait(lambda: prod_id in ops.js(PAGE_ADMITTED), 120, "the prod run admitted on the queues page")
        try:
            seen["after_prod"] = ops.wait(
                lambda: page_matches_kueue(ops, ui, 3), 60, "the preempted run pending again"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last compared: {LAST_COMPARED}") from exc
        seen["admitted_after_prod"] = ops.js(PAGE_ADMITTED)
        ops.screenshot(SCREENSHOTS / "kueue-queues.png")
        outsider.open_in_airflow(QUEUES_PAGE, QUEUES_FRAME)
        outsider.wait(
            lambda: outsider.js("return document.querySelectorAll('.hidden-count').length"), 30, "counts"
        )
        seen["outsider_queues_text"] = outsider.text()
        seen["outsider_hidden"] = outsider.js(PAGE_HIDDEN)
        outsider.screenshot(SCREENSHOTS / "kueue-queues-restricted.png")

    # 3. `make demo`'s walkthrough runs every run to its end; meanwhile the tab of the last queued run
    #    moved up by itself.
    done = demo.walkthrough(
        ui.airflow,
        ui_kubesim.kubeconfig,
        first_day=date(2026, 10, 1),
        deadline=time.monotonic() + 600,
        say=lambda line: None,
        before_prod=before_prod,
        after_prod=after_prod,
    )
    prod_id = done.prod_run_id
    backfill = [run for run_id, run in done.runs.items() if run_id != prod_id]
    seen["finished"] = done.runs
    seen["runs"] = {run_id: run["state"] for run_id, run in done.runs.items()}
    seen["tab_positions"] = ops_tab.js("return window.__positions")
    seen["kueue_positions"] = seen["kueue_positions"].stop()
    seen["tab_banners"] = ops_tab.js("return window.__banners")

    # 4. The preempted run's Kueue tab, after the fact.
    timelines = {
        run["dag_run_id"]: ui.xcom(DAG, run["dag_run_id"], "wait", key="timeline") for run in backfill
    }
    preempted = [run_id for run_id, t in timelines.items() if t["preemption_count"]]
    seen["preempted_runs"] = preempted
    ops_tab.open_in_airflow(tab(preempted[0], "wait"), "Kueue")
    ops_tab.wait(
        lambda: ops_tab.js("return document.querySelector('.span[data-kind=\"preempted\"] .preemptor')"), 60
    )
    seen["preempted_tab"] = {
        "spans": ops_tab.js("return [...document.querySelectorAll('.span')].map(r => r.dataset.kind)"),
        "preemptor": ops_tab.js(
            "return document.querySelector('.span[data-kind=\"preempted\"] .preemptor').innerText"
        ),
        "preemptor_href": ops_tab.js(
            "return document.querySelector('.span[data-kind=\"preempted\"] .preemptor a').getAttribute('href')"
        ),
        "phase": ops_tab.js("return document.getElementById('phase').dataset.phase"),
        "text": ops_tab.text(),
    }
    ops_tab.screenshot(SCREENSHOTS / "kueue-tab.png")

    # 4b. The deploy task's Kueue tab: its RayService, serving, admitted through its RayCluster's Workload.
    # Its scheduled run (tests/browser/test_kueue_tab_why_queued.py may have added a manual one).
    [serving] = [run for run in ui.runs(SERVING_DAG) if run["run_type"] == "scheduled"]
    serving_run = serving["dag_run_id"]
    seen["serving_run"] = ui.wait_run(SERVING_DAG, serving_run, timeout=300)
    ops_tab.open_in_airflow(tab(serving_run, "deploy_serve", SERVING_DAG), "Kueue")
    ops_tab.wait(
        lambda: ops_tab.js("return document.getElementById('phase').dataset.phase === 'SERVING'"),
        60,
        "the RayService tab saying SERVING",
    )
    seen["service_tab"] = {
        key: ops_tab.js(f"return document.getElementById('{key}').innerText")
        for key in (
            "rayservice",
            "workload",
            "local-queue",
            "cluster-queue",
            "active-cluster",
            "applications",
        )
    } | {
        "queue_href": ops_tab.js("return document.getElementById('queue-link').getAttribute('href')"),
        "recorded": ops_tab.js("return document.getElementById('service-timeline').innerText"),
        "rayservices": ui.custom.list_namespaced_custom_object("ray.io", "v1", "ray", "rayservices")["items"],
        "workloads": ui.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", "ray", "workloads")[
            "items"
        ],
    }
    ops_tab.screenshot(SCREENSHOTS / "kueue-tab-rayservice.png")

    # 4c. The queues page: who holds team-a's quota. The RayService's Workload is linked to the deploy
    #     task, with what it uses; the team queue's policy and its cohort are drawn.
    ops.open_in_airflow(QUEUES_PAGE, QUEUES_FRAME)
    seen["serving_rows"] = ops.wait(
        lambda: [row for row in ops.js(TEAM_A_ADMITTED) if row["task"] == "deploy_serve"],
        60,
        "the deploy task's Workload admitted on team-a-cq",
    )
    seen["serving_workloads"] = ui.custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", "ray", "workloads"
    )["items"]
    seen["team_a_policy"] = ops.js(
        "return [...document.querySelectorAll('.policy[data-cq=\"team-a-cq\"] .policy-line')].map(n => n.innerText)"
    )
    seen["cohort_members"] = ops.js(
        "return [...document.querySelectorAll('.cohort-member')].map(r => r.dataset.cq)"
    )
    ops.js("document.querySelector('.admitted[data-cq=\"team-a-cq\"]').scrollIntoView({block: 'center'})")
    ops.screenshot(SCREENSHOTS / "kueue-queues-rayservice.png")

    # 5. The outsider on a walkthrough task (the iframe's own page, as Airflow would load it) and on
    #    their own DAG's task.
    outsider.open_bare(f"/kueue/task-instance?dag_id={DAG}&run_id={preempted[0]}&task_id=wait&map_index=-1")
    outsider.wait(lambda: outsider.js("return document.getElementById('denied')"), 60, "the refusal")
    seen["outsider_tab_text"] = outsider.text()
    ui.wait_run(SANDBOX_DAG, sandbox_run, timeout=120)
    outsider.open_in_airflow(tab(sandbox_run, "submit", SANDBOX_DAG), "Kueue")
    outsider.wait(lambda: outsider.js("return document.getElementById('rayjob')"), 60, "the sandbox RayJob")
    seen["outsider_own_tab"] = outsider.text()
    token = httpx.post(
        f"{ui.airflow.url}/auth/token", json={"username": "outsider", "password": passwords["outsider"]}
    ).json()["access_token"]
    params = {"dag_id": DAG, "run_id": preempted[0], "task_id": "wait"}
    seen["api_codes"] = {
        "outsider": httpx.get(
            f"{ui.airflow.url}/kueue/api/v1/task-instance",
            params=params,
            headers={"Authorization": f"Bearer {token}"},
        ).status_code,
        "anonymous": httpx.get(f"{ui.airflow.url}/kueue/api/v1/task-instance", params=params).status_code,
        "anonymous_page": httpx.get(f"{ui.airflow.url}/kueue/queues").status_code,
    }

    return seen


def test_every_run_succeeds_and_one_dev_run_was_preempted(walkthrough):
    assert set(walkthrough["runs"].values()) == {"success"}, walkthrough["runs"]
    assert len(walkthrough["preempted_runs"]) == 1


def test_the_demos_table_says_the_outcome_matches_the_walkthrough(ui, walkthrough):
    runs = sorted(walkthrough["finished"].values(), key=lambda run: run["dag_run_id"])
    rows = demo.timeline_rows(ui.airflow, runs)
    assert demo.matches_walkthrough(rows) == [], rows


def test_the_prod_run_finishes_first_at_prod_priority(ui, walkthrough):
    prod_id, runs = walkthrough["prod_id"], walkthrough["finished"]
    dev_ends = [run["end_date"] for run_id, run in runs.items() if run_id != prod_id]
    assert runs[prod_id]["end_date"] < min(dev_ends)
    assert ui.xcom(DAG, prod_id, "submit", key="rayjob")["priority"] == "prod-priority"


def test_the_preempted_dev_runs_log_tells_kueues_reason_and_names_the_prod_run(ui, walkthrough):
    [preempted] = walkthrough["preempted_runs"]
    timeline = ui.xcom(DAG, preempted, "wait", key="timeline")
    assert timeline["preemption_count"] == 1 and timeline["final_phase"] == "SUCCEEDED", timeline
    log = ui.task_log(DAG, preempted, "wait")
    assert "PREEMPTED" in log or "Preempted" in log
    assert "Preempted to accommodate" in log and "due to prioritization in the ClusterQueue" in log, log[
        -3000:
    ]
    # Kueue names the preemptor by UIDs only; the log names its RayJob and run (at the latest in the
    # closing lines, written when the preemptor's RayJob is long known).
    assert f"(DAG {DAG}, run {walkthrough['prod_id']}, task submit)" in log, log[-3000:]


def test_backfill_runs_are_dev_priority_even_when_conf_asks_for_prod(ui, walkthrough):
    for run_id, run in walkthrough["finished"].items():
        if run_id == walkthrough["prod_id"]:
            continue
        assert run["run_type"] == "backfill" and run["conf"] == demo.BACKFILL_CONF
        assert ui.xcom(DAG, run_id, "submit", key="rayjob")["priority"] == "dev-priority"
        assert "Priority dev-priority" in ui.task_log(DAG, run_id, "submit")


def test_the_queues_page_shows_kueues_pending_order_and_positions(walkthrough):
    """page_matches_kueue compared every (position, workload) with Kueue's visibility API at that moment;
    here: what those moments were. (The DAG's own scheduled run may be queued too.)"""
    before, after = walkthrough["before_prod"], walkthrough["after_prod"]
    assert [row[0] for row in before] == list(range(1, len(before) + 1))
    assert sum(row[2].startswith("backfill__") for row in before) == 2
    assert [row[0] for row in after] == list(range(1, len(after) + 1))
    # The prod run took the quota: the preempted dev run queues again with the other two.
    assert sum(row[2].startswith("backfill__") for row in after) == 3
    assert walkthrough["prod_id"] in walkthrough["admitted_after_prod"]


def test_a_pending_tasks_position_updates_without_a_reload_when_a_rayjob_finishes(walkthrough):
    positions = walkthrough["tab_positions"]
    assert positions is not None, "the tab was reloaded (its recorder is gone)"
    kueue = walkthrough["kueue_positions"]
    said = (positions, kueue, walkthrough["tab_banners"])
    assert positions[0] == str(len(walkthrough["before_prod"])), said
    assert positions[-1] == "", ("finally admitted: no position any more", said)
    # The tab shows only positions Kueue gave, in Kueue's order, and every one Kueue held long enough for
    # the tab's 2 s poll to see it (how long a RayJob ahead runs, and so whether Kueue puts the task at
    # position 1 for long, is up to the cluster).
    given = iter(position for position, _ in kueue)
    assert all(position in given for position in positions[1:]), said
    held = [position for position, seconds in kueue if seconds >= 8]
    assert all(position in positions for position in held), said


def test_the_preempted_tasks_timeline_names_the_prod_run(walkthrough):
    tab = walkthrough["preempted_tab"]
    kinds = tab["spans"]
    assert "preempted" in kinds and "requeued" in kinds and kinds[-1] == "finished", kinds
    assert kinds.index("running") < kinds.index("preempted") < kinds.index("requeued")
    assert f"DAG {DAG}, run {walkthrough['prod_id']}, task submit" in tab["preemptor"]
    assert tab["preemptor_href"] == tab_link(walkthrough["prod_id"], "submit")
    assert "Preempted to accommodate a workload" in tab["text"]
    assert tab["phase"] == "SUCCEEDED"


def tab_link(run_id: str, task_id: str) -> str:
    return kueue_tab_path(DAG, run_id, task_id)


def test_a_deploy_tasks_tab_shows_its_rayservice_serving_through_its_clusters_workload(walkthrough):
    assert walkthrough["serving_run"]["state"] == "success"
    tab = walkthrough["service_tab"]
    [service] = [
        s
        for s in tab["rayservices"]
        if (s["metadata"].get("annotations") or {}).get("airflow.apache.org/dag-id") == SERVING_DAG
    ]
    active = service["status"]["activeServiceStatus"]["rayClusterName"]
    assert tab["rayservice"] == f"ray/{service['metadata']['name']}"
    assert tab["active-cluster"] == active
    # The Workload Kueue admitted it through (the RayService's own, or its RayCluster's), on the team
    # queue the DAG asked for.
    owners = {service["metadata"]["name"], active}
    [workload] = [
        w["metadata"]["name"]
        for w in tab["workloads"]
        if {o["name"] for o in w["metadata"].get("ownerReferences") or ()} & owners
    ]
    assert tab["workload"].split(" ")[0] == workload, (tab["workload"], workload)
    assert tab["local-queue"] == "team-a" and tab["cluster-queue"] == "team-a-cq"
    assert tab["queue_href"].endswith("#cq-team-a-cq"), tab["queue_href"]
    assert "RUNNING" in tab["applications"], tab["applications"]
    assert "queued" in tab["recorded"] and "preemption(s)" in tab["recorded"]


def test_the_queues_page_links_the_rayservices_workload_to_its_deploy_task_with_its_requests(walkthrough):
    serving_run = walkthrough["serving_run"]["dag_run_id"]
    [row] = [row for row in walkthrough["serving_rows"] if row["run"] == serving_run]
    [service] = [
        s
        for s in walkthrough["service_tab"]["rayservices"]
        if (s["metadata"].get("annotations") or {}).get("airflow.apache.org/dag-id") == SERVING_DAG
    ]
    assert row["tab"] == kueue_tab_path(SERVING_DAG, serving_run, "deploy_serve")
    # Admitted through the RayService's RayCluster (or the RayService itself), named as such.
    assert service["metadata"]["name"] in row["object"], row
    # What it holds, as Kueue counts it: the admission's resource usage, in the quota's units.
    [workload] = [w for w in walkthrough["serving_workloads"] if w["metadata"]["name"] == row["workload"]]
    gpus = sum(
        int((a.get("resourceUsage") or {}).get("nvidia.com/gpu", 0))
        for a in workload["status"]["admission"]["podSetAssignments"]
    )
    assert gpus and f"{gpus} nvidia.com/gpu" in row["requests"], row
    assert " CPU" in row["requests"] and "Gi memory" in row["requests"] and "Ki" not in row["requests"], row
    # The team queue's policy in words, and its cohort with both teams.
    assert any("reclaimed by team-b-cq" in line for line in walkthrough["team_a_policy"]), walkthrough[
        "team_a_policy"
    ]
    assert {"team-a-cq", "team-b-cq"} <= set(walkthrough["cohort_members"])


def test_a_user_who_may_not_read_the_dag_sees_counts_only(walkthrough):
    text = walkthrough["outsider_queues_text"]
    assert DAG not in text and "backfill__" not in text and walkthrough["prod_id"] not in text
    assert sum(walkthrough["outsider_hidden"]) >= 4, walkthrough["outsider_hidden"]  # 3 pending, 1 admitted
    tab_text = walkthrough["outsider_tab_text"]
    assert "You may not read DAG" in tab_text and "rayjob-" not in tab_text and "Preempted" not in tab_text
    assert walkthrough["api_codes"] == {"outsider": 403, "anonymous": 401, "anonymous_page": 401}
    assert "sandbox-rayjob-submit" in walkthrough["outsider_own_tab"]  # their own DAG's RayJob, in full
