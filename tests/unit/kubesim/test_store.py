"""The store behaves like the API server for CRUD, concurrency, status, generation, deletion and GC."""

import pytest

from kubesim.clock import Clock
from kubesim.errors import ApiError
from kubesim.resources import Registry
from kubesim.store import Store

RAYJOBS = "rayjobs.ray.io"
RAYCLUSTERS = "rayclusters.ray.io"


@pytest.fixture
def store() -> Store:
    return Store(Registry(crds_dir=None), Clock())


def rayjob(name="job", namespace="default", **extra) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, **extra},
        "spec": {"entrypoint": "python x.py"},
    }


def owned_by(owner: dict, name: str, kind: str = "RayCluster") -> dict:
    meta = owner["metadata"]
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": meta.get("namespace"), "ownerReferences": [ref]},
    }


def test_default_namespaces_exist(store):
    names = [ns["metadata"]["name"] for ns in store.list("namespaces")[0]]
    assert names == ["default", "kube-public", "kube-system"]
    assert store.get("namespaces", "default")["metadata"]["labels"] == {
        "kubernetes.io/metadata.name": "default"
    }


def test_create_fills_server_fields(store):
    created = store.create(RAYJOBS, rayjob())
    meta = created["metadata"]
    assert created["apiVersion"] == "ray.io/v1" and created["kind"] == "RayJob"
    assert meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["resourceVersion"] == store.resource_version()
    assert store.get(RAYJOBS, "job", namespace="default") == created


def test_create_drops_client_status_of_kinds_with_status_subresource(store):
    created = store.create(RAYJOBS, {**rayjob(), "status": {"jobStatus": "SUCCEEDED"}})
    assert "status" not in created


def test_returned_objects_are_copies(store):
    created = store.create(RAYJOBS, rayjob())
    created["spec"]["entrypoint"] = "changed"
    store.get(RAYJOBS, "job", namespace="default")["metadata"]["name"] = "changed"
    assert store.get(RAYJOBS, "job", namespace="default")["spec"]["entrypoint"] == "python x.py"


def test_generate_name(store):
    first = store.create(RAYJOBS, {"metadata": {"generateName": "train-", "namespace": "default"}})
    second = store.create(RAYJOBS, {"metadata": {"generateName": "train-", "namespace": "default"}})
    for obj in (first, second):
        assert (
            obj["metadata"]["name"].startswith("train-") and len(obj["metadata"]["name"]) == len("train-") + 5
        )
    assert first["metadata"]["name"] != second["metadata"]["name"]


def test_create_errors(store):
    store.create(RAYJOBS, rayjob())
    with pytest.raises(ApiError) as exists:
        store.create(RAYJOBS, rayjob())
    assert (exists.value.code, exists.value.reason) == (409, "AlreadyExists")
    assert exists.value.message == 'rayjobs.ray.io "job" already exists'
    with pytest.raises(ApiError) as no_ns:
        store.create(RAYJOBS, rayjob(namespace="nowhere"))
    assert (no_ns.value.code, no_ns.value.message) == (404, 'namespaces "nowhere" not found')
    with pytest.raises(ApiError) as mismatch:
        store.create(RAYJOBS, rayjob(namespace="default"), namespace="kube-system")
    assert mismatch.value.code == 400
    with pytest.raises(ApiError) as unknown:
        store.create("widgets.example.com", rayjob())
    assert unknown.value.code == 404


def test_namespace_argument_wins_when_body_has_none(store):
    created = store.create(RAYJOBS, {"metadata": {"name": "x"}}, namespace="kube-system")
    assert created["metadata"]["namespace"] == "kube-system"


def test_invalid_metadata_is_422_with_causes(store):
    with pytest.raises(ApiError) as err:
        store.create(RAYJOBS, rayjob(name="Bad_Name", labels={"ok": "has space"}))
    error = err.value
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message.startswith(
        'RayJob.ray.io "Bad_Name" is invalid: [metadata.name: Invalid value: "Bad_Name"'
    )
    assert {c["field"] for c in error.details["causes"]} == {"metadata.name", "metadata.labels"}
    assert error.status()["details"]["group"] == "ray.io"
    with pytest.raises(ApiError) as ns_err:
        store.create("namespaces", {"metadata": {"name": "a.b"}})  # namespaces are DNS labels, not subdomains
    assert ns_err.value.code == 422


def test_dry_run_persists_nothing(store):
    rv = store.resource_version()
    preview = store.create(RAYJOBS, rayjob(), dry_run=True)
    assert preview["metadata"]["uid"]
    assert store.resource_version() == rv
    with pytest.raises(ApiError):
        store.get(RAYJOBS, "job", namespace="default")


def test_update_with_stale_resource_version_conflicts(store):
    created = store.create(RAYJOBS, rayjob())
    created["spec"]["entrypoint"] = "v2"
    store.update(RAYJOBS, created)
    created["spec"]["entrypoint"] = "v3"
    with pytest.raises(ApiError) as err:
        store.update(RAYJOBS, created)
    assert err.value.code == 409 and err.value.reason == "Conflict"
    assert err.value.message == (
        'Operation cannot be fulfilled on rayjobs.ray.io "job": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def test_update_without_resource_version_is_unconditional(store):
    created = store.create(RAYJOBS, rayjob())
    del created["metadata"]["resourceVersion"]
    created["spec"]["entrypoint"] = "v2"
    assert store.update(RAYJOBS, created)["spec"]["entrypoint"] == "v2"


def test_update_keeps_server_owned_metadata(store):
    created = store.create(RAYJOBS, rayjob())
    changed = {**created, "metadata": {**created["metadata"], "creationTimestamp": "2000-01-01T00:00:00Z"}}
    assert (
        store.update(RAYJOBS, changed)["metadata"]["creationTimestamp"]
        == created["metadata"]["creationTimestamp"]
    )
    other_uid = {**created, "metadata": {**created["metadata"], "uid": "another"}}
    with pytest.raises(ApiError) as err:
        store.update(RAYJOBS, other_uid)
    assert err.value.code == 409


def test_generation_counts_spec_changes_only(store):
    created = store.create(RAYJOBS, rayjob())
    labelled = store.patch(RAYJOBS, "job", {"metadata": {"labels": {"a": "b"}}}, namespace="default")
    assert labelled["metadata"]["generation"] == 1
    assert labelled["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    status = store.patch(
        RAYJOBS, "job", {"status": {"jobStatus": "RUNNING"}}, namespace="default", subresource="status"
    )
    assert status["metadata"]["generation"] == 1
    spec = store.patch(RAYJOBS, "job", {"spec": {"suspend": True}}, namespace="default")
    assert spec["metadata"]["generation"] == 2


def test_noop_update_keeps_resource_version(store):
    created = store.create(RAYJOBS, rayjob())
    again = store.update(RAYJOBS, created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert store.resource_version() == created["metadata"]["resourceVersion"]


def test_status_subresource_separates_spec_and_status(store):
    created = store.create(RAYJOBS, rayjob())
    created["status"] = {"jobStatus": "RUNNING"}
    created["spec"]["entrypoint"] = "v2"
    main = store.update(RAYJOBS, created)
    assert "status" not in main and main["spec"]["entrypoint"] == "v2"
    main["status"] = {"jobStatus": "SUCCEEDED"}
    main["spec"]["entrypoint"] = "v3"
    main["metadata"]["labels"] = {"ignored": "yes"}
    status = store.update(RAYJOBS, main, subresource="status")
    assert status["status"] == {"jobStatus": "SUCCEEDED"}
    assert status["spec"]["entrypoint"] == "v2" and "labels" not in status["metadata"]


def test_kind_without_status_subresource_stores_status_and_rejects_status_writes(store):
    created = store.create(
        "configmaps", {"metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}}
    )
    with pytest.raises(ApiError) as err:
        store.update("configmaps", created, subresource="status")
    assert err.value.code == 404


def test_pods_start_pending(store):
    pod = store.create(
        "pods", {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}}
    )
    assert pod["status"] == {"phase": "Pending"}


def test_list_filters_by_namespace_and_selectors(store):
    store.create("namespaces", {"metadata": {"name": "team-a"}})
    store.create(RAYJOBS, rayjob("a", labels={"team": "a"}))
    store.create(RAYJOBS, rayjob("b", namespace="team-a", labels={"team": "b"}))
    store.create(RAYJOBS, rayjob("c", namespace="team-a"))
    everywhere, rv = store.list(RAYJOBS)
    assert [o["metadata"]["name"] for o in everywhere] == ["a", "b", "c"] and rv == store.resource_version()
    assert [o["metadata"]["name"] for o in store.list(RAYJOBS, namespace="team-a")[0]] == ["b", "c"]
    assert [o["metadata"]["name"] for o in store.list(RAYJOBS, label_selector="team")[0]] == ["a", "b"]
    assert [o["metadata"]["name"] for o in store.list(RAYJOBS, field_selector="metadata.name!=a")[0]] == [
        "b",
        "c",
    ]
    with pytest.raises(ApiError) as err:
        store.list(RAYJOBS, label_selector="team in (a")
    assert err.value.code == 400


# --- patches ---------------------------------------------------------------------------------------


def test_merge_patch_sets_and_removes_keys(store):
    store.create(RAYJOBS, rayjob(labels={"a": "1", "b": "2"}))
    patched = store.patch(
        RAYJOBS, "job", {"metadata": {"labels": {"a": None, "c": "3"}}}, namespace="default"
    )
    assert patched["metadata"]["labels"] == {"b": "2", "c": "3"}


def test_strategic_patch_ignores_directives(store):
    store.create(RAYJOBS, rayjob(labels={"a": "1"}))
    patch = {"metadata": {"labels": {"$patch": "replace", "b": "2"}}}
    patched = store.patch(RAYJOBS, "job", patch, patch_type="strategic", namespace="default")
    assert patched["metadata"]["labels"] == {"a": "1", "b": "2"}


def test_json_patch_operations(store):
    store.create(RAYJOBS, rayjob(annotations={"a/b": "x"}))
    ops = [
        {"op": "test", "path": "/metadata/annotations/a~1b", "value": "x"},
        {"op": "add", "path": "/spec/args", "value": ["one"]},
        {"op": "add", "path": "/spec/args/-", "value": "three"},
        {"op": "add", "path": "/spec/args/1", "value": "two"},
        {"op": "copy", "from": "/spec/entrypoint", "path": "/spec/copied"},
        {"op": "move", "from": "/spec/copied", "path": "/spec/moved"},
        {"op": "replace", "path": "/spec/entrypoint", "value": "python y.py"},
        {"op": "remove", "path": "/metadata/annotations/a~1b"},
    ]
    patched = store.patch(RAYJOBS, "job", ops, patch_type="json", namespace="default")
    assert patched["spec"] == {
        "entrypoint": "python y.py",
        "args": ["one", "two", "three"],
        "moved": "python x.py",
    }
    assert patched["metadata"].get("annotations") == {}


def test_failed_json_patch_test_changes_nothing(store):
    created = store.create(RAYJOBS, rayjob())
    ops = [
        {"op": "replace", "path": "/spec/entrypoint", "value": "y"},
        {"op": "test", "path": "/spec/suspend", "value": True},
    ]
    with pytest.raises(ApiError) as err:
        store.patch(RAYJOBS, "job", ops, patch_type="json", namespace="default")
    assert err.value.code == 422
    assert store.get(RAYJOBS, "job", namespace="default") == created
    with pytest.raises(ApiError) as malformed:
        store.patch(
            RAYJOBS, "job", [{"op": "explode", "path": "/spec"}], patch_type="json", namespace="default"
        )
    assert malformed.value.code == 400


def test_json_patch_test_distinguishes_true_from_one(store):
    store.create(RAYJOBS, {**rayjob(), "spec": {"suspend": True}})
    with pytest.raises(ApiError):
        store.patch(
            RAYJOBS,
            "job",
            [{"op": "test", "path": "/spec/suspend", "value": 1}],
            patch_type="json",
            namespace="default",
        )


def test_patch_carrying_a_stale_resource_version_conflicts(store):
    created = store.create(RAYJOBS, rayjob())
    store.patch(RAYJOBS, "job", {"spec": {"suspend": True}}, namespace="default")
    stale = {
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
        "spec": {"suspend": False},
    }
    with pytest.raises(ApiError) as err:
        store.patch(RAYJOBS, "job", stale, namespace="default")
    assert err.value.code == 409


def test_patch_of_missing_object_is_404(store):
    with pytest.raises(ApiError) as err:
        store.patch(RAYJOBS, "ghost", {"spec": {}}, namespace="default")
    assert (err.value.code, err.value.message) == (404, 'rayjobs.ray.io "ghost" not found')


# --- admission hooks -------------------------------------------------------------------------------


def test_admission_hooks_mutate_and_deny_in_order(store):
    calls = []

    def default_suspend(operation, rt, obj, old):
        calls.append((operation, rt.key, old is None))
        if rt.key == RAYJOBS:
            obj["spec"].setdefault("suspend", True)

    def deny_unsuspend(operation, rt, obj, old):
        if operation == "UPDATE" and rt.key == RAYJOBS and obj["spec"].get("suspend") is False:
            raise ApiError(403, "Forbidden", "admission webhook denied the request")

    store.add_admission_hook(default_suspend)
    store.add_admission_hook(deny_unsuspend)
    assert store.create(RAYJOBS, rayjob())["spec"]["suspend"] is True
    with pytest.raises(ApiError) as err:
        store.patch(RAYJOBS, "job", {"spec": {"suspend": False}}, namespace="default")
    assert err.value.code == 403
    assert store.get(RAYJOBS, "job", namespace="default")["spec"]["suspend"] is True
    store.patch(
        RAYJOBS, "job", {"status": {"jobStatus": "RUNNING"}}, namespace="default", subresource="status"
    )
    assert calls == [("CREATE", RAYJOBS, True), ("UPDATE", RAYJOBS, False)]


# --- deletion, finalizers, garbage collection ------------------------------------------------------


def test_delete_without_finalizers_removes(store):
    store.create(RAYJOBS, rayjob())
    gone = store.delete(RAYJOBS, "job", namespace="default")
    assert gone["metadata"]["resourceVersion"] == store.resource_version()
    with pytest.raises(ApiError) as err:
        store.get(RAYJOBS, "job", namespace="default")
    assert err.value.code == 404
    with pytest.raises(ApiError):
        store.delete(RAYJOBS, "job", namespace="default")


def test_finalizers_hold_the_object_until_removed(store):
    store.create(RAYJOBS, rayjob(finalizers=["ray.io/rayjob-finalizer"]))
    deleting = store.delete(RAYJOBS, "job", namespace="default")
    assert (
        deleting["metadata"]["deletionTimestamp"] and deleting["metadata"]["deletionGracePeriodSeconds"] == 0
    )
    assert store.get(RAYJOBS, "job", namespace="default")["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError) as err:
        store.patch(
            RAYJOBS,
            "job",
            {"metadata": {"finalizers": ["ray.io/rayjob-finalizer", "x/y"]}},
            namespace="default",
        )
    assert err.value.code == 422 and "no new finalizers" in err.value.message
    store.patch(RAYJOBS, "job", {"metadata": {"finalizers": None}}, namespace="default")
    with pytest.raises(ApiError):
        store.get(RAYJOBS, "job", namespace="default")


def test_deleting_an_owner_cascades_through_dependents(store):
    job = store.create(RAYJOBS, rayjob())
    cluster = store.create(RAYCLUSTERS, owned_by(job, "job-raycluster", kind="RayJob"))
    store.create("pods", owned_by(cluster, "job-head"))
    store.create("services", owned_by(cluster, "job-head-svc"))
    unrelated = store.create("pods", {"metadata": {"name": "other", "namespace": "default"}})
    store.delete(RAYJOBS, "job", namespace="default")
    assert store.list(RAYCLUSTERS)[0] == []
    assert [p["metadata"]["name"] for p in store.list("pods")[0]] == [unrelated["metadata"]["name"]]
    assert store.list("services")[0] == []


def test_gc_waits_for_dependent_finalizers(store):
    job = store.create(RAYJOBS, rayjob())
    store.create(
        RAYCLUSTERS,
        {**owned_by(job, "rc"), "metadata": {**owned_by(job, "rc")["metadata"], "finalizers": ["f/x"]}},
    )
    store.delete(RAYJOBS, "job", namespace="default")
    held = store.get(RAYCLUSTERS, "rc", namespace="default")
    assert held["metadata"]["deletionTimestamp"]
    store.patch(RAYCLUSTERS, "rc", {"metadata": {"finalizers": []}}, namespace="default")
    assert store.list(RAYCLUSTERS)[0] == []


def test_dependent_with_another_live_owner_survives(store):
    first = store.create(RAYJOBS, rayjob("first"))
    second = store.create(RAYJOBS, rayjob("second"))
    shared = owned_by(first, "shared")
    shared["metadata"]["ownerReferences"] += owned_by(second, "shared")["metadata"]["ownerReferences"]
    store.create(RAYCLUSTERS, shared)
    store.delete(RAYJOBS, "first", namespace="default")
    survivor = store.get(RAYCLUSTERS, "shared", namespace="default")
    assert [r["name"] for r in survivor["metadata"]["ownerReferences"]] == ["second"]
    store.delete(RAYJOBS, "second", namespace="default")
    assert store.list(RAYCLUSTERS)[0] == []


def test_orphan_propagation_keeps_dependents(store):
    job = store.create(RAYJOBS, rayjob())
    store.create(RAYCLUSTERS, owned_by(job, "rc"))
    store.delete(RAYJOBS, "job", namespace="default", propagation_policy="Orphan")
    assert "ownerReferences" not in store.get(RAYCLUSTERS, "rc", namespace="default")["metadata"]


def test_foreground_deletion_removes_dependents_first(store):
    job = store.create(RAYJOBS, rayjob())
    store.create(
        RAYCLUSTERS,
        {**owned_by(job, "rc"), "metadata": {**owned_by(job, "rc")["metadata"], "finalizers": ["f/x"]}},
    )
    deleting = store.delete(RAYJOBS, "job", namespace="default", propagation_policy="Foreground")
    assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert store.get(RAYJOBS, "job", namespace="default")["metadata"]["deletionTimestamp"]
    store.patch(RAYCLUSTERS, "rc", {"metadata": {"finalizers": None}}, namespace="default")
    assert store.list(RAYJOBS)[0] == [] and store.list(RAYCLUSTERS)[0] == []


def test_deleting_a_namespace_deletes_its_contents(store):
    store.create("namespaces", {"metadata": {"name": "team-a"}})
    store.create(RAYJOBS, rayjob("held", namespace="team-a", finalizers=["f/x"]))
    store.create("configmaps", {"metadata": {"name": "c", "namespace": "team-a"}})
    store.create("configmaps", {"metadata": {"name": "c", "namespace": "default"}})
    terminating = store.delete("namespaces", "team-a")
    assert terminating["status"]["phase"] == "Terminating"
    assert store.list("configmaps", namespace="team-a")[0] == []
    assert len(store.list("configmaps")[0]) == 1
    with pytest.raises(ApiError) as err:
        store.create("configmaps", {"metadata": {"name": "d", "namespace": "team-a"}})
    assert err.value.code == 403 and "being terminated" in err.value.message
    store.patch(RAYJOBS, "held", {"metadata": {"finalizers": None}}, namespace="team-a")
    with pytest.raises(ApiError):
        store.get("namespaces", "team-a")


def test_counts(store):
    store.create(RAYJOBS, rayjob("a"))
    store.create(RAYJOBS, rayjob("b"))
    assert store.counts() == {"namespaces": 3, RAYJOBS: 2}


def test_crd_schema_validation_and_defaults():
    from kubesim.resources import CRDS_DIR

    store = Store(Registry(CRDS_DIR), Clock())
    created = store.create(RAYJOBS, rayjob())
    assert created["spec"]["backoffLimit"] == 0  # a CRD default
    with pytest.raises(ApiError) as err:
        store.create(RAYJOBS, {**rayjob("bad"), "spec": {"backoffLimit": "many"}})
    assert err.value.code == 422 and err.value.message.startswith('RayJob.ray.io "bad" is invalid: ')
    assert any(c["field"] == "spec.backoffLimit" for c in err.value.details["causes"])


def test_deleting_an_emptyable_namespace_returns_the_removed_namespace(store):
    store.create("namespaces", {"metadata": {"name": "team-b"}})
    store.create("configmaps", {"metadata": {"name": "c", "namespace": "team-b"}})
    gone = store.delete("namespaces", "team-b")
    assert (
        gone["status"]["phase"] == "Terminating"
        and gone["metadata"]["resourceVersion"] == store.resource_version()
    )
    assert [ns["metadata"]["name"] for ns in store.list("namespaces")[0]] == [
        "default",
        "kube-public",
        "kube-system",
    ]
