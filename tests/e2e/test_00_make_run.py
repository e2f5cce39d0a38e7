"""`make run` as a newcomer meets it, in a copy of this checkout with nothing beside it.

The first start reaches a healthy UI with every listener on loopback, every shipped DAG's first run
succeeds against kubesim, and every `sh` block of README.md works when pasted (so the README cannot drift
from what works). A second and a third start in the same checkout are healthy too, over the first one's
leftovers. The banner's restricted user sees, in Chromium, their DAG's workloads and only counts of the
others'. A taken port, or kubesim exiting, stops `make run` within seconds with the reason and that
part's log. `CLUSTER=multikueue` shows two RayJobs running at once on different worker clusters while a
third waits on the manager.

This module starts no Airflow but `make run`'s, one at a time; `make test` runs it in an xdist worker of
its own, beside the other groups of tests/conftest.py (``MAKE_RUN``). `make run` runs with TIME_SCALE=10
here (1 for the restricted user's start, 4 for the MultiKueue one).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx
import psutil
import pytest
from kueue_ray.links import kueue_tab_path

from devtools.airflow import PASSWORD, USERNAME, component_of, free_port
from devtools.chromium import Browser, ChromiumUnavailable, ensure_chromium
from devtools.run import READY_BANNER
from tests.e2e.harness import TERMINAL_RUN_STATES, log_text, wait_until

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
TIME_SCALE = "10"
SH_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```sh[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


def readme_sh_blocks(readme: Path) -> list[str]:
    """Every ```sh block of the README, dedented (blocks inside list items are indented)."""
    blocks = []
    for match in SH_BLOCK.finditer(readme.read_text()):
        indent = len(match["indent"])
        blocks.append("".join(line[indent:] + "\n" for line in match["body"].splitlines()))
    return blocks


def copy_checkout(dest: Path) -> Path:
    """The checkout's files as a clone would have them (in a git work tree: tracked files plus new ones not
    ignored; else, e.g. CI's `git archive` export, everything but local state), and its venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        local_state = shutil.ignore_patterns(".venv", ".run", "__pycache__", ".pytest_cache", ".ruff_cache")
        shutil.copytree(ROOT, dest, ignore=local_state, symlinks=True)
    else:
        for name in filter(None, listed.stdout.decode().split("\0")):
            source = ROOT / name
            if source.is_file():
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


class MakeRun:
    """One `make run` in ``checkout``, driven like a terminal: started, read, and stopped with Ctrl-C."""

    def __init__(self, checkout: Path, port: int, **env: str) -> None:
        self.checkout = checkout
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.output_path = checkout.parent / f"make-run-{time.monotonic_ns()}.out"
        with self.output_path.open("wb") as output:
            self.process = subprocess.Popen(
                ["make", "run"],
                cwd=checkout,
                env={**os.environ, "AIRFLOW_PORT": str(port), "TIME_SCALE": TIME_SCALE, **env},
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    @property
    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 360) -> None:
        wait_until(
            lambda: READY_BANNER in self.output or self.process.poll() is not None,
            timeout=timeout,
            what=lambda: f"make run ready:\n{self.output[-3000:]}",
        )
        assert self.process.poll() is None, f"make run exited:\n{self.output[-3000:]}"

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> list[psutil.Process]:
        """Ctrl-C, then wait until make, kubesim and every Airflow process are gone; what survived."""
        started = self.descendants()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        self.process.wait(timeout=120)
        gone, alive = psutil.wait_procs(started, timeout=120)
        return alive

    def kill(self) -> None:
        """Only for a test that failed midway: leave nothing running."""
        for process in self.descendants():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


class Api:
    """The REST API of `make run`'s Airflow, logged in with the README's login."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=60)
        token = self.client.post("/auth/token", json={"username": USERNAME, "password": PASSWORD})
        token.raise_for_status()
        self.client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def get(self, path: str, **params) -> dict:
        response = self.client.get(f"/api/v2{path}", params=params)
        response.raise_for_status()
        return response.json()

    def runs(self, dag_id: str) -> list[dict]:
        return self.get(f"/dags/{dag_id}/dagRuns", limit=100)["dag_runs"]

    def trigger(self, dag_id: str, conf: dict) -> str:
        response = self.client.post(
            f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf}
        )
        response.raise_for_status()
        return response.json()["dag_run_id"]

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        """The latest try's whole log, as the UI shows it."""
        try_number = self.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")["try_number"]
        response = self.client.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"Accept": "application/json"},
        )
        response.raise_for_status()
        return log_text(response.json())

    def mark_failed(self, dag_id: str, run_id: str, task_id: str) -> None:
        response = self.client.patch(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}", json={"new_state": "failed"}
        )
        response.raise_for_status()


def healthy(url: str) -> bool:
    """What a user sees: the UI's page loads, and every component reports healthy."""
    try:
        page = httpx.get(url, timeout=10, follow_redirects=True)
        health = httpx.get(f"{url}/api/v2/monitor/health", timeout=10).json()
    except httpx.HTTPError:
        return False
    return page.status_code == 200 and all(part.get("status") == "healthy" for part in health.values())


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return copy_checkout(tmp_path_factory.mktemp("clone") / "airflow-kueue-ray")


@pytest.fixture(scope="module")
def first_start(checkout):
    """The first `make run` in the copy, with a KUBECONFIG exported that must not be used."""
    run = MakeRun(checkout, free_port(), KUBECONFIG="/nonexistent/real-cluster.kubeconfig")
    try:
        run.wait_ready()
        yield run
    except BaseException:
        run.kill()
        raise
    left = run.stop()
    assert not left, f"make run left processes behind: {left}"


def test_the_first_start_reaches_a_healthy_ui_on_kubesim_whatever_kubeconfig_says(first_start):
    assert healthy(first_start.url)
    output = first_start.output
    assert "KUBECONFIG=/nonexistent/real-cluster.kubeconfig is ignored: make run uses kubesim" in output
    assert f"Airflow UI: {first_start.url}  login: {USERNAME} / {PASSWORD}" in output
    assert "DAGs start unpaused" in output


def test_every_listener_of_make_run_binds_loopback(first_start):
    """Nothing `make run` starts listens beyond this machine: kubesim, PostgreSQL, the api-server, and the
    log server that serves the workers' and the triggerer's logs (Airflow's own binds every interface)."""
    started = {first_start.process.pid} | {process.pid for process in first_start.descendants()}
    listening: dict[str, list] = {}
    for conn in psutil.net_connections(kind="inet"):
        if conn.pid in started and conn.status == psutil.CONN_LISTEN:
            with contextlib.suppress(psutil.NoSuchProcess):
                name = " ".join(psutil.Process(conn.pid).cmdline()).strip()
                listening.setdefault(name, []).append((conn.laddr.ip, conn.laddr.port))
    everywhere = {
        name: addrs
        for name, addrs in listening.items()
        if not all(ipaddress.ip_address(ip).is_loopback for ip, _ in addrs)
    }
    assert not everywhere, f"listening beyond loopback: {everywhere}"
    assert ("127.0.0.1", first_start.port) in [addr for addrs in listening.values() for addr in addrs]
    log_servers = [addrs for name, addrs in listening.items() if name.startswith("airflow serve-logs")]
    assert len(log_servers) == 1, listening  # the task logs of running and deferred tasks are still served
    assert any("kubesim" in name for name in listening), listening


def test_the_banners_read_only_user_reads_but_cannot_trigger(first_start):
    found = re.search(r"Read-only user: (\S+) / (\S+)  \(role viewer", first_start.output)
    assert found, first_start.output
    client = httpx.Client(base_url=first_start.url, timeout=60)
    token = client.post("/auth/token", json={"username": found[1], "password": found[2]})
    assert token.status_code in (200, 201), token.text
    client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    assert client.get("/api/v2/dags/text_classifier_finetune").status_code == 200
    trigger = client.post("/api/v2/dags/text_classifier_finetune/dagRuns", json={"logical_date": None})
    assert trigger.status_code == 403, trigger.text


def test_every_shipped_dags_first_run_succeeds(first_start):
    api = Api(first_start.url)
    assert api.get("/importErrors")["import_errors"] == []
    dag_ids = [dag["dag_id"] for dag in api.get("/dags", limit=100)["dags"]]
    shipped = {path.stem for path in (first_start.checkout / "dags").glob("*.py")}
    assert set(dag_ids) == shipped, "each DAG file defines the DAG of its name"

    def first_runs_done() -> dict[str, str] | None:
        states = {}
        for dag_id in dag_ids:
            runs = api.runs(dag_id)
            if not runs or runs[0]["state"] not in TERMINAL_RUN_STATES:
                return None
            states[dag_id] = runs[0]["state"]
        return states

    states = wait_until(first_runs_done, timeout=300, interval=2, what="every DAG's first run to finish")
    assert states == dict.fromkeys(dag_ids, "success")
    failed = {d: [r["dag_run_id"] for r in api.runs(d) if r["state"] == "failed"] for d in dag_ids}
    assert not any(failed.values()), failed


def test_the_readmes_shell_examples_work_as_pasted(first_start):
    """Every ```sh block of README.md, run by bash in the checkout next to `make run`, in a terminal that
    has not exported AIRFLOW_PORT (the blocks find `make run`'s port themselves)."""
    api = Api(first_start.url)
    before = {run["dag_run_id"] for run in api.runs("text_classifier_finetune")}
    blocks = readme_sh_blocks(first_start.checkout / "README.md")
    assert len(blocks) >= 4, "the README's CLI, REST and kubectl examples"
    for block in blocks:
        if "kubectl" in block and shutil.which("kubectl") is None:
            continue
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=first_start.checkout,
            env={key: value for key, value in os.environ.items() if key != "AIRFLOW_PORT"},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, (
            f"README block failed ({done.returncode}):\n{block}\n{done.stdout}\n{done.stderr}"
        )

    new = [run for run in api.runs("text_classifier_finetune") if run["dag_run_id"] not in before]
    prod = [
        run for run in new if run["run_type"] == "manual" and run["conf"].get("priority") == "prod-priority"
    ]
    assert len(prod) == 2, "one prod run from the CLI example, one from the REST example"
    (backfill,) = api.get("/backfills", dag_id="text_classifier_finetune")["backfills"]
    assert backfill["dag_run_conf"] == {"epochs": 2}, "the README's backfill carries its params"

    # The walkthrough's queue holds one RayJob: while the others wait, their deferred `wait` tasks
    # already link to the Ray dashboard and to the task's Kueue tab in this Airflow. Airflow 3.3.2's task
    # runner reports the deferral first and writes the links' XComs after it (task_runner.finalize), so a
    # wait seen deferred a moment ago may not have them yet: the first deferred wait that has any.
    def a_deferred_wait_link() -> tuple[str, dict] | None:
        for run in api.runs("text_classifier_finetune"):
            wait = api.get(f"/dags/text_classifier_finetune/dagRuns/{run['dag_run_id']}/taskInstances/wait")
            if wait["state"] != "deferred":
                continue
            links = api.get(
                f"/dags/text_classifier_finetune/dagRuns/{run['dag_run_id']}/taskInstances/wait/links"
            )
            if any(links["extra_links"].values()):
                return run["dag_run_id"], links
        return None

    run_id, links = wait_until(a_deferred_wait_link, timeout=120, interval=1, what="a deferred wait task")
    assert links["extra_links"]["Ray dashboard"] == "http://localhost:8265/#/jobs"
    kueue_tab = links["extra_links"]["Kueue"]
    assert kueue_tab.startswith(first_start.url.rstrip("/") + "/dags/text_classifier_finetune/runs/")
    assert kueue_tab.endswith("/tasks/wait/plugin/kueue") and quote(run_id, safe="") in kueue_tab

    def all_done() -> list[dict] | None:
        runs = api.runs("text_classifier_finetune")
        return runs if all(run["state"] in TERMINAL_RUN_STATES for run in runs) else None

    runs = wait_until(all_done, timeout=300, interval=2, what="the README's runs to finish")
    assert {run["dag_run_id"]: run["state"] for run in runs} == {run["dag_run_id"]: "success" for run in runs}


def is_top_scheduler(process: psutil.Process) -> bool:
    """The scheduler's own process, not one it forked; a process that has just exited (or is a zombie
    not yet reaped, as Airflow's short-lived children can be) is none."""
    try:
        return component_of(process.cmdline()) == "scheduler" and (
            component_of(process.parent().cmdline()) != "scheduler"
        )
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False


def test_second_and_third_starts_in_the_same_checkout_are_healthy_and_fresh(checkout, first_start):
    first_start.stop()
    for start in ("second", "third"):
        run = MakeRun(checkout, first_start.port)
        try:
            run.wait_ready()
            assert healthy(run.url), f"{start} start"
            runs = Api(run.url).runs("text_classifier_finetune")
            assert not [r for r in runs if r["run_type"] == "manual"], "the previous start's runs are gone"
            assert (checkout / ".run" / "previous" / "airflow" / "airflow.log").exists()
        except BaseException:
            run.kill()
            raise
        if start == "second":
            assert not run.stop(), "the second start left processes behind"
    # The third start loses its scheduler: make run starts stopping at once (within 15 s), ends once
    # Airflow's other components and kubesim have stopped (17.6 s in all in a CI run with the two cores
    # busy), and says why with the scheduler's log.
    try:
        [scheduler] = [p for p in run.descendants() if is_top_scheduler(p)]
        others = [p for p in run.descendants() if p.pid != scheduler.pid]
        scheduler.kill()
        wait_until(
            lambda: "\nStopping..." in run.output,
            timeout=15,
            interval=0.2,
            what=lambda: f"make run noticing its scheduler's exit:\n{run.output[-2000:]}",
        )
        run.process.wait(timeout=60)
    except BaseException:
        run.kill()
        raise
    assert run.process.returncode != 0
    assert "make run failed: airflow scheduler exited; its last lines in" in run.output
    assert "\nscheduler  | " in run.output.split("make run failed:")[1]
    _, alive = psutil.wait_procs(others, timeout=120)
    assert not alive, f"Airflow or kubesim outlived make run: {alive}"


RESTRICTED_BANNER = re.compile(
    r"Restricted user: (\S+) / (\S+)  \(role user, team \S+: reads and runs (\S+) only"
)
QUEUES_PAGE_ROWS = """
return {
  rows: [...document.querySelectorAll('.pending-row, .admitted-row')].map(r => r.innerText),
  hidden: [...document.querySelectorAll('.hidden-count')].reduce((n, e) => n + Number(e.dataset.hidden), 0),
}
"""


@contextlib.contextmanager
def admin_client(url: str) -> Iterator[httpx.Client]:
    """The REST API, and the Kueue UI's, as the README's admin."""
    with httpx.Client(base_url=url, timeout=60) as client:
        token = client.post("/auth/token", json={"username": USERNAME, "password": PASSWORD})
        token.raise_for_status()
        client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        yield client


def workload_dags(admin: httpx.Client) -> set[str]:
    """The DAGs whose workloads the queues page shows the admin now (pending or admitted)."""
    queues = admin.get("/kueue/api/v1/queues")
    queues.raise_for_status()
    return {
        item["owner"].get("dag_id")
        for cq in queues.json()["cluster_queues"]
        for section in ("pending", "admitted")
        for item in cq[section]["items"]
    }


def test_the_banners_restricted_user_sees_their_dags_workloads_and_counts_of_the_others(
    checkout, first_start
):
    """In Chromium, signed in with the restricted login the banner prints: the Kueue queues page shows
    their DAG's workloads and the other DAGs' as counts, their task's Kueue tab its RayJob, another DAG's
    task's tab nothing. A start of its own at TIME_SCALE=1 (the first start stopped: one `make run` per
    checkout), so that the first runs of every DAG hold their workloads side by side for minutes."""
    try:
        chromium = ensure_chromium()
    except ChromiumUnavailable as exc:
        pytest.skip(str(exc))
    first_start.stop()
    make_run = MakeRun(checkout, free_port(), TIME_SCALE="1")
    try:
        make_run.wait_ready()
        with admin_client(make_run.url) as admin:
            restricted_user_sees_their_workloads_only(make_run, admin, chromium)
    except BaseException:
        make_run.kill()
        raise
    assert not make_run.stop(), "make run left processes behind"


def restricted_user_sees_their_workloads_only(make_run: MakeRun, admin: httpx.Client, chromium) -> None:
    found = RESTRICTED_BANNER.search(make_run.output)
    assert found, make_run.output[-3000:]
    user, password, dag_id = found.groups()
    others = {dag["dag_id"] for dag in admin.get("/api/v2/dags").json()["dags"]} - {dag_id}
    assert others, "make run has DAGs the restricted user may not read"

    browser = Browser(chromium, make_run.url, user)
    try:
        browser.sign_in(user, password)
        # Airflow lists them their DAG only.
        # httpx's 5 s default timed out once with every part of `make test` running beside it (2026-12-06).
        token = httpx.post(
            f"{make_run.url}/auth/token", json={"username": user, "password": password}, timeout=60
        )
        token.raise_for_status()
        listed = httpx.get(
            f"{make_run.url}/api/v2/dags",
            headers={"Authorization": f"Bearer {token.json()['access_token']}"},
            timeout=60,
        ).json()
        assert [dag["dag_id"] for dag in listed["dags"]] == [dag_id]

        # Queues page: their DAG's workloads in full while the others' are there as counts only.
        browser.open_in_airflow("/plugin/kueue-queues", "Kueue")  # the nav label is the iframe title

        def both_kinds_shown() -> dict | None:
            page = browser.js(QUEUES_PAGE_ROWS)
            return page if page["rows"] and page["hidden"] and workload_dags(admin) & others else None

        page = browser.wait(both_kinds_shown, 300, "their DAG's workloads and counts of the others'")
        text = browser.text()
        assert all(f"{dag_id} / " in row for row in page["rows"]), page["rows"]
        assert not [other for other in others if other in text], text

        # Kueue tabs: their DAG's task shows its RayJob; another DAG's task shows nothing of it.
        run = wait_until(
            lambda: admin.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["dag_runs"],
            timeout=60,
            what=f"a run of {dag_id}",
        )[0]
        browser.open_in_airflow(kueue_tab_path(dag_id, run["dag_run_id"], "wait"), "Kueue")
        browser.wait(lambda: browser.js("return document.getElementById('rayjob')"), 120, "their RayJob")
        other_dag = sorted(others & workload_dags(admin) or others)[0]
        other_run = wait_until(
            lambda: admin.get(f"/api/v2/dags/{other_dag}/dagRuns").json()["dag_runs"],
            timeout=60,
            what=f"a run of {other_dag}",
        )[0]
        other_task = admin.get(
            f"/api/v2/dags/{other_dag}/dagRuns/{other_run['dag_run_id']}/taskInstances"
        ).json()["task_instances"][0]["task_id"]
        query = {
            "dag_id": other_dag,
            "run_id": other_run["dag_run_id"],
            "task_id": other_task,
            "map_index": -1,
        }
        browser.open_bare(f"/kueue/task-instance?{urlencode(query)}")
        browser.wait(lambda: browser.js("return document.getElementById('denied')"), 60, "the refusal")
        assert "You may not read DAG" in browser.text() and "rayjob-" not in browser.text()
    finally:
        browser.quit()


def test_a_taken_port_stops_make_run_within_seconds_naming_the_holder(checkout):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        started = time.monotonic()
        run = MakeRun(checkout, port)
        try:
            run.process.wait(timeout=30)
        finally:
            run.kill()
    assert time.monotonic() - started < 30
    assert run.process.returncode != 0
    assert f"port {port} is already in use (pid {os.getpid()}" in run.output
    assert "Starting kubesim" not in run.output, "nothing is started when it cannot work"


def test_kubesim_exiting_stops_make_run_with_the_end_of_its_log(checkout):
    run = MakeRun(checkout, free_port())
    try:
        run.wait_ready()
        [kubesim] = [p for p in run.descendants() if "kubesim" in " ".join(p.cmdline())]
        airflow = [p for p in run.descendants() if p.pid != kubesim.pid]
        kubesim.kill()
        wait_until(  # starts stopping at once; ends once Airflow has stopped
            lambda: "\nStopping..." in run.output,
            timeout=15,
            interval=0.2,
            what=lambda: f"make run noticing kubesim's exit:\n{run.output[-2000:]}",
        )
        run.process.wait(timeout=60)
    except BaseException:
        run.kill()
        raise
    assert run.process.returncode != 0
    output = run.output
    assert "make run failed: kubesim exited with code -9; last lines of" in output
    assert "kubesim listening on https://127.0.0.1:" in output.split("make run failed:")[1]
    _, alive = psutil.wait_procs(airflow, timeout=120)
    assert not alive, f"Airflow outlived make run: {alive}"


def test_a_cluster_from_kubeconfig_is_used_only_when_asked_and_gets_every_dag_paused(
    checkout, first_start, tmp_path
):
    """CLUSTER=kubeconfig: Airflow uses that cluster (a separate kubesim plays it here), make run starts no
    kubesim of its own, and no DAG is unpaused, so nothing is scheduled onto a real cluster unasked."""
    from devtools.kubesim_process import start_kubesim

    first_start.stop()  # one make run per checkout at a time

    cluster = start_kubesim(tmp_path / "cluster")
    run = MakeRun(checkout, free_port(), CLUSTER="kubeconfig", KUBECONFIG=str(cluster.kubeconfig))
    try:
        run.wait_ready()
        assert (
            f"Cluster: REAL, from {cluster.kubeconfig} (context kubesim, server {cluster.url})" in run.output
        )
        assert "DAGs start paused (UNPAUSE=1 unpauses them)" in run.output
        assert not [p for p in run.descendants() if "kubesim" in " ".join(p.cmdline())]
        api = Api(run.url)
        shipped = {path.stem for path in (checkout / "dags").glob("*.py")}
        dags = wait_until(
            lambda: (
                (found := api.get("/dags", limit=100)["dags"])
                and {d["dag_id"] for d in found} == shipped
                and found
            ),
            timeout=120,
            what="every DAG to be parsed",
        )
        assert {dag["dag_id"]: dag["is_paused"] for dag in dags} == {dag["dag_id"]: True for dag in dags}
        assert all(not api.runs(dag["dag_id"]) for dag in dags)
    except BaseException:
        run.kill()
        raise
    finally:
        cluster.stop()
    assert not run.stop()


WORKER_CELLS = """
const section = document.querySelector('section.admitted[data-cq="multikueue-cq"]');
if (!section || ![...section.querySelectorAll('th')].some((th) => th.textContent === 'worker cluster')) return null;
return [...section.querySelectorAll('tr.admitted-row')].map((row) => [
  row.dataset.runId, row.children[3].textContent, row.querySelector('td.worker-cluster').textContent]);
"""
"""The queues page's admitted rows of multikueue-cq: run id, phase and worker cluster (null until shown)."""


def test_multikueue_runs_two_rayjobs_at_once_on_different_workers_while_a_third_waits(checkout, first_start):
    """CLUSTER=multikueue: kubesim as a MultiKueue manager of two workers with one GPU each, and the three
    text_classifier_finetune runs make run triggers on multikueue-queue: the Kueue queues page shows, in
    Chromium and in its JSON, two of their RayJobs running at once on worker1 and worker2 while the third
    waits in multikueue-cq, and a running one's Kueue tab names its worker; the third runs once one has
    finished, and every run succeeds. TIME_SCALE=4: each RayJob runs 50 s, long enough to look."""
    try:
        chromium = ensure_chromium()
    except ChromiumUnavailable as exc:
        pytest.skip(str(exc))
    first_start.stop()  # one make run per checkout at a time
    run = MakeRun(checkout, free_port(), CLUSTER="multikueue", TIME_SCALE="4")
    browser = None
    try:
        run.wait_ready()
        for worker in ("worker1", "worker2"):
            assert f"Worker {worker}: Airflow connection kueue_worker_{worker}" in run.output
        browser = Browser(chromium, run.url, USERNAME)
        browser.sign_in(USERNAME, PASSWORD)
        browser.open_in_airflow("/plugin/kueue-queues", "Kueue")
        triggered = wait_until(
            lambda: re.search(r"MultiKueue showcase: triggered 3 runs of \S+ on \S+ \(([^)]*)\)", run.output),
            timeout=300,
            what=lambda: f"the showcase's runs:\n{run.output[-2000:]}",
        )
        run_ids = triggered[1].split(", ")

        def two_running_on_the_page() -> dict | None:
            rows = browser.js(WORKER_CELLS) or []
            running = {run_id: worker for run_id, phase, worker in rows if phase == "RUNNING"}
            return running if sorted(running.values()) == ["worker1", "worker2"] else None

        shown = browser.wait(two_running_on_the_page, 240, "two RayJobs running on worker1 and worker2")
        assert set(shown) < set(run_ids)
        browser.js("document.getElementById('cq-multikueue-cq').scrollIntoView()")
        browser.screenshot(ROOT / "docs" / "screenshots" / "kueue-queues-multikueue.png")  # README.md
        with admin_client(run.url) as admin:

            def two_running_one_waiting() -> dict | None:
                queues = admin.get("/kueue/api/v1/queues")
                queues.raise_for_status()
                cq = next(c for c in queues.json()["cluster_queues"] if c["name"] == "multikueue-cq")
                running = {
                    item["owner"]["run_id"]: item["worker_cluster"]
                    for item in cq["admitted"]["items"]
                    if item["phase"] == "RUNNING"
                }
                if sorted(running.values()) == ["worker1", "worker2"] and cq["counts"]["pending"] == 1:
                    return running
                return None

            assert wait_until(two_running_one_waiting, timeout=30, interval=1, what="one waiting") == shown
        first_run, worker = sorted(shown.items())[0]
        browser.open_in_airflow(kueue_tab_path("text_classifier_finetune", first_run, "wait"), "Kueue")
        browser.wait(
            lambda: browser.js("return document.getElementById('worker-cluster')?.textContent") == worker,
            60,
            f"the tab naming {worker}",
        )
        api = Api(run.url)

        def states() -> dict[str, str] | None:
            found = {r: api.get(f"/dags/text_classifier_finetune/dagRuns/{r}")["state"] for r in run_ids}
            return found if set(found.values()) <= TERMINAL_RUN_STATES else None

        assert wait_until(states, timeout=400, interval=2, what="the three runs") == dict.fromkeys(
            run_ids, "success"
        )
        # Each wait task's log names the worker that ran its RayJob and carries the driver log from it
        # (followed there through the worker's connection: MultiKueue deletes the copy when the job ends).
        for run_id in run_ids:
            log = api.task_log("text_classifier_finetune", run_id, "wait")
            assert re.search(r": RUNNING \(.* in worker cluster worker[12]\]", log), log[-3000:]
            tail = log.partition("Last 50 lines of the Ray driver (submitter) log:")[2]
            assert re.search(r"epoch \d+/10 ", tail), log[-3000:]
        assert_kill_deletes_the_workers_copy(run, api)
    except BaseException:
        run.kill()
        raise
    finally:
        if browser is not None:
            browser.quit()
    assert not run.stop(), "make run left processes behind"


def assert_kill_deletes_the_workers_copy(run: MakeRun, api: Api) -> None:
    """A fourth run's wait task marked failed while its RayJob runs on a worker: the task's end deletes the
    manager's RayJob, and MultiKueue the worker's copy."""
    from kubernetes import client, config

    def clusters() -> dict[str, client.CustomObjectsApi]:
        paths = dict(re.findall(r"(?:Worker (\S+): .*?|  )kubectl --kubeconfig (\S+) get", run.output))
        return {
            name or "manager": client.CustomObjectsApi(
                config.new_client_from_config(str(run.checkout / path))
            )
            for name, path in paths.items()
        }

    apis = clusters()
    run_id = api.trigger("text_classifier_finetune", {"queue": "multikueue-queue", "epochs": 20})

    def running_copy() -> tuple[str, str] | None:
        for rayjob in apis["manager"].list_namespaced_custom_object("ray.io", "v1", "ray", "rayjobs")[
            "items"
        ]:
            if (rayjob["metadata"].get("annotations") or {}).get("airflow.apache.org/run-id") != run_id:
                continue
            name = rayjob["metadata"]["name"]
            for worker in ("worker1", "worker2"):
                try:
                    copy = apis[worker].get_namespaced_custom_object("ray.io", "v1", "ray", "rayjobs", name)
                except client.ApiException:
                    continue
                if (copy.get("status") or {}).get("jobStatus") == "RUNNING":
                    return worker, name
        return None

    worker, name = wait_until(
        running_copy, timeout=240, interval=1, what=f"run {run_id}'s RayJob running on a worker"
    )
    api.mark_failed("text_classifier_finetune", run_id, "wait")

    def gone(cluster: str) -> bool:
        try:
            apis[cluster].get_namespaced_custom_object("ray.io", "v1", "ray", "rayjobs", name)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait_until(lambda: gone("manager"), timeout=60, interval=1, what=f"the manager's RayJob {name} deleted")
    wait_until(lambda: gone(worker), timeout=60, interval=1, what=f"{worker}'s copy of {name} deleted")
