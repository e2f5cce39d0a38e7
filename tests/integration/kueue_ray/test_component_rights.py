"""Each Airflow component's code, run against kubesim with credentials of its own, stays within the RBAC
its Helm ServiceAccount gets from include/manifests/rbac/rbac.yaml.

The accounts come from include/helm/values.yaml by the chart's rules (tests/deployment_files.py); each gets
a token kubesim authenticates as ``system:serviceaccount:<airflow namespace>:<account>``, and a kubernetes
connection of its own. The worker submits (SubmitRayJobOperator's preflight and create), the triggerer
waits (RayJobTrigger on the shared watch, up to the success event), the api-server serves the Kueue pages
(the cluster cache's lists and watches, a visibility read). What each did comes from kubesim's request log,
attributed by user as a cluster's audit log attributes it: the rights used are an audit of the code, not a
list kept beside the Role.

Which Role holds which verb is judged here for the calls these scenarios make; the e2e RBAC test
(tests/e2e/test_99_security.py) checks that every granted right is used somewhere.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.rayservice.trigger import RayServiceTrigger
from kueue_ray.trigger import RayJobTrigger
from kueue_ray.ui.cache import CacheSettings, ClusterCache

from kubesim.apiserver.server import write_kubeconfig
from tests.deployment_files import Right, component_service_accounts, load_values, render_rbac, rights_of
from tests.integration.kueue_ray.serve_support import deploy_op, first_event, run_context, service_body

AIRFLOW_NAMESPACE = "airflow"
"""The namespace the README installs the release into (tests/unit/project/test_helm_values.py checks it)."""
RAYJOB_NAMESPACE = "ray"
"""Where rbac.yaml's Roles are; this test's RayJobs run in a namespace of their own, judged by those Roles."""
QUICK = CacheSettings(backoff_initial=0.05, backoff_max=0.3, visibility_min_interval=0.2)


@pytest.fixture
def component_connections(kubesim, tmp_path, monkeypatch) -> dict[str, tuple[str, str]]:
    """component -> (Airflow connection id, the user kubesim records for its token)."""
    accounts = component_service_accounts(load_values())
    connections = {}
    for component, account in accounts.items():
        token = uuid.uuid4().hex
        user = f"system:serviceaccount:{AIRFLOW_NAMESPACE}:{account}"
        kubesim.add_user(token, user)
        kubeconfig = tmp_path / f"{component}.kubeconfig"
        write_kubeconfig(kubeconfig, kubesim.url, token)
        conn_id = f"kueue_ray_{component.replace('-', '_')}"
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
        )
        connections[component] = (conn_id, user)
    return connections


def used(records: list[dict], user: str, namespace: str) -> tuple[set[Right], set[Right]]:
    """(rights used in ``namespace``, rights used cluster-wide) by ``user``'s requests. Requests into other
    namespaces are left out: the session's triggerer hub may still be winding down an earlier test's."""
    namespaced, cluster = set(), set()
    for record in records:
        if record["user"] != user or not record["resource"]:
            continue
        resource = (
            f"{record['resource']}/{record['subresource']}" if record["subresource"] else record["resource"]
        )
        right = (record["group"], resource, record["verb"])
        if record["namespace"] == namespace:
            namespaced.add(right)
        elif not record["namespace"]:
            cluster.add(right)
    return namespaced, cluster


def assert_within_grants(records: list[dict], rbac: list[dict], connections: dict, namespace: str) -> None:
    """Every component made calls, and none that its account's Roles would refuse."""
    for component, (_, user) in connections.items():
        account = user.rsplit(":", 1)[1]
        granted = rights_of(rbac, AIRFLOW_NAMESPACE, account)
        in_namespace, cluster_wide = used(records, user, namespace)
        assert in_namespace | cluster_wide, f"the {component} made no call: the check would prove nothing"
        assert in_namespace - granted.namespaced.get(RAYJOB_NAMESPACE, set()) == set(), (
            f"{component} ({account}) made calls its Role in {RAYJOB_NAMESPACE} forbids"
        )
        assert cluster_wide - granted.cluster == set(), (
            f"{component} ({account}) made cluster calls it may not"
        )


def test_each_component_uses_only_what_its_account_is_granted(
    kubesim, queues, rayjob_body, task_context, component_connections
):
    (worker_conn, worker), (triggerer_conn, triggerer), (api_conn, api_server) = (
        component_connections[c] for c in ("worker", "triggerer", "api-server")
    )
    since = len(kubesim.requests())

    context = task_context("train")
    operator = SubmitRayJobOperator(
        task_id="train",
        template=rayjob_body(duration="2"),
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        log_tail_lines=0,
        end_in_triggerer=False,
        kubernetes_conn_id=worker_conn,
    )
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    _, kwargs = deferred.value.trigger.serialize()
    # The triggerer re-creates the trigger from its kwargs; in the cluster it runs as its own account.
    trigger = RayJobTrigger(**{**kwargs, "kubernetes_conn_id": triggerer_conn})

    async def scenario() -> dict:
        cache = ClusterCache(api_conn, [queues.namespace], QUICK)
        await cache.start()
        try:
            events = trigger.run()
            try:
                event = await asyncio.wait_for(events.__anext__(), 60)
            finally:
                await events.aclose()
            deadline = asyncio.get_running_loop().time() + 30
            while not (cache.health().reachable and cache.snapshot().workloads):
                assert asyncio.get_running_loop().time() < deadline, "the cache never listed the Workload"
                await asyncio.sleep(0.05)
            await cache.pending(queues.cluster_queue)
            return event.payload
        finally:
            await cache.stop()

    payload = asyncio.run(scenario())
    assert payload["status"] == "success", payload

    records = kubesim.requests()[since:]
    rbac = render_rbac(AIRFLOW_NAMESPACE)
    assert_within_grants(records, rbac, component_connections, queues.namespace)

    # What sets the components apart, as used here: only the worker creates; the api-server only reads.
    worker_ns, _ = used(records, worker, queues.namespace)
    assert ("ray.io", "rayjobs", "create") in worker_ns
    triggerer_ns, _ = used(records, triggerer, queues.namespace)
    assert ("ray.io", "rayjobs", "list") in triggerer_ns, "the shared watch lists before it watches"
    assert {verb for _, _, verb in triggerer_ns} <= {"get", "list", "watch", "delete"}
    api_ns, api_cluster = used(records, api_server, queues.namespace)
    assert {verb for _, _, verb in api_ns | api_cluster} <= {"get", "list", "watch"}
    assert ("visibility.kueue.x-k8s.io", "clusterqueues/pendingworkloads", "get") in api_cluster
    # The check tells the accounts apart: the worker's calls would be refused to the api-server's account.
    api_granted = rights_of(rbac, AIRFLOW_NAMESPACE, api_server.rsplit(":", 1)[1])
    assert worker_ns - api_granted.namespaced[RAYJOB_NAMESPACE], "the api-server may do all the worker did"


def test_deploying_a_rayservice_stays_within_each_components_grants(kubesim, queues, component_connections):
    """DeployRayServiceOperator: the worker creates the RayService, the triggerer follows it to SERVING,
    the api-server's cache watches it."""
    (worker_conn, worker), (triggerer_conn, triggerer), (api_conn, _) = (
        component_connections[c] for c in ("worker", "triggerer", "api-server")
    )
    since = len(kubesim.requests())
    context = run_context("manual__1")
    operator = deploy_op(queues, service_body(), kubernetes_conn_id=worker_conn)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context)
    _, kwargs = deferred.value.trigger.serialize()
    trigger = RayServiceTrigger(**{**kwargs, "kubernetes_conn_id": triggerer_conn})

    async def scenario() -> dict:
        cache = ClusterCache(api_conn, [queues.namespace], QUICK)
        await cache.start()
        try:
            event = await first_event(trigger)
            deadline = asyncio.get_running_loop().time() + 30
            while not cache.health().reachable:
                assert asyncio.get_running_loop().time() < deadline, "the cache never listed"
                await asyncio.sleep(0.05)
            return event
        finally:
            await cache.stop()

    event = asyncio.run(scenario())
    result = operator.execute_complete(context, event=event)
    assert result["name"]

    records = kubesim.requests()[since:]
    assert_within_grants(records, render_rbac(AIRFLOW_NAMESPACE), component_connections, queues.namespace)
    worker_ns, _ = used(records, worker, queues.namespace)
    assert ("ray.io", "rayservices", "create") in worker_ns
    triggerer_ns, _ = used(records, triggerer, queues.namespace)
    assert {verb for _, _, verb in triggerer_ns} <= {"get", "list", "watch", "delete"}
