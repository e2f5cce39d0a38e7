"""The Kueue tab's "Why still queued" in a real browser, in the Aurora case: the serving pipeline's
scheduled run deploys its RayService on team-a, then a manual run asks for 2 GPU workers (8 GPUs). The
prod-priority serving RayCluster keeps one of the cohort's 8 GPUs until someone deletes it, and a
dev-priority fine-tune may not preempt it: the tab names that holder with its deploy task and says it
"will not be admitted by waiting", and the task log says the same.

Then a node under maintenance (tainted, without the labels the pods select, and the only Node: kubesim
then places pods only where the kube-scheduler's filters let them) keeps a sandbox run's admitted RayJob's pods Pending: its tab shows
the head pod with the scheduler's Unschedulable reason until the node is gone and the job runs.

Runs before tests/browser/test_kueue_ui.py (file order) on the package's Airflow and kubesim, and lets go
of its stuck run at the end (the wait task marked failed deletes its RayJob), so the walkthrough finds the
team queues as the serving run left them.
"""

from __future__ import annotations

import pytest
from kueue_ray.links import kueue_tab_path

from devtools.airflow import ROOT
from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(900)

SERVING_DAG = "aurora_finetune_and_serve"
SCREENSHOTS = ROOT / "docs" / "screenshots"
WHY = """
const card = document.getElementById('why-queued');
if (!card) return null;
return {
  stuck: card.dataset.stuck,
  verdict: document.getElementById('why-verdict').innerText,
  holders: [...card.querySelectorAll('tr.holder')].map(r => [r.dataset.workload, r.innerText]),
  borrowing: document.getElementById('why-borrowing').innerText,
};
"""


@pytest.fixture(scope="module")
def stuck_aurora(ui, browsers):
    ui.unpause(SERVING_DAG)
    scheduled = wait_until(
        lambda: [r for r in ui.runs(SERVING_DAG) if r["run_type"] == "scheduled"],
        timeout=120,
        what="the serving pipeline's scheduled run",
    )[0]["dag_run_id"]
    assert ui.wait_run(SERVING_DAG, scheduled, timeout=420)["state"] == "success"
    run = ui.start_run(SERVING_DAG, {"gpu_workers": 2, "priority": "dev-priority"})
    ui.wait_ti_state(SERVING_DAG, run, "finetune", {"success"}, timeout=240)
    ops = browsers("ops", "why")
    ops.open_in_airflow(kueue_tab_path(SERVING_DAG, run, "finetune"), "Kueue")
    seen = ops.wait(lambda: (w := ops.js(WHY)) and w["holders"] and w, 120, "the 'why still queued' card")
    ops.screenshot(SCREENSHOTS / "kueue-tab-why-queued.png")
    log = wait_until(
        lambda: (
            (text := ui.every_try_log(SERVING_DAG, run, "wait_finetune"))
            and "why still queued" in text
            and text
        ),
        timeout=120,
        what="the wait task's 'why still queued' lines",
    )
    yield {"tab": seen, "log": log, "scheduled": scheduled, "run": run}
    ui.mark_failed(SERVING_DAG, run, "wait_finetune")
    ui.wait_run(SERVING_DAG, run, timeout=240)


def test_the_tab_names_the_serving_cluster_holding_the_gpu_and_says_waiting_will_not_admit_it(
    stuck_aurora, ui
):
    tab = stuck_aurora["tab"]
    assert tab["stuck"] == "true"
    assert "will not be admitted by waiting" in tab["verdict"].lower()
    assert "nvidia.com/gpu" in tab["verdict"]
    serving = [name for name, text in tab["holders"] if "deploy_serve" in text]
    assert serving, tab["holders"]
    [row] = [text for name, text in tab["holders"] if name == serving[0]]
    assert stuck_aurora["scheduled"] in row and "prod-priority" in row and "until deleted" in row
    assert "may not preempt" in row


def test_the_wait_tasks_log_says_it_will_not_be_admitted_by_waiting(stuck_aurora):
    assert (
        "why still queued: Will not be admitted by waiting: it needs 8 nvidia.com/gpu" in stuck_aurora["log"]
    )


PODS = """
return [...document.querySelectorAll('#pods tr.pod')].map(r => [r.dataset.pod, r.dataset.reason, r.innerText]);
"""
SANDBOX_DAG = "sandbox_rayjob"
MAINTENANCE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "browser-maintenance-0",
        "labels": {"kubernetes.io/hostname": "browser-maintenance-0"},
    },
    "spec": {"taints": [{"key": "maintenance", "value": "true", "effect": "NoSchedule"}]},
}


@pytest.fixture(scope="module")
def unschedulable_pods(stuck_aurora, ui, browsers):
    from kubernetes import client

    core = client.CoreV1Api(ui.custom.api_client)
    core.create_node(MAINTENANCE)
    try:
        ui.unpause(SANDBOX_DAG)
        run = ui.start_run(SANDBOX_DAG)
        ops = browsers("ops", "why")
        ops.open_in_airflow(kueue_tab_path(SANDBOX_DAG, run, "submit"), "Kueue")
        seen = ops.wait(
            lambda: (
                (rows := ops.js(PODS)) and any(reason == "Unschedulable" for _, reason, _ in rows) and rows
            ),
            180,
            "the head pod shown Unschedulable",
        )
        ops.screenshot(SCREENSHOTS / "kueue-tab-pods.png")
    finally:
        core.delete_node(MAINTENANCE["metadata"]["name"])
    yield {"pods": seen, "run": run, "run_state": ui.wait_run(SANDBOX_DAG, run, timeout=300)["state"]}


def test_an_admitted_jobs_pods_show_the_schedulers_reason_and_it_runs_once_they_fit(unschedulable_pods):
    [head] = [row for row in unschedulable_pods["pods"] if row[1] == "Unschedulable"]
    assert "head" in head[2]
    # The kube-scheduler's words: the node neither carries the labels the pod selects nor lacks a taint it
    # does not tolerate (the first failing filter is said).
    assert "Unschedulable: 0/1 nodes are available: 1 node(s)" in head[2]
    assert "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling." in head[2]
    assert unschedulable_pods["run_state"] == "success"


LLM_DAG = "llm_train_and_batch_inference"
POSITION = "return (document.getElementById('position') || {dataset: {}}).dataset.position"


def pending_order(ui, cluster_queue: str) -> list[str]:
    summary = ui.custom.api_client.call_api(
        f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{cluster_queue}/pendingworkloads",
        "GET",
        response_types_map={200: "object"},
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
    )
    return [item["metadata"]["name"] for item in summary.get("items") or ()]


@pytest.fixture(scope="module")
def priority_changed(stuck_aurora, unschedulable_pods, ui, browsers):
    """A second stuck run behind the Aurora one in team-a-cq (an 8-GPU LLM training, dev), made prod
    from its tab by admin; ops, a viewer, looks at the same tab."""
    ui.unpause(LLM_DAG)
    scheduled = wait_until(
        lambda: [r for r in ui.runs(LLM_DAG) if r["run_type"] == "scheduled"],
        timeout=120,
        what="LLM scheduled run",
    )[0]["dag_run_id"]
    ui.wait_run(LLM_DAG, scheduled, timeout=420)
    run = ui.start_run(LLM_DAG, {"train_gpu_workers": 2, "priority": "dev-priority"})
    ui.wait_ti_state(LLM_DAG, run, "train", {"success"}, timeout=240)
    [rayjob] = [
        r for r in ui.rayjobs() if r["metadata"]["annotations"].get("airflow.apache.org/run-id") == run
    ]
    workload = wait_until(
        lambda: [
            w["metadata"]["name"]
            for w in ui.workloads()
            if w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == rayjob["metadata"]["uid"]
        ],
        timeout=60,
        what="the LLM training's Workload",
    )[0]
    before = wait_until(
        lambda: (order := pending_order(ui, "team-a-cq")) and workload in order and order,
        timeout=120,
        what="the LLM training pending in team-a-cq",
    )
    viewer = browsers("ops", "why")
    viewer.open_in_airflow(kueue_tab_path(LLM_DAG, run, "train"), "Kueue")
    viewer.wait(lambda: viewer.js("return document.getElementById('rayjob')"), 60, "the viewer's tab")
    viewer_offered = viewer.js("return Boolean(document.getElementById('priority-change-card'))")
    admin = browsers("admin")
    admin.open_in_airflow(kueue_tab_path(LLM_DAG, run, "train"), "Kueue")
    admin.wait(
        lambda: admin.js("return document.getElementById('priority-select')"), 60, "the priority control"
    )
    choices = admin.js("return [...document.querySelectorAll('#priority-select option')].map(o => o.value)")
    admin.js(
        "document.getElementById('priority-select').value = 'prod-priority';"
        "document.getElementById('priority-change').click();"
    )
    result = admin.wait(
        lambda: (
            (node := admin.js("return document.getElementById('priority-result').dataset.status")) and node
        ),
        60,
        "the change's answer",
    )
    after = wait_until(
        lambda: (order := pending_order(ui, "team-a-cq")) and order[0] == workload and order,
        timeout=120,
        what="the LLM training first in team-a-cq",
    )
    position = admin.wait(lambda: admin.js(POSITION) == "1" and "1", 90, "the tab showing position 1")
    changed_by = admin.wait(
        lambda: admin.js("return (document.getElementById('priority-changed-by') || {}).innerText"),
        60,
        "the tab saying who changed the priority",
    )
    admin.screenshot(SCREENSHOTS / "kueue-tab-priority-change.png")
    log = wait_until(
        lambda: (
            (text := ui.every_try_log(LLM_DAG, run, "wait_train"))
            and "priority changed to prod-priority" in text
            and text
        ),
        timeout=120,
        what="the wait task's priority line",
    )
    yield {
        "workload": workload,
        "before": before,
        "after": after,
        "viewer_offered": viewer_offered,
        "choices": choices,
        "result": result,
        "position": position,
        "changed_by": changed_by,
        "log": log,
    }
    ui.mark_failed(LLM_DAG, run, "wait_train")
    ui.wait_run(LLM_DAG, run, timeout=240)


def test_a_priority_change_from_the_tab_reorders_the_queue(priority_changed):
    assert priority_changed["choices"] == ["dev-priority", "prod-priority"]
    assert priority_changed["result"] == "200"
    assert priority_changed["before"].index(priority_changed["workload"]) > 0
    assert priority_changed["after"][0] == priority_changed["workload"]
    assert priority_changed["position"] == "1"
    assert priority_changed["changed_by"] == "from Airflow by admin: dev-priority -> prod-priority"
    assert "(changed from Airflow by admin: dev-priority -> prod-priority)" in priority_changed["log"]


def test_a_user_without_edit_rights_is_not_offered_the_change(priority_changed):
    assert priority_changed["viewer_offered"] is False
