"""DeployRayServiceOperator against kubesim with Kueue's shipped configuration (Kueue admits the RayService
as one Workload): create, adopt on retry, Serve failures, in-place updates, the upgrade Kueue would never
start, and what waiting costs."""

from __future__ import annotations

import asyncio
import http.server
import threading

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from kueue_ray.hub import HUB
from kueue_ray.serving import RAYSERVICE_XCOM_KEY

from tests.integration.kueue_ray.conftest import wait_for
from tests.integration.kueue_ray.serve_support import (
    SERVE_CONFIG,
    defer,
    deploy_op,
    first_event,
    rayservices,
    run_context,
    service_body,
    trigger_log,
    wait_admitted,
    wait_deferred,
    workloads,
)


@pytest.fixture
def smoke_server():
    """A local HTTP server standing in for the Serve endpoint; records the paths asked for."""
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's naming
            paths.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", paths
    server.shutdown()


def test_a_new_service_is_queued_admitted_and_serves_then_the_smoke_request_reaches_it(
    queues, rayjob_body, task_context, smoke_server, capfd
):
    from kueue_ray.operators import SubmitRayJobOperator

    # A RayJob holding the whole queue first, so the service queues behind it.
    holder = SubmitRayJobOperator(
        task_id="blocker",
        template=rayjob_body(duration="inf"),
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
        log_tail_lines=0,
    ).execute(task_context("blocker"))
    wait_admitted(queues, holder)
    url, paths = smoke_server
    context = run_context("manual__1")
    op = deploy_op(queues, service_body(cpu="2"), smoke_url=url + "/{namespace}/{serve_service}")

    def release_the_queue():
        import time

        # Once KubeRay has observed the service, the trigger can say it is queued (real KubeRay's first
        # pass only adds its finalizer and looks again 2 s later).
        wait_for(
            lambda: [s for s in rayservices(queues) if (s.get("status") or {}).get("observedGeneration")]
        )
        time.sleep(1.0)  # the trigger logs the queued state meanwhile
        queues.custom.delete_namespaced_custom_object(
            "ray.io", "v1", queues.namespace, "rayjobs", holder["name"]
        )

    result = wait_deferred(op, context, during=release_the_queue)

    [service] = rayservices(queues)
    name = service["metadata"]["name"]
    assert result["name"] == name and result["serve_service"] == f"{name}-serve-svc"
    assert result["active_cluster"] == service["status"]["activeServiceStatus"]["rayClusterName"]
    assert context["ti"].xcom[RAYSERVICE_XCOM_KEY]["uid"] == service["metadata"]["uid"]
    owners = {(w["metadata"]["ownerReferences"][0]["kind"], w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"])
              for w in workloads(queues) if w["metadata"]["ownerReferences"][0]["kind"] == "RayService"}  # fmt: skip
    assert owners == {("RayService", service["metadata"]["uid"])}
    story = trigger_log(capfd)
    phases = [
        p for line in story for p in ("QUEUED", "ADMITTED", "DEPLOYING", "SERVING") if f": {p} (" in line
    ]
    assert phases[0] == "QUEUED" and phases[-1] == "SERVING" and "ADMITTED" in phases, story
    queued = next(line for line in story if ": QUEUED (" in line)
    assert "position 1 in the ClusterQueue (1 of 1 pending in its LocalQueue)" in queued
    assert "insufficient unused quota" in queued
    assert paths == [f"/{queues.namespace}/{name}-serve-svc"], "one smoke request, its URL filled in"


def test_a_retry_adopts_the_service_the_earlier_try_deployed(queues, capfd):
    first = run_context("manual__1", try_number=1)
    trigger = defer(deploy_op(queues, service_body()), first)
    # The first try's worker died here; the retry of the same run finds the RayService.
    retry = run_context("manual__1", try_number=2)
    capfd.readouterr()
    result = deploy_op(queues, service_body(), deferrable=False).execute(retry)

    [service] = rayservices(queues)
    assert service["metadata"]["uid"] == trigger.uid == result["uid"]
    assert service["metadata"]["annotations"]["airflow.apache.org/try-number"] == "2"
    assert "adopted from try 1" in capfd.readouterr().out


def test_deploy_failed_fails_with_serves_message_and_deletes_the_service_it_created(queues, capfd):
    # Serve cannot import a module whose name is no Python identifier: kubesim and the real stack's Serve
    # both fail this config, from what Ray is sent.
    body = service_body()
    body["spec"]["serveConfigV2"] = SERVE_CONFIG.replace("serve_model:app", "serve-model:app")
    context = run_context("manual__1")
    op = deploy_op(queues, body)
    trigger = defer(op, context)
    event = asyncio.run(first_event(trigger))

    assert event["status"] == "failed" and event["phase"] == "DEPLOY_FAILED"
    with pytest.raises(AirflowException) as error:
        op.execute_complete(context, event=event)
    message = str(error.value)
    assert "application forecast is DEPLOY_FAILED" in message
    assert "ModuleNotFoundError: No module named 'serve-model'" in message
    # Deleted, not left holding quota: KubeRay's finalizer deletes the RayService's clusters first, so on a
    # busy machine the object can still be Terminating when the task has failed.
    wait_for(lambda: rayservices(queues) == [])


def test_the_shipped_config_refuses_a_cluster_upgrade_of_a_serving_service_and_changes_nothing(queues):
    first = deploy_op(queues, service_body("/models/v1"), deferrable=False).execute(run_context("manual__1"))
    [before] = rayservices(queues)

    with pytest.raises(AirflowFailException) as error:
        deploy_op(queues, service_body("/models/v2"), deferrable=False).execute(run_context("manual__2"))

    message = str(error.value)
    assert "integrations.frameworks" in message and "mode='new_service'" in message
    assert f"RayCluster {first['active_cluster']} keeps serving" in message
    [after] = rayservices(queues)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]


def test_a_new_serve_config_alone_is_deployed_in_place_on_the_same_cluster(queues, capfd):
    first = deploy_op(queues, service_body(), deferrable=False).execute(run_context("manual__1"))
    body = service_body()
    body["spec"]["serveConfigV2"] = SERVE_CONFIG + "    route_prefix: /v2\n"

    second = wait_deferred(deploy_op(queues, body), run_context("manual__2"))

    assert second["active_cluster"] == first["active_cluster"]
    assert second["replaced_cluster"] is None
    [service] = rayservices(queues)
    assert "route_prefix: /v2" in service["spec"]["serveConfigV2"]
    pending = service["status"].get("pendingServiceStatus") or {}
    assert not pending.get("rayClusterName"), "no second cluster for a Serve config"


def test_deferred_waits_make_no_requests_while_nothing_changes(kubesim, queues, rayjob_body, task_context):
    """Three services queued behind a RayJob that holds the queue: once their triggers have read the state,
    waiting costs the API server nothing but the two shared watches (one RayService, one Workload)."""
    from kueue_ray.operators import SubmitRayJobOperator

    SubmitRayJobOperator(
        task_id="blocker",
        template=rayjob_body(duration="inf"),
        local_queue=queues.local_queue,
        priority=queues.high,
        namespace=queues.namespace,
        wait_for_completion=False,
        log_tail_lines=0,
    ).execute(task_context("blocker"))
    triggers = [
        defer(deploy_op(queues, service_body(cpu="2"), task_id=f"serve{i}"), run_context("manual__1", task_id=f"serve{i}"))
        for i in range(3)
    ]  # fmt: skip

    async def scenario():
        waiting = [asyncio.create_task(first_event(t)) for t in triggers]
        await asyncio.sleep(2.0)  # every trigger read the state and logged QUEUED
        await asyncio.to_thread(kubesim.clear_requests)
        await asyncio.sleep(3.0)
        quiet = [r for r in await asyncio.to_thread(kubesim.requests) if r["namespace"] == queues.namespace]
        loops = HUB.watch_loops()
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        return quiet, loops, [task.done() for task in waiting]

    quiet, loops, _ = asyncio.run(scenario())
    assert quiet == [], "no request while nothing changes"
    assert [kind for (_, namespace, kind) in loops if namespace == queues.namespace] == [
        "rayservice",
        "workload",
    ]


def test_another_deployments_service_is_refused_naming_its_owner_and_taken_over_only_when_told(
    queues, monkeypatch, capfd
):
    """Staging and prod configured the same service_name: prod's deploy must not silently upgrade the
    service staging serves from; take_over=True makes it prod's, deliberately."""
    import kueue_ray.deployment

    with monkeypatch.context() as staging_env:
        staging_env.setenv("AIRFLOW__KUEUE_RAY__DEPLOYMENT", "staging")
        kueue_ray.deployment.current.cache_clear()
        staging = deploy_op(queues, service_body(), service_name="forecast", deferrable=False).execute(
            run_context("manual__1")
        )
    kueue_ray.deployment.current.cache_clear()
    body = service_body()
    body["spec"]["serveConfigV2"] = SERVE_CONFIG + "    route_prefix: /v2\n"

    with pytest.raises(AirflowFailException) as error:
        deploy_op(queues, body, service_name="forecast", deferrable=False).execute(run_context("manual__1"))
    message = str(error.value)
    assert (
        "belongs to another Airflow deployment, staging (DAG serving_pipeline, task serve, run manual__1)"
        in message
    )
    assert "take_over=True" in message
    [untouched] = rayservices(queues)
    assert untouched["metadata"]["uid"] == staging["uid"]
    assert "route_prefix: /v2" not in untouched["spec"]["serveConfigV2"]

    capfd.readouterr()
    taken = deploy_op(queues, body, service_name="forecast", take_over=True, deferrable=False).execute(
        run_context("manual__1")
    )
    [service] = rayservices(queues)
    assert service["metadata"]["uid"] == staging["uid"] == taken["uid"]
    assert service["metadata"]["labels"]["kueue-ray.airflow.apache.org/deployment"] == "tests"
    assert "route_prefix: /v2" in service["spec"]["serveConfigV2"]
    assert "take_over=True: RayService" in capfd.readouterr().out


def test_clearing_a_finished_deploy_under_the_shipped_config_checks_the_service_as_it_is_and_says_why(
    queues, capfd
):
    """Kueue's shipped configuration admits the RayService as one Workload: no second cluster can come up
    beside the serving one, so a Clear re-checks the service instead of failing on a refused upgrade."""
    first = deploy_op(queues, service_body(), deferrable=False).execute(run_context("manual__1"))
    capfd.readouterr()
    again = deploy_op(queues, service_body(), deferrable=False).execute(
        run_context("manual__1", try_number=2)
    )
    assert again["uid"] == first["uid"] and again["active_cluster"] == first["active_cluster"]
    log = capfd.readouterr().out
    assert "try 2 cannot roll it out again: Kueue admits this RayService as one Workload" in log
