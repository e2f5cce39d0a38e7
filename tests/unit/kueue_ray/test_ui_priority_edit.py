"""The priority change on the Kueue tab: offered only to users who may edit the DAG, for a RayJob that
has not finished, with the classes the task's policy allows; refused over HTTP otherwise."""

from __future__ import annotations

from kueue_ray.ui import webapp
from kueue_ray.ui.priority_edit import offer

from tests.unit.kueue_ray.test_ui_webapp import client, signed_in  # noqa: F401 - the fixture

POLICY = {"allowed": ["dev-priority", "prod-priority"]}


def view(*, exists=True, terminal=False):
    return {
        "rayjob": {"exists": exists, "priority": {"class": "dev-priority", "value": 100}},
        "phase": {"terminal": terminal},
    }


def test_an_editor_is_offered_the_classes_the_policy_allows_for_the_runs_kind():
    assert offer(view(), {"priority_policy": POLICY, "run_type": "manual"}, True) == {
        "current": "dev-priority",
        "choices": ["dev-priority", "prod-priority"],
    }
    assert offer(view(), {"priority_policy": POLICY, "run_type": "backfill"}, True)["choices"] == [
        "dev-priority"
    ]


def test_nothing_is_offered_without_edit_rights_a_live_rayjob_or_a_policy():
    xcom = {"priority_policy": POLICY, "run_type": "manual"}
    assert offer(view(), xcom, False) is None
    assert offer(view(exists=False), xcom, True) is None
    assert offer(view(terminal=True), xcom, True) is None
    assert offer(view(), {"priority_policy": None, "run_type": "manual"}, True) is None


def test_a_user_who_may_not_edit_the_dag_is_refused_the_change(client, monkeypatch):  # noqa: F811
    test_client, app, _ = client
    signed_in(app)
    monkeypatch.setattr(webapp, "editable_dag", lambda user, dag_id: False)
    response = test_client.post(
        "/api/v1/task-instance/priority",
        params={"dag_id": "mine", "run_id": "r", "task_id": "t", "priority": "prod-priority"},
    )
    assert response.status_code == 403 and "may not edit DAG 'mine'" in response.json()["detail"]


def test_edit_rights_are_asked_once_per_user_within_the_ttl(monkeypatch):
    from types import SimpleNamespace

    from kueue_ray.ui.priority_edit import EditableDags

    asked = []

    class AuthManager:
        def get_authorized_dag_ids(self, *, user, method):
            asked.append(method)
            return {"mine"}

    monkeypatch.setattr("airflow.api_fastapi.app.get_auth_manager", lambda: AuthManager())
    now = [0.0]
    editable = EditableDags(ttl=5, clock=lambda: now[0])
    admin = SimpleNamespace(get_id=lambda: "admin")
    assert editable.may_edit(admin, "mine") and not editable.may_edit(admin, "theirs")
    now[0] = 6
    assert editable.may_edit(admin, "mine")
    assert asked == ["PUT", "PUT"]


def test_the_tab_says_who_changed_the_priority_from_airflow():
    from kueue_ray.naming import PRIORITY_CHANGED_BY_ANNOTATION
    from kueue_ray.ui.snapshot import Snapshot
    from kueue_ray.ui.views import TaskRef, task_view

    from tests.unit.kueue_ray.test_ui_views import DAG, FIRST, LINKS, PENDING, READER, T0, snapshot

    base = snapshot()
    rayjobs = [dict(r) for r in base.rayjobs]
    first = next(r for r in rayjobs if r["metadata"]["name"] == "rj-first")
    first["metadata"] = {
        **first["metadata"],
        "annotations": {
            **first["metadata"]["annotations"],
            PRIORITY_CHANGED_BY_ANNOTATION: "admin: dev-priority -> prod-priority",
        },
    }
    view = task_view(
        TaskRef(DAG, FIRST.run_id, "wait"),
        rayjob_xcom={"name": "rj-first", "namespace": "ray", "uid": "u-first", "queue": "default"},
        timeline_xcom=None,
        dashboard_link=None,
        snapshot=Snapshot(**{**vars(base), "rayjobs": rayjobs}),
        live_timeline=None,
        pending=PENDING,
        access=READER,
        links=LINKS,
        now=T0 + 100,
    )
    assert view["rayjob"]["priority_changed_by"] == "admin: dev-priority -> prod-priority"


def test_the_worker_a_rayjob_was_dispatched_to_is_read_from_its_workload_in_the_snapshot():
    from kueue_ray.ui.priority_edit import dispatched_to

    def workload(uid: str, namespace: str = "ml", **status) -> dict:
        labels = {"kueue.x-k8s.io/job-uid": uid}
        return {"metadata": {"namespace": namespace, "labels": labels}, "status": status}

    xcom = {"name": "train", "namespace": "ml", "uid": "u1"}
    assert dispatched_to([workload("u0", clusterName="w2"), workload("u1", clusterName="w1")], xcom) == "w1"
    assert dispatched_to([workload("u1", namespace="other", clusterName="w1")], xcom) is None
    assert dispatched_to([workload("u1")], xcom) is None
    assert dispatched_to([], xcom) is None
