"""Kueue behaviour a client sees over HTTP: webhook denials, Workload creation rules, admission into the
RayJob, queue status and the visibility API's positions."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.rayjobs import rayjob_body

KUEUE = ("kueue.x-k8s.io", "v1beta2")
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"


@pytest.fixture
def custom(api):
    return client.CustomObjectsApi(api)


@pytest.fixture
def namespace(api, request):
    name = request.node.name.replace("_", "-")[:40].strip("-")
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name, "labels": {"team": "ml"}}})
    return name


def eventually(check, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except (AssertionError, ApiException):
            if time.monotonic() > deadline:
                raise
        else:
            if result is not False:
                return result
            if time.monotonic() > deadline:
                raise AssertionError("condition never held")
        time.sleep(0.05)


def queues(custom, ns: str, cq: str, *, cpu: str = "2", flavor_labels: dict | None = None) -> None:
    custom.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{cq}-flavor"},
            "spec": {"nodeLabels": flavor_labels or {}},
        },
    )
    custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": f"{cq}-flavor", "resources": [{"name": "cpu", "nominalQuota": cpu}]}
                        ],
                    }
                ],
            },
        },
    )
    custom.create_namespaced_custom_object(
        *KUEUE[:2],
        ns,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": cq},
        },
    )


def rayjob(name: str, *, cpu: str = "1", labels: dict | None = None, **spec) -> dict:
    body = rayjob_body(
        name,
        requests={"cpu": cpu},
        limits=False,
        image="ray",
        labels={"kueue.x-k8s.io/queue-name": "q", **(labels or {})},
    )
    body["spec"].update(spec)
    return body


def submit(custom, ns: str, job: dict) -> dict:
    return custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayjobs", job)


def workload_of(custom, ns: str, uid: str) -> dict:
    items = custom.list_namespaced_custom_object(
        *KUEUE, ns, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={uid}"
    )["items"]
    assert len(items) == 1
    return items[0]


def condition(obj: dict, type_: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def events_for(api, ns: str, name: str) -> list[dict]:
    items = (
        client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    )
    return [{"type": e.type, "reason": e.reason, "message": e.message} for e in items]


def get_json(sim, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(sim.url + path, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_webhook_denial_reaches_the_client_as_403(custom, namespace):
    with pytest.raises(ApiException) as caught:
        submit(custom, namespace, rayjob("bad", shutdownAfterJobFinishes=False))
    assert caught.value.status == 403
    assert json.loads(caught.value.body)["message"] == (
        'admission webhook "vrayjob.kb.io" denied the request: spec.shutdownAfterJobFinishes: '
        "Invalid value: false: a kueue managed job should delete the cluster after finishing"
    )


def test_admission_unsuspends_and_injects_the_flavor(api, custom, namespace):
    queues(custom, namespace, "inject-cq", flavor_labels={"pool": "gpu"})
    job = submit(custom, namespace, rayjob("train"))
    assert job["spec"]["suspend"] is True
    wl = eventually(lambda: workload_of(custom, namespace, job["metadata"]["uid"]))
    assert wl["metadata"]["name"].startswith("rayjob-train-")
    assert wl["spec"]["podSets"][0]["count"] == 1

    def admitted():
        current = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "train")
        assert current["spec"]["suspend"] is False
        return current

    started = eventually(admitted)
    template = started["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    assert template["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "head"
    wl = workload_of(custom, namespace, job["metadata"]["uid"])
    assert condition(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue inject-cq"
    assert condition(wl, "Admitted")["status"] == "True"
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {"cpu": "inject-cq-flavor"}
    assert {
        "type": "Normal",
        "reason": "Started",
        "message": "Admitted by clusterQueue inject-cq",
    } in events_for(api, namespace, "train")


def test_missing_priority_class_creates_no_workload_until_it_exists(api, custom, namespace):
    queues(custom, namespace, "wpc-cq")
    job = submit(
        custom, namespace, rayjob("urgent", labels={"kueue.x-k8s.io/priority-class": "urgent-class"})
    )
    eventually(
        lambda: any(
            e["type"] == "Warning"
            and 'workloadpriorityclasses.kueue.x-k8s.io "urgent-class" not found' in e["message"]
            for e in events_for(api, namespace, "urgent")
        )
    )
    assert not custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    custom.create_cluster_custom_object(
        *KUEUE,
        "workloadpriorityclasses",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "urgent-class"},
            "value": 500,
        },
    )
    wl = eventually(lambda: workload_of(custom, namespace, job["metadata"]["uid"]))
    assert wl["spec"]["priority"] == 500
    assert wl["spec"]["priorityClassRef"]["name"] == "urgent-class"


def test_relabelled_running_job_moves_its_workload_to_the_new_class(api, custom, namespace):
    queues(custom, namespace, "relabel-cq")
    for name, value in (("relabel-low", 10), ("relabel-high", 900)):
        custom.create_cluster_custom_object(
            *KUEUE,
            "workloadpriorityclasses",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    job = submit(custom, namespace, rayjob("tune", labels={"kueue.x-k8s.io/priority-class": "relabel-low"}))
    uid = job["metadata"]["uid"]
    eventually(lambda: condition(workload_of(custom, namespace, uid), "Admitted")["status"] == "True")

    patch = {"metadata": {"labels": {"kueue.x-k8s.io/priority-class": "relabel-high"}}}
    custom.patch_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "tune", patch)

    def relabelled():
        spec = workload_of(custom, namespace, uid)["spec"]
        assert (spec["priority"], spec["priorityClassRef"]["name"]) == (900, "relabel-high")

    eventually(relabelled)
    wl = workload_of(custom, namespace, uid)
    assert condition(wl, "Admitted")["status"] == "True"
    assert {
        "type": "Normal",
        "reason": "UpdatedWorkload",
        "message": f"Updated workload priority class: {namespace}/{wl['metadata']['name']}",
    } in events_for(api, namespace, "tune")


def test_missing_local_queue_is_inadmissible(custom, namespace):
    job = submit(custom, namespace, rayjob("lost", labels={"kueue.x-k8s.io/queue-name": "nowhere"}))

    def reason():
        cond = condition(workload_of(custom, namespace, job["metadata"]["uid"]), "QuotaReserved")
        assert (cond.get("reason"), cond.get("message")) == (
            "Inadmissible",
            "LocalQueue nowhere doesn't exist",
        )

    eventually(reason)


def test_queue_status_and_visibility_positions(sim, custom, namespace):
    queues(custom, namespace, "vis-cq", cpu="2")
    uids = {}
    for name in ("first", "second", "third"):
        uids[name] = submit(custom, namespace, rayjob(name, cpu="2"))["metadata"]["uid"]
        eventually(lambda n=name: workload_of(custom, namespace, uids[n]))

    def cq_status():
        status = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", "vis-cq")["status"]
        assert (status["pendingWorkloads"], status["reservingWorkloads"], status["admittedWorkloads"]) == (
            2,
            1,
            1,
        )
        return status

    status = eventually(cq_status)
    assert status["flavorsUsage"] == [
        {"name": "vis-cq-flavor", "resources": [{"name": "cpu", "total": "2", "borrowed": "0"}]}
    ]
    assert condition({"status": status}, "Active")["reason"] == "Ready"
    lq = custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", "q")["status"]
    assert (lq["pendingWorkloads"], lq["admittedWorkloads"]) == (2, 1)

    code, summary = get_json(sim, f"{VISIBILITY}/clusterqueues/vis-cq/pendingworkloads")
    assert code == 200 and summary["kind"] == "PendingWorkloadsSummary"
    owners = [item["metadata"]["ownerReferences"][0]["name"] for item in summary["items"]]
    # One priority: the older Workload first, and within one second (timestamps' precision) the smaller
    # UID, as real Kueue orders them, not the order they were created in.
    pending = {name: workload_of(custom, namespace, uids[name])["metadata"] for name in ("second", "third")}
    assert owners == sorted(pending, key=lambda n: (pending[n]["creationTimestamp"], pending[n]["uid"]))
    assert [item["positionInClusterQueue"] for item in summary["items"]] == [0, 1]
    assert summary["items"][0]["localQueueName"] == "q"

    code, page = get_json(
        sim, f"{VISIBILITY}/namespaces/{namespace}/localqueues/q/pendingworkloads?limit=1&offset=1"
    )
    assert code == 200
    assert [(i["positionInLocalQueue"], i["positionInClusterQueue"]) for i in page["items"]] == [(1, 1)]

    code, missing = get_json(sim, f"{VISIBILITY}/clusterqueues/no-such-cq/pendingworkloads")
    assert (code, missing["reason"]) == (404, "NotFound")
