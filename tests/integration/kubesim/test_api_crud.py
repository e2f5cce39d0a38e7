"""CRUD through the official sync client: what a controller or operator sees from kubesim."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def _status(exc: ApiException) -> dict:
    return json.loads(exc.body)


@pytest.fixture
def namespace(api_client, unique_name):
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": unique_name}})
    yield unique_name
    core.delete_namespace(unique_name)


def test_custom_object_lifecycle(api_client, unique_name):
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": unique_name},
        "value": 100,
    }

    created = custom.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", body)
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]

    created["value"] = 200
    replaced = custom.replace_cluster_custom_object(*KUEUE, "workloadpriorityclasses", unique_name, created)
    assert replaced["value"] == 200
    assert int(replaced["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])

    listed = custom.list_cluster_custom_object(*KUEUE, "workloadpriorityclasses")
    assert listed["kind"] == "WorkloadPriorityClassList"
    assert unique_name in [item["metadata"]["name"] for item in listed["items"]]

    custom.delete_cluster_custom_object(*KUEUE, "workloadpriorityclasses", unique_name)
    with pytest.raises(ApiException) as missing:
        custom.get_cluster_custom_object(*KUEUE, "workloadpriorityclasses", unique_name)
    assert missing.value.status == 404


def test_core_objects_in_a_namespace(api_client, namespace):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"a": "1"}})

    read = core.read_namespaced_config_map("settings", namespace)
    assert read.data == {"a": "1"}
    assert read.metadata.namespace == namespace

    everywhere = core.list_config_map_for_all_namespaces()
    assert ("settings", namespace) in [(cm.metadata.name, cm.metadata.namespace) for cm in everywhere.items]

    core.delete_namespaced_config_map("settings", namespace)
    assert core.list_namespaced_config_map(namespace).items == []


def test_create_twice_is_409_already_exists(api_client, namespace):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "twice"}})
    with pytest.raises(ApiException) as conflict:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "twice"}})
    assert conflict.value.status == 409
    assert _status(conflict.value)["reason"] == "AlreadyExists"


def test_stale_update_is_409_conflict(api_client, namespace):
    core = client.CoreV1Api(api_client)
    first = core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("cm", namespace, {"data": {"v": "2"}})

    first.data = {"v": "3"}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("cm", namespace, first)
    assert conflict.value.status == 409
    assert _status(conflict.value)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("cm", namespace).data == {"v": "2"}


def test_missing_object_is_404_status(api_client, namespace):
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(api_client).read_namespaced_config_map("nope", namespace)
    body = _status(missing.value)
    assert missing.value.status == 404
    assert (body["kind"], body["reason"]) == ("Status", "NotFound")


def test_unknown_route_is_404_status(api_client):
    with pytest.raises(ApiException) as missing:
        api_client.call_api("/apis/nothing.example.com/v1/things", "GET", auth_settings=["BearerToken"])
    assert missing.value.status == 404
    assert _status(missing.value)["kind"] == "Status"


def test_status_subresource_is_separate_from_spec(api_client, namespace):
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq"},
        "spec": {"clusterQueue": "cq"},
    }
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", body)

    custom.patch_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", "lq", {"status": {"pendingWorkloads": 7}}
    )
    assert "status" not in custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", "lq")

    custom.patch_namespaced_custom_object_status(
        *KUEUE, namespace, "localqueues", "lq", {"status": {"pendingWorkloads": 7}}
    )
    status = custom.get_namespaced_custom_object_status(*KUEUE, namespace, "localqueues", "lq")
    assert status["status"]["pendingWorkloads"] == 7
    assert status["metadata"]["generation"] == 1


def test_merge_and_json_patch(api_client, namespace):
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "lq", "labels": {"a": "1"}},
        "spec": {"clusterQueue": "cq"},
    }
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", body)

    merged = custom.patch_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", "lq", {"metadata": {"labels": {"a": None, "b": "2"}}}
    )
    assert merged["metadata"]["labels"] == {"b": "2"}

    patched = custom.patch_namespaced_custom_object(
        *KUEUE,
        namespace,
        "localqueues",
        "lq",
        [{"op": "replace", "path": "/spec/clusterQueue", "value": "other"}],
        _content_type="application/json-patch+json",
    )
    assert patched["spec"]["clusterQueue"] == "other"
    assert patched["metadata"]["generation"] == 2


def test_list_resource_version_moves_with_writes(api_client, namespace):
    core = client.CoreV1Api(api_client)
    before = int(core.list_namespaced_config_map(namespace).metadata.resource_version)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    after = int(core.list_namespaced_config_map(namespace).metadata.resource_version)
    assert after > before


def test_label_and_field_selectors(api_client, namespace):
    core = client.CoreV1Api(api_client)
    for name, team in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name, "labels": {"team": team}}})

    by_label = core.list_namespaced_config_map(namespace, label_selector="team=a")
    assert sorted(cm.metadata.name for cm in by_label.items) == ["a1", "a2"]
    by_field = core.list_namespaced_config_map(namespace, field_selector="metadata.name=b1")
    assert [cm.metadata.name for cm in by_field.items] == ["b1"]
    both = core.list_namespaced_config_map(
        namespace, label_selector="team in (a,b)", field_selector="metadata.name!=a1"
    )
    assert sorted(cm.metadata.name for cm in both.items) == ["a2", "b1"]

    with pytest.raises(ApiException) as bad:
        core.list_namespaced_config_map(namespace, label_selector="team in (a")
    assert bad.value.status == 400


def test_limit_and_continue_page_through_a_list(api_client, namespace):
    core = client.CoreV1Api(api_client)
    for index in range(5):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm-{index}"}})

    names, token = [], None
    while True:
        page = core.list_namespaced_config_map(namespace, limit=2, _continue=token)
        assert len(page.items) <= 2
        names += [cm.metadata.name for cm in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"cm-{index}" for index in range(5)]


def test_later_pages_show_the_list_as_it_was_at_its_first_page(api_client, namespace):
    """The kube-apiserver serves every page of a list from the first page's etcd revision: what changed
    between pages is seen by a watch from the list's resourceVersion, not by the rest of the list."""
    core = client.CoreV1Api(api_client)
    for index in range(5):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"cm-{index}"}, "data": {"v": "0"}}
        )

    first = core.list_namespaced_config_map(namespace, limit=2)
    core.patch_namespaced_config_map("cm-2", namespace, {"data": {"v": "1"}})
    core.delete_namespaced_config_map("cm-3", namespace)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm-9"}})
    rest = core.list_namespaced_config_map(namespace, limit=10, _continue=first.metadata._continue)

    assert [(cm.metadata.name, cm.data) for cm in rest.items] == [
        ("cm-2", {"v": "0"}),
        ("cm-3", {"v": "0"}),
        ("cm-4", {"v": "0"}),
    ]
    assert rest.metadata.resource_version == first.metadata.resource_version
    now = core.list_namespaced_config_map(namespace)
    assert [cm.metadata.name for cm in now.items] == ["cm-0", "cm-1", "cm-2", "cm-4", "cm-9"]


def test_deleting_an_owner_collects_its_dependents(api_client, namespace):
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    reference = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "dependent", "ownerReferences": [reference]}}
    )

    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")
    assert core.list_namespaced_config_map(namespace).items == []


def test_delete_with_finalizer_lingers_until_released(api_client, namespace):
    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    )

    core.delete_namespaced_config_map("held", namespace)
    lingering = core.read_namespaced_config_map("held", namespace)
    assert lingering.metadata.deletion_timestamp is not None

    core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})
    assert core.list_namespaced_config_map(namespace).items == []


def test_dry_run_create_stores_nothing(api_client, namespace):
    core = client.CoreV1Api(api_client)
    answer = core.create_namespaced_config_map(namespace, {"metadata": {"name": "dry"}}, dry_run="All")
    assert answer.metadata.name == "dry"
    assert core.list_namespaced_config_map(namespace).items == []


def test_schema_violation_is_422_with_the_field_path(api_client, unique_name):
    custom = client.CustomObjectsApi(api_client)
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": unique_name},
        "value": "high",
    }
    with pytest.raises(ApiException) as invalid:
        custom.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", body)
    status = _status(invalid.value)
    assert invalid.value.status == 422
    assert status["reason"] == "Invalid"
    assert "value" in [cause["field"] for cause in status["details"]["causes"]]


def test_namespaced_create_needs_an_existing_namespace(api_client):
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(api_client).create_namespaced_config_map(
            "no-such-namespace", {"metadata": {"name": "x"}}
        )
    assert missing.value.status == 404


def test_body_namespace_must_match_the_url(api_client, namespace):
    with pytest.raises(ApiException) as mismatch:
        client.CoreV1Api(api_client).create_namespaced_config_map(
            namespace, {"metadata": {"name": "x", "namespace": "default"}}
        )
    assert mismatch.value.status == 400


def _localqueue(custom, namespace: str, name: str = "lq", **metadata) -> dict:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, **metadata},
        "spec": {"clusterQueue": "cq"},
    }
    return custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", body)


def test_delete_preconditions_refuse_another_object_or_a_newer_version(api_client, namespace):
    custom = client.CustomObjectsApi(api_client)
    created = _localqueue(custom, namespace)
    uid, version = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
    patched = custom.patch_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", "lq", {"metadata": {"labels": {"changed": "yes"}}}
    )

    with pytest.raises(ApiException) as other_uid:
        custom.delete_namespaced_custom_object(
            *KUEUE, namespace, "localqueues", "lq", body={"preconditions": {"uid": "not-this-one"}}
        )
    assert other_uid.value.status == 409
    assert _status(other_uid.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on LocalQueue.kueue.x-k8s.io "lq": the UID in the '
        f"precondition (not-this-one) does not match the UID in record ({uid}). The object might have "
        "been deleted and then recreated",
        "reason": "Conflict",
        "details": {"name": "lq", "group": "kueue.x-k8s.io", "kind": "LocalQueue"},
        "code": 409,
    }
    with pytest.raises(ApiException) as stale:
        custom.delete_namespaced_custom_object(
            *KUEUE,
            namespace,
            "localqueues",
            "lq",
            body={"preconditions": {"uid": uid, "resourceVersion": version}},
        )
    assert stale.value.status == 409
    assert _status(stale.value)["message"].endswith(
        f"the ResourceVersion in the precondition ({version}) does not match the ResourceVersion in record "
        f"({patched['metadata']['resourceVersion']}). The object might have been modified"
    )
    assert (
        custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", "lq")["metadata"]["uid"] == uid
    )

    current = {"uid": uid, "resourceVersion": patched["metadata"]["resourceVersion"]}
    custom.delete_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", "lq", body={"preconditions": current}
    )
    with pytest.raises(ApiException) as gone:
        custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", "lq")
    assert gone.value.status == 404


def test_a_terminating_object_still_checks_its_preconditions(api_client, namespace):
    custom = client.CustomObjectsApi(api_client)
    created = _localqueue(custom, namespace, finalizers=["example.com/hold"])
    decided_on = {
        "uid": created["metadata"]["uid"],
        "resourceVersion": created["metadata"]["resourceVersion"],
    }
    lingering = custom.delete_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", "lq", body={"preconditions": decided_on}
    )
    assert lingering["metadata"]["deletionTimestamp"]

    # The same delete again (a retry after a lost answer): the deletion itself changed the version.
    with pytest.raises(ApiException) as again:
        custom.delete_namespaced_custom_object(
            *KUEUE, namespace, "localqueues", "lq", body={"preconditions": decided_on}
        )
    assert again.value.status == 409
    custom.patch_namespaced_custom_object(
        *KUEUE, namespace, "localqueues", "lq", {"metadata": {"finalizers": None}}
    )


def test_strategic_merge_patch_is_refused_for_custom_resources_only(api_client, namespace):
    custom = client.CustomObjectsApi(api_client)
    _localqueue(custom, namespace)
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(
            *KUEUE,
            namespace,
            "localqueues",
            "lq",
            {"metadata": {"labels": {"a": "1"}}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert refused.value.status == 415
    status = _status(refused.value)
    assert status["reason"] == "UnsupportedMediaType"
    assert status["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json"
    )

    core = client.CoreV1Api(api_client)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "cm"}})
    patched = core.patch_namespaced_config_map(
        "cm", namespace, {"data": {"a": "1"}}, _content_type="application/strategic-merge-patch+json"
    )
    assert patched.data == {"a": "1"}


def test_a_custom_object_must_name_its_kind_and_api_version_as_a_real_api_server_requires(
    api_client, unique_name
):
    """kube-apiserver v1.36.2 decodes custom resources without a scheme: no kind, no apiVersion or
    another kind is refused (the answers below are the real server's, realcluster/README.md); a built-in
    kind is known from the URL, so a Namespace needs neither."""
    custom = client.CustomObjectsApi(api_client)
    base = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "value": 1}
    refusals = [
        ({k: v for k, v in base.items() if k != "kind"}, 400, "BadRequest", "Object 'Kind' is missing in"),
        (
            {k: v for k, v in base.items() if k != "apiVersion"},
            400,
            "BadRequest",
            "the API version in the data () does not match the expected API version (kueue.x-k8s.io/v1beta2)",
        ),
        (
            dict(base, kind="Cohort"),
            422,
            "Invalid",
            f'Cohort.kueue.x-k8s.io "{unique_name}" is invalid: kind: Invalid value: "Cohort": must be '
            "WorkloadPriorityClass",
        ),
    ]
    for body, code, reason, message in refusals:
        with pytest.raises(ApiException) as refused:
            custom.create_cluster_custom_object(
                *KUEUE, "workloadpriorityclasses", dict(body, metadata={"name": unique_name})
            )
        assert (refused.value.status, _status(refused.value)["reason"]) == (code, reason)
        assert message in _status(refused.value)["message"]
    with pytest.raises(ApiException):
        custom.get_cluster_custom_object(*KUEUE, "workloadpriorityclasses", unique_name)

    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": unique_name}})  # a dict is sent as it is: no kind
    assert core.read_namespace(unique_name).metadata.name == unique_name
    core.delete_namespace(unique_name)
