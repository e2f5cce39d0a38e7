"""Kueue's visibility API as the plugin reads it (``kueue_ray.hook_common.VISIBILITY_PATH`` and the Kueue
pages' ClusterQueue read): the same requests against kubesim and against real Kueue v0.19.2, whose
manager serves it as an aggregated API server behind kube-apiserver (``--cluster=real``).

What the plugin relies on: the pending Workloads in the ClusterQueue's order (priority, then creation),
their 0-based positions in the ClusterQueue and in their LocalQueue, ``limit``/``offset`` paging, and a
404 Status naming the queue that does not exist.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kueue_ray.hook_common import QueuePosition

from tests.deployment_files import component_service_accounts, load_values, render_rbac
from tests.integration.kueue_ray.conftest import KUEUE, wait_for
from tests.rayjobs import rayjob_body

VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
OTHER_QUEUE = "other-queue"


def get(api, path: str) -> tuple[int, dict]:
    """(status, decoded body) of a GET, an error's Status body included."""
    try:
        body = api.call_api(
            path, "GET", auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True
        )
        return body.status, json.loads(body.data)
    except client.ApiException as exc:
        return exc.status, json.loads(exc.body)


def submit(queues, name: str, local_queue: str, priority: str) -> dict:
    """A RayJob for Kueue (queue and priority labels), its head as large as the ClusterQueue's quota."""
    # HTTPMode: no submitter pod, the head alone fills the quota
    labels = {"kueue.x-k8s.io/queue-name": local_queue, "kueue.x-k8s.io/priority-class": priority}
    body = rayjob_body(name, requests={"cpu": "2"}, labels=labels, startup_s=None)
    return queues.custom.create_namespaced_custom_object("ray.io", "v1", queues.namespace, "rayjobs", body)


@pytest.fixture
def three_pending(api, queues):
    """A high-priority RayJob holding the whole quota, and behind it, in this order: ``low-a`` (low, in
    the test's LocalQueue), ``high-b`` (high, same LocalQueue), ``low-c`` (low, in a second LocalQueue of
    the same ClusterQueue). Returns their Workloads by RayJob name."""
    queues.custom.create_namespaced_custom_object(
        *KUEUE,
        queues.namespace,
        "localqueues",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "LocalQueue",
            "metadata": {"name": OTHER_QUEUE},
            "spec": {"clusterQueue": queues.cluster_queue},
        },
    )
    holder = submit(queues, "holder", queues.local_queue, queues.high)
    wait_for(lambda: (queues.workload(holder["metadata"]["uid"]) or {}).get("status", {}).get("admission"))
    jobs = [
        submit(queues, "low-a", queues.local_queue, queues.low),
        submit(queues, "high-b", queues.local_queue, queues.high),
        submit(queues, "low-c", OTHER_QUEUE, queues.low),
    ]
    workloads = {
        job["metadata"]["name"]: wait_for(lambda j=job: queues.workload(j["metadata"]["uid"])) for job in jobs
    }

    def all_listed():
        code, body = get(api, f"{VISIBILITY}/clusterqueues/{queues.cluster_queue}/pendingworkloads")
        return code == 200 and len(body["items"]) == 3 and body

    wait_for(all_listed, timeout=60)
    return workloads


def kueue_order(workloads: dict[str, dict]) -> list[str]:
    """The RayJobs' names in Kueue's queue order: priority first, then the Workload's creationTimestamp
    (to the second), then its UID. Two Workloads of one priority created in the same second are in the
    order of their random UIDs, as real Kueue orders them, whatever the order they were created in."""

    def key(name: str) -> tuple:
        meta = workloads[name]["metadata"]
        return (-workloads[name]["spec"]["priority"], meta["creationTimestamp"], meta["uid"])

    return sorted(workloads, key=key)


def test_pending_workloads_are_listed_in_the_cluster_queues_order_with_both_positions(
    api, queues, three_pending
):
    code, summary = get(api, f"{VISIBILITY}/clusterqueues/{queues.cluster_queue}/pendingworkloads")

    assert code == 200
    assert (summary["kind"], summary["apiVersion"]) == (
        "PendingWorkloadsSummary",
        "visibility.kueue.x-k8s.io/v1beta2",
    )
    order = kueue_order(three_pending)
    assert order[0] == "high-b", "the higher priority goes first, though created after low-a"
    per_local_queue: dict[str, int] = {}
    expected = []
    for position, job in enumerate(order):
        local_queue = OTHER_QUEUE if job == "low-c" else queues.local_queue
        expected.append(
            (
                three_pending[job]["metadata"]["name"],
                queues.namespace,
                local_queue,
                1000 if job == "high-b" else 100,
                position,
                per_local_queue.get(local_queue, 0),
            )
        )
        per_local_queue[local_queue] = per_local_queue.get(local_queue, 0) + 1
    listed = [
        (
            item["metadata"]["name"],
            item["metadata"]["namespace"],
            item["localQueueName"],
            item["priority"],
            item["positionInClusterQueue"],
            item["positionInLocalQueue"],
        )
        for item in summary["items"]
    ]
    assert listed == expected
    owners = [
        {k: ref[k] for k in ("apiVersion", "kind", "name")}
        for i in summary["items"]
        for ref in i["metadata"]["ownerReferences"]
    ]
    assert owners == [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name} for name in order]


def test_a_local_queues_view_keeps_the_cluster_queue_position_and_pages(api, queues, three_pending):
    base = f"{VISIBILITY}/namespaces/{queues.namespace}/localqueues"
    order = kueue_order(three_pending)
    in_cluster_queue = {
        three_pending[job]["metadata"]["name"]: position for position, job in enumerate(order)
    }
    mine = [three_pending[job]["metadata"]["name"] for job in order if job != "low-c"]

    code, listed = get(api, f"{base}/{queues.local_queue}/pendingworkloads")
    assert code == 200
    assert [
        (i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
        for i in listed["items"]
    ] == [(name, in_cluster_queue[name], position) for position, name in enumerate(mine)]
    code, other = get(api, f"{base}/{OTHER_QUEUE}/pendingworkloads")
    assert code == 200
    assert [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in other["items"]] == [
        (order.index("low-c"), 0)
    ]

    code, page = get(api, f"{base}/{queues.local_queue}/pendingworkloads?limit=1&offset=1")
    assert code == 200
    assert [(i["metadata"]["name"], i["positionInLocalQueue"]) for i in page["items"]] == [(mine[1], 1)]
    # Kueue clamps what it is given rather than refusing it: limit 0 is its default (1000), a negative
    # offset starts at the head, a negative limit lists nothing.
    for query, expected in (("limit=0", mine), ("offset=-5", mine), ("limit=-1", [])):
        code, page = get(api, f"{base}/{queues.local_queue}/pendingworkloads?{query}")
        assert (code, [i["metadata"]["name"] for i in page["items"]]) == (200, expected), query


def test_positions_follow_a_change_between_two_reads(api, queues, three_pending):
    """A read answers what the queue is now, not what an earlier read found: a RayJob of the higher
    priority submitted after a first read is listed ahead of the low ones in the next."""
    path = f"{VISIBILITY}/clusterqueues/{queues.cluster_queue}/pendingworkloads"
    code, before = get(api, path)
    assert code == 200 and len(before["items"]) == 3
    late = submit(queues, "high-d", queues.local_queue, queues.high)
    workloads = {**three_pending, "high-d": wait_for(lambda: queues.workload(late["metadata"]["uid"]))}
    order = [workloads[job]["metadata"]["name"] for job in kueue_order(workloads)]

    def listed_with_it():
        code, body = get(api, path)
        names = [i["metadata"]["name"] for i in body.get("items", [])]
        return code == 200 and len(names) == 4 and names

    assert wait_for(listed_with_it, timeout=60) == order
    assert order.index(workloads["high-d"]["metadata"]["name"]) < order.index(
        workloads["low-a"]["metadata"]["name"]
    )


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/clusterqueues/{name}/pendingworkloads", "clusterqueue"),
        ("/namespaces/{namespace}/localqueues/{name}/pendingworkloads", "localqueue"),
    ],
)
def test_an_unknown_queue_is_a_404_naming_it(api, queues, path, kind):
    name = f"{queues.namespace}-missing"

    code, status = get(api, VISIBILITY + path.format(name=name, namespace=queues.namespace))

    assert (code, status["kind"], status["reason"]) == (404, "Status", "NotFound")
    assert status["message"] == f'{kind}.visibility.kueue.x-k8s.io "{name}" not found'
    assert status["details"] == {"name": name, "group": "visibility.kueue.x-k8s.io", "kind": kind}


RAYJOB_NAMESPACE = "ray"
"""Where include/manifests/rbac/rbac.yaml's Roles grant the worker and the triggerer their rights."""


@pytest.fixture
def component_tokens(request, kubesim, api, unique_name, tmp_path, monkeypatch) -> dict[str, str]:
    """rbac.yaml applied for an Airflow namespace of this test's own (its ServiceAccounts, Roles and
    bindings), and an Airflow connection per component with its chart account's token (TokenRequest):
    component -> connection id. Real only: kubesim enforces no RBAC (test_component_rights.py audits
    the calls it logs against rbac.yaml instead)."""
    if request.config.getoption("cluster") != "real":
        pytest.skip(
            "real-stack only: kubesim authorizes every request (test_component_rights.py audits them)"
        )
    airflow_namespace = f"{unique_name}-airflow"
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    for namespace in (airflow_namespace, RAYJOB_NAMESPACE):
        try:
            core.create_namespace({"metadata": {"name": namespace}})
        except client.ApiException as exc:
            if exc.status != 409:  # the RayJobs' namespace is shared by the session's tests
                raise
    create = {
        "ServiceAccount": lambda d: core.create_namespaced_service_account(d["metadata"]["namespace"], d),
        "Role": lambda d: rbac.create_namespaced_role(d["metadata"]["namespace"], d),
        "RoleBinding": lambda d: rbac.create_namespaced_role_binding(d["metadata"]["namespace"], d),
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
        "ValidatingAdmissionPolicy": admission.create_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": admission.create_validating_admission_policy_binding,
    }
    docs = render_rbac(airflow_namespace)
    for doc in docs:
        create[doc["kind"]](doc)
    kubeconfig = yaml.safe_load(Path(kubesim.kubeconfig).read_text())
    connections = {}
    for component, account in component_service_accounts(load_values()).items():
        token = core.create_namespaced_service_account_token(
            account, airflow_namespace, {"spec": {"expirationSeconds": 3600}}
        ).status.token
        kubeconfig["users"][0]["user"] = {"token": token}
        path = tmp_path / f"{component}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        conn_id = f"kueue_ray_{component.replace('-', '_')}"
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(path)}}),
        )
        connections[component] = conn_id
    yield connections
    core.delete_namespace(airflow_namespace)
    for doc in docs:
        if doc["kind"] == "ServiceAccount":
            continue  # with its namespace
        if doc["kind"] == "ClusterRole":
            rbac.delete_cluster_role(doc["metadata"]["name"])
        elif doc["kind"] == "ClusterRoleBinding":
            rbac.delete_cluster_role_binding(doc["metadata"]["name"])
        elif doc["kind"] == "ValidatingAdmissionPolicy":
            admission.delete_validating_admission_policy(doc["metadata"]["name"])
        elif doc["kind"] == "ValidatingAdmissionPolicyBinding":
            admission.delete_validating_admission_policy_binding(doc["metadata"]["name"])
        else:
            getattr(rbac, f"delete_namespaced_{'role' if doc['kind'] == 'Role' else 'role_binding'}")(
                doc["metadata"]["name"], doc["metadata"]["namespace"]
            )


@pytest.fixture
def queue_in_ray(queues):
    """(``queues`` as seen in ``RAYJOB_NAMESPACE``, a LocalQueue of the test's own there, named after its
    namespace, pointing at its ClusterQueue): where rbac.yaml's Roles apply. Deleted afterwards."""
    local_queue = queues.namespace
    queues.custom.create_namespaced_custom_object(
        *KUEUE,
        RAYJOB_NAMESPACE,
        "localqueues",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "LocalQueue",
            "metadata": {"name": local_queue},
            "spec": {"clusterQueue": queues.cluster_queue},
        },
    )
    yield replace(queues, namespace=RAYJOB_NAMESPACE), local_queue
    queues.custom.delete_namespaced_custom_object(*KUEUE, RAYJOB_NAMESPACE, "localqueues", local_queue)


def test_each_component_reads_the_positions_its_role_grants_and_no_more(
    queues, component_tokens, queue_in_ray
):
    """Through Kueue's aggregated server, with the accounts and Roles of include/manifests/rbac/rbac.yaml:
    the worker and the triggerer read their LocalQueue's positions in ``ray``, the api-server its
    ClusterQueue's; and a read outside a Role's grant is refused, so the grants above are what allow."""
    from kueue_ray.async_hook import AsyncRayJobHook
    from kueue_ray.hook import RayJobHook
    from kueue_ray.ui.cache import CacheSettings, ClusterCache

    in_ray, local_queue = queue_in_ray
    jobs = []
    try:
        jobs.append(submit(in_ray, f"{local_queue}-holder", local_queue, queues.high))
        jobs.append(submit(in_ray, f"{local_queue}-queued", local_queue, queues.low))
        workload = wait_for(lambda: in_ray.workload(jobs[1]["metadata"]["uid"]))["metadata"]["name"]
        expected = QueuePosition(in_local_queue=0, in_cluster_queue=0, pending_in_local_queue=1)

        worker = RayJobHook(conn_id=component_tokens["worker"])
        assert wait_for(lambda: worker.queue_position(RAYJOB_NAMESPACE, local_queue, workload)) == expected
        triggerer = AsyncRayJobHook(conn_id=component_tokens["triggerer"])
        positions = asyncio.run(triggerer.pending_positions(RAYJOB_NAMESPACE, local_queue))
        assert positions == {workload: expected}

        async def api_server_reads() -> dict:
            cache = ClusterCache(component_tokens["api-server"], [RAYJOB_NAMESPACE], CacheSettings())
            await cache.start()
            try:
                return (await cache.pending(queues.cluster_queue)).summary
            finally:
                await cache.stop()

        summary = asyncio.run(api_server_reads())
        assert [item["metadata"]["name"] for item in summary["items"]] == [workload]

        # Outside the grants: the worker has no cluster-wide read, nor a Role in the queues' own namespace.
        worker_api = worker.api_client
        code, status = get(worker_api, f"{VISIBILITY}/clusterqueues/{queues.cluster_queue}/pendingworkloads")
        assert (code, status["reason"]) == (403, "Forbidden")
        assert 'cannot get resource "clusterqueues/pendingworkloads"' in status["message"]
        code, _ = get(
            worker_api,
            f"{VISIBILITY}/namespaces/{queues.namespace}/localqueues/{queues.local_queue}/pendingworkloads",
        )
        assert code == 403
        assert worker.queue_position(queues.namespace, queues.local_queue, workload) is None
    finally:
        for job in jobs:
            queues.custom.delete_namespaced_custom_object(
                "ray.io", "v1", RAYJOB_NAMESPACE, "rayjobs", job["metadata"]["name"]
            )
