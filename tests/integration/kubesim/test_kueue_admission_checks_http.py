"""Kueue's admission checks and waitForPodsReady as a client sees them over HTTP, with Kueue's own
conditions, reasons and messages: a slow check holds a RayJob suspended with quota reserved, a rejected one
deactivates its Workload, a Retry evicts it once; pods that never schedule (an untolerated node taint) are
evicted for PodsReadyTimeout and requeued after a backoff."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client, config

from kubesim.testing import run_kubesim
from tests.integration.kubesim.support import eventually
from tests.rayjobs import rayjob_body

KUEUE = ("kueue.x-k8s.io", "v1beta2")
RAY = ("ray.io", "v1")
TIME_SCALE = 20.0
CHECK_CONTROLLER = "kubesim.dev/admission-check"


@pytest.fixture(scope="module")
def sim():
    with run_kubesim(time_scale=TIME_SCALE) as sim:
        yield sim


@pytest.fixture(scope="module")
def custom(sim):
    api = config.new_client_from_config(config_file=sim.kubeconfig)
    yield client.CustomObjectsApi(api)
    api.close()


def condition(obj: dict, type_: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def namespace_for(custom, name: str) -> str:
    core = client.CoreV1Api(custom.api_client)
    core.create_namespace({"metadata": {"name": name}})
    return name


def admission_check(custom, name: str, **annotations: str) -> None:
    custom.create_cluster_custom_object(
        *KUEUE,
        "admissionchecks",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {
                "name": name,
                "annotations": {f"kubesim.dev/{k}": v for k, v in annotations.items()},
            },
            "spec": {"controllerName": CHECK_CONTROLLER},
        },
    )


def checked_queue(custom, ns: str, cq: str, checks: list[str]) -> None:
    custom.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{cq}-flavor"},
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
                "admissionChecksStrategy": {"admissionChecks": [{"name": name} for name in checks]},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": f"{cq}-flavor", "resources": [{"name": "cpu", "nominalQuota": "4"}]}
                        ],
                    }
                ],
            },
        },
    )
    custom.create_namespaced_custom_object(
        *KUEUE,
        ns,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": cq},
        },
    )


def rayjob(name: str, entrypoint: str = "sleep 20", tolerations: list | None = None) -> dict:
    return rayjob_body(
        name,
        requests={"cpu": "1"},
        limits=False,
        image="ray",
        entrypoint=entrypoint,
        labels={"kueue.x-k8s.io/queue-name": "q"},
        startup_s=None,
        head_pod={"tolerations": tolerations} if tolerations else None,
    )


def submit(custom, ns: str, job: dict) -> str:
    return custom.create_namespaced_custom_object(*RAY, ns, "rayjobs", job)["metadata"]["uid"]


def workload(custom, ns: str, uid: str) -> dict | None:
    items = custom.list_namespaced_custom_object(
        *KUEUE, ns, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={uid}"
    )["items"]
    return items[0] if items else None


def job(custom, ns: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(*RAY, ns, "rayjobs", name)


def test_a_slow_check_holds_the_job_suspended_with_quota_reserved_then_admits_it(custom):
    ns = namespace_for(custom, "checks-slow")
    admission_check(custom, "gpu-provisioning", after="60", **{"pending-message": "Waiting for 1 GPU node"})
    checked_queue(custom, ns, "checks-slow-cq", ["gpu-provisioning"])
    uid = submit(custom, ns, rayjob("train"))

    def waiting():
        wl = workload(custom, ns, uid)
        checks = ((wl or {}).get("status") or {}).get("admissionChecks") or []
        if condition(wl or {}, "QuotaReserved").get("status") != "True" or not checks:
            return None
        return wl if checks[0].get("message") == "Waiting for 1 GPU node" else None

    wl = eventually(waiting)
    assert condition(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue checks-slow-cq"
    assert condition(wl, "Admitted") == {}  # Kueue writes Admitted only when it becomes true
    [check] = wl["status"]["admissionChecks"]
    assert (check["name"], check["state"]) == ("gpu-provisioning", "Pending")
    assert job(custom, ns, "train")["spec"]["suspend"] is True

    admitted = eventually(
        lambda: (w := workload(custom, ns, uid)) and condition(w, "Admitted").get("status") == "True" and w
    )
    assert (condition(admitted, "Admitted")["reason"], condition(admitted, "Admitted")["message"]) == (
        "Admitted",
        "The workload is admitted",
    )
    assert admitted["status"]["admissionChecks"][0]["state"] == "Ready"
    eventually(lambda: job(custom, ns, "train")["spec"]["suspend"] is False)
    check_object = custom.get_cluster_custom_object(*KUEUE, "admissionchecks", "gpu-provisioning")
    assert condition(check_object, "Active")["status"] == "True"


def test_a_rejected_check_deactivates_the_workload_in_kueues_words(custom):
    ns = namespace_for(custom, "checks-rejected")
    admission_check(custom, "capacity", decision="Rejected", message="no A100 capacity in westeurope")
    checked_queue(custom, ns, "checks-rejected-cq", ["capacity"])
    uid = submit(custom, ns, rayjob("train"))

    def evicted():
        wl = workload(custom, ns, uid)
        return wl if condition(wl or {}, "Evicted").get("status") == "True" else None

    wl = eventually(evicted)
    assert wl["spec"]["active"] is False
    message = 'AdmissionCheck in Rejected state: "capacity" (no A100 capacity in westeurope)'
    assert condition(wl, "Evicted")["reason"] == "DeactivatedDueToAdmissionCheck"
    assert condition(wl, "Evicted")["message"] == f"The workload is deactivated due to {message}"
    assert condition(wl, "DeactivationTarget") == {}  # consumed by the deactivation
    assert wl["status"]["schedulingStats"]["evictions"] == [
        {"reason": "Deactivated", "underlyingCause": "AdmissionCheck", "count": 1}
    ]
    check = wl["status"]["admissionChecks"][0]
    assert (check["state"], check["message"]) == (
        "Pending",
        "Reset to Pending after eviction. Previously: Rejected",
    )
    assert job(custom, ns, "train")["spec"]["suspend"] is True
    eventually(lambda: workload(custom, ns, uid)["status"].get("admission") is None)
    events = client.CoreV1Api(custom.api_client).list_namespaced_event(ns).items
    assert any(e.reason == "AdmissionCheckRejected" and message in e.message for e in events)


def test_a_retry_check_evicts_once_and_the_next_attempt_is_admitted(custom):
    ns = namespace_for(custom, "checks-retry")
    admission_check(custom, "flaky", decision="Retry", message="provisioning failed, retrying")
    checked_queue(custom, ns, "checks-retry-cq", ["flaky"])
    uid = submit(custom, ns, rayjob("train"))

    admitted = eventually(
        lambda: (w := workload(custom, ns, uid)) and condition(w, "Admitted").get("status") == "True" and w
    )
    assert admitted["status"]["schedulingStats"]["evictions"] == [
        {"reason": "AdmissionCheck", "underlyingCause": "", "count": 1}
    ]
    assert condition(admitted, "Evicted")["message"] == (
        'Previously: Evicted due to AdmissionCheck in Retry state: "flaky" (provisioning failed, retrying)'
    )
    assert admitted["status"]["admissionChecks"][0]["retryCount"] == 1


def test_a_cluster_queue_naming_a_missing_check_is_inactive(custom):
    ns = namespace_for(custom, "checks-missing")
    checked_queue(custom, ns, "checks-missing-cq", ["nope"])
    uid = submit(custom, ns, rayjob("train"))

    def inactive():
        cq = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", "checks-missing-cq")
        return condition(cq, "Active").get("status") == "False" and cq

    cq = eventually(inactive)
    assert (condition(cq, "Active")["reason"], condition(cq, "Active")["message"]) == (
        "AdmissionCheckNotFound",
        "Can't admit new workloads: references missing AdmissionCheck(s): nope.",
    )
    wl = eventually(lambda: (w := workload(custom, ns, uid)) and condition(w, "QuotaReserved") and w)
    assert condition(wl, "QuotaReserved")["message"] == "ClusterQueue checks-missing-cq is inactive"


# ------------------------------------------------------------------------------------ waitForPodsReady

NODES = [
    {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "spot-gpu-0", "labels": {"pool": "spot"}},
        "spec": {
            "taints": [
                {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}
            ]
        },
    }
]
SPOT_TOLERATION = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "operator": "Equal",
    "value": "spot",
    "effect": "NoSchedule",
}


PODS_READY_TIME_SCALE = 5.0
"""Slower than the module's: the test polls for states that last one requeue backoff (20 simulated s, 4 s
real here), which a poll on a loaded machine (make test runs two test processes on two cores) can miss when
they last 1 s."""


@pytest.fixture(scope="module")
def tainted(tmp_path_factory):
    """A cluster whose only node is a tainted spot pool, with a short waitForPodsReady."""
    directory = tmp_path_factory.mktemp("pods-ready")
    (directory / "nodes.yaml").write_text(yaml.safe_dump_all(NODES))
    kueue_config = directory / "kueue.yaml"
    kueue_config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "waitForPodsReady": {
                    "timeout": "1m",
                    "requeuingStrategy": {"backoffBaseSeconds": 20, "backoffMaxSeconds": 3600},
                },
            }
        )
    )
    with run_kubesim(
        time_scale=PODS_READY_TIME_SCALE, apply=[directory / "nodes.yaml"], kueue_config=kueue_config
    ) as sim:
        api = config.new_client_from_config(config_file=sim.kubeconfig)
        yield client.CustomObjectsApi(api)
        api.close()


def plain_queue(custom, ns: str) -> None:
    custom.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "spot"}},
    )
    custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "spot-cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "4"}]}],
                    }
                ],
            },
        },
    )
    custom.create_namespaced_custom_object(
        *KUEUE,
        ns,
        "localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": "spot-cq"},
        },
    )


def test_pods_without_the_node_toleration_stay_pending_and_are_evicted_for_pods_ready_timeout(tainted):
    custom = tainted
    core = client.CoreV1Api(custom.api_client)
    ns = namespace_for(custom, "pods-ready")
    plain_queue(custom, ns)
    uid = submit(custom, ns, rayjob("stuck", entrypoint="sleep 5"))
    fine = submit(custom, ns, rayjob("tolerating", entrypoint="sleep 5", tolerations=[SPOT_TOLERATION]))

    def unschedulable():
        pods = core.list_namespaced_pod(ns, label_selector="ray.io/node-type=head").items
        stuck = [p for p in pods if p.metadata.name.startswith("stuck-")]
        conditions = {c.type: c for c in (stuck[0].status.conditions or [])} if stuck else {}
        return conditions.get("PodScheduled")

    scheduled = eventually(unschedulable)
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    assert scheduled.message == (
        "0/1 nodes are available: 1 node(s) had untolerated taint {kubernetes.azure.com/scalesetpriority: spot}. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )

    def evicted(count: int):
        wl = workload(custom, ns, uid)
        state = ((wl or {}).get("status") or {}).get("requeueState") or {}
        return (
            wl
            if condition(wl or {}, "Evicted").get("status") == "True" and state.get("count") == count
            else None
        )

    wl = eventually(lambda: evicted(1), timeout=30)
    name = wl["metadata"]["name"]
    assert condition(wl, "Evicted")["reason"] == "PodsReadyTimeout"
    assert condition(wl, "Evicted")["message"] == f"Exceeded the PodsReady timeout {ns}/{name}"
    assert wl["status"]["schedulingStats"]["evictions"] == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}
    ]
    assert wl["status"]["requeueState"]["requeueAt"]
    requeued = eventually(
        lambda: (w := workload(custom, ns, uid)) and condition(w, "Requeued").get("status") == "False" and w
    )
    assert condition(requeued, "Requeued")["reason"] == "PodsReadyTimeout"

    backoff_over = eventually(
        lambda: (
            (w := workload(custom, ns, uid))
            and condition(w, "Requeued").get("reason") == "BackoffFinished"
            and w
        ),
        timeout=30,
    )
    assert condition(backoff_over, "Requeued")["message"] == "The workload backoff was finished"
    # Requeued without limit: admitted again, evicted again, the backoff doubling.
    second = eventually(lambda: evicted(2), timeout=40)
    assert second["status"]["schedulingStats"]["evictions"][0]["count"] == 2

    done = eventually(
        lambda: (job(custom, ns, "tolerating").get("status") or {}).get("jobDeploymentStatus") == "Complete"
    )
    assert done
    assert condition(workload(custom, ns, fine), "Evicted") == {}
