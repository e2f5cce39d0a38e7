"""The Kueue UI's HTTP surface without a cluster: who may call it, and what an unchanged cluster costs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from kueue_ray.ui import access, webapp
from kueue_ray.ui.access import Access, ReadableDags
from kueue_ray.ui.snapshot import Health, PendingRead, Snapshot

from tests.unit.kueue_ray.test_ui_views import CLUSTER_QUEUE, LOCAL_QUEUE, PENDING


class StubCache:
    """Just what the endpoints read of a ClusterCache."""

    def __init__(self) -> None:
        self.version = 7
        self.pending_reads = 0
        self.behind: set[str] = set()

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def snapshot(self) -> Snapshot:
        return Snapshot(
            [CLUSTER_QUEUE], [LOCAL_QUEUE], [], [], {}, ["ray"], Health(True, 0.0, None, None), self.version
        )

    async def pending(self, cluster_queue: str) -> PendingRead:
        self.pending_reads += 1
        return PENDING

    def pending_behind(self, cluster_queue: str) -> bool:
        return cluster_queue in self.behind

    def timeline(self, uid: str):
        return None


@pytest.fixture
def client(monkeypatch):
    cache = StubCache()
    app = webapp.create_app(cluster_cache=cache)
    monkeypatch.setattr(webapp, "airflow_root", lambda: "")
    monkeypatch.setattr(ReadableDags, "for_user", lambda self, user: Access("ops", frozenset({"mine"})))
    with TestClient(app) as test_client:
        yield test_client, app, cache


def signed_in(app) -> None:
    app.dependency_overrides[webapp.current_user] = lambda: SimpleNamespace(get_name=lambda: "ops")


def test_nothing_is_served_without_a_signed_in_airflow_user(client):
    test_client, _, _ = client
    for path in ("/queues", "/static/kueue.js", "/api/v1/queues", "/api/v1/openapi.json"):
        assert test_client.get(path).status_code == 401, path


def test_a_page_that_shows_the_current_version_gets_an_empty_answer(client):
    test_client, app, cache = client
    signed_in(app)
    full = test_client.get("/api/v1/queues")
    assert full.status_code == 200 and full.json()["version"] == 7
    assert cache.pending_reads == 1
    unchanged = test_client.get("/api/v1/queues", params={"known": 7})
    assert (unchanged.status_code, unchanged.content, cache.pending_reads) == (204, b"", 1)
    cache.version = 8
    assert test_client.get("/api/v1/queues", params={"known": 7}).json()["version"] == 8


def test_an_answer_whose_pending_list_is_older_than_its_queue_is_not_called_current(client):
    """The visibility API is read at most every ``visibility_min_interval``: a queue that changed within it
    is answered with the last list and no version, so the page asks again in full (and sees the new
    positions) instead of being told "unchanged" until the next change."""
    test_client, app, cache = client
    signed_in(app)
    name = CLUSTER_QUEUE["metadata"]["name"]
    cache.behind = {name}
    held_back = test_client.get("/api/v1/queues", params={"known": 6})
    assert held_back.status_code == 200 and held_back.json()["version"] is None
    cache.behind = set()
    assert test_client.get("/api/v1/queues").json()["version"] == 7


def test_the_tab_of_a_dag_the_user_may_not_read_is_refused(client):
    test_client, app, _ = client
    signed_in(app)
    response = test_client.get(
        "/api/v1/task-instance", params={"dag_id": "theirs", "run_id": "r", "task_id": "t"}
    )
    assert response.status_code == 403 and "theirs" in response.json()["detail"]


def test_readable_dags_are_asked_once_per_user_within_the_ttl(monkeypatch):
    asked = []

    class AuthManager:
        def get_authorized_dag_ids(self, *, user, method):
            asked.append((user.get_id(), method))
            return {"mine"}

    monkeypatch.setattr("airflow.api_fastapi.app.get_auth_manager", lambda: AuthManager())
    now = [0.0]
    readable = ReadableDags(ttl=5, clock=lambda: now[0])
    ops = SimpleNamespace(get_id=lambda: "ops", get_name=lambda: "ops")
    assert readable.for_user(ops).can_read("mine") and not readable.for_user(ops).can_read("theirs")
    now[0] = 6
    readable.for_user(ops)
    assert asked == [("ops", "GET"), ("ops", "GET")]
    assert access.Access("x", frozenset()).can_read(None) is False


def test_loading_the_plugin_in_a_worker_imports_neither_fastapi_nor_the_ui(tmp_path):
    """Task workers load every plugin (for macros); only the api-server builds the app."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('kueue_ray_ui_plugin', 'plugins/kueue_ray_ui_plugin.py')\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'kubernetes_asyncio')"
        " or m.startswith('kueue_ray.ui')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        env={"PYTHONPATH": str(root / "plugins"), "AIRFLOW_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_airflow_loads_the_plugins_folder_without_an_import_error(tmp_path):
    """Airflow runs every file of the plugins folder as a module of its own (``__init__.py`` files as
    ``__init__``); an error there is a plugin import error in Airflow's UI and logs."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    code = "import json\nfrom airflow import plugins_manager\nprint(json.dumps(plugins_manager.get_import_errors()))\n"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            "PYTHONPATH": str(root / "plugins"),
            "AIRFLOW_HOME": str(tmp_path),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "PATH": "/usr/bin:/bin",
        },
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "{}"


def test_the_plugins_urls_hold_no_placeholder_airflow_may_leave_and_its_nav_label_fits():
    """Airflow replaces {MAP_INDEX} only on a mapped task's page (the literal stayed in every other tab's
    URL), and its navigation cuts labels after about eight characters ("Kueue qu…")."""
    import importlib.util
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "plugins" / "kueue_ray_ui_plugin.py"
    spec = importlib.util.spec_from_file_location("kueue_ray_ui_plugin_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    views = {view["destination"]: view for view in module.KueueRayUIPlugin.external_views}
    assert len(views["nav"]["name"]) <= 8, views["nav"]["name"]
    assert "{" not in views["nav"]["href"]
    # The task instance's route always has these three; a map index only when the task is mapped.
    assert set(re.findall(r"\{[A-Z_]+\}", views["task_instance"]["href"])) == {
        "{DAG_ID}",
        "{RUN_ID}",
        "{TASK_ID}",
    }


def test_each_page_names_itself_and_is_never_cached(client):
    """The queues page and the task tab are one HTML shell: its title, heading and ``data-page`` (which
    ``kueue.js`` draws) must be each page's own."""
    test_client, app, _ = client
    signed_in(app)
    for path, page, title in (("/queues", "queues", "Kueue queues"), ("/task-instance", "task", "Kueue")):
        answer = test_client.get(path)
        assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store", path
        assert f"<title>{title}</title>" in answer.text and f"<h1>{title}</h1>" in answer.text, path
        assert f'data-page="{page}"' in answer.text and "$" not in answer.text, path
