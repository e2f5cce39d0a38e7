"""The plugin on a MultiKueue manager with two workers (kubesim, over HTTP; ``multikueue_clusters``): the wait
follows Kueue's dispatch and names the worker, the driver log comes from that worker through its Airflow
connection (or the task says which connection is missing), a lost worker's RayJob is followed to its
re-dispatch, and the preflight judges the manager's quota."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid

import pytest
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred
from airflow.triggers.base import TaskSuccessEvent
from kubernetes import client
from kueue_ray.multikueue import worker_connection_id
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.sensors import RayJobSensor
from kueue_ray.trigger import RayJobTrigger

from kubesim.apiserver.server import write_kubeconfig
from tests.deployment_files import component_service_accounts, load_values, render_rbac, rights_of
from tests.integration.kueue_ray import multikueue_clusters as mkc
from tests.integration.kueue_ray.conftest import wait_for
from tests.integration.kueue_ray.test_end_in_triggerer import SupervisorChannel

pytestmark = mkc.KUBESIM_ONLY
AIRFLOW_NAMESPACE = "airflow"
SUBMITTED = "submitted successfully"
FOLLOWED = "sleep 150"
"""The entrypoint of the runs whose driver log is followed on the worker: 3 s at the tests' time scale, long
enough for a follower that misses the submitter pod once to look again (1 s later) under load; a log is
followed only while the job runs on the worker, as MultiKueue deletes the copy when it ends."""
"""What the K8sJobMode submitter prints (``ray job submit``): the driver log tail is recognisable by it."""


@pytest.fixture(scope="module")
def multikueue(tmp_path_factory):
    with mkc.start(tmp_path_factory.mktemp("multikueue")) as sims:
        yield mkc.connect(sims)


@pytest.fixture
def manager_connection(multikueue, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": multikueue.sims.manager.kubeconfig}}
        ),
    )
    yield multikueue
    for job in multikueue.custom.list_namespaced_custom_object(*mkc.RAY, mkc.NAMESPACE, "rayjobs")["items"]:
        multikueue.custom.delete_namespaced_custom_object(
            *mkc.RAY, mkc.NAMESPACE, "rayjobs", job["metadata"]["name"]
        )
    for worker in multikueue.workers:
        wait_for(
            lambda w=worker: (
                not multikueue.remote(w).list_namespaced_custom_object(*mkc.RAY, mkc.NAMESPACE, "rayjobs")[
                    "items"
                ]
            ),
            timeout=30,
        )


@pytest.fixture
def channel(monkeypatch) -> SupervisorChannel:
    channel = SupervisorChannel()
    monkeypatch.setattr("airflow.sdk.execution_time.task_runner.SUPERVISOR_COMMS", channel, raising=False)
    return channel


def operator(task_id: str = "train", **kwargs) -> SubmitRayJobOperator:
    return SubmitRayJobOperator(
        task_id=task_id,
        template=kwargs.pop("template", None) or mkc.body(),
        local_queue=mkc.LOCAL_QUEUE,
        priority="low",
        namespace=mkc.NAMESPACE,
        **kwargs,
    )


def deferred(op, context) -> RayJobTrigger:
    with pytest.raises(TaskDeferred) as raised:
        op.execute(context)
    trigger = RayJobTrigger(**raised.value.trigger.serialize()[1])
    trigger.task_instance = context["ti"]
    return trigger


async def the_event(trigger: RayJobTrigger, timeout: float = 60):
    events = trigger.run()
    try:
        return await asyncio.wait_for(events.__anext__(), timeout)
    finally:
        await events.aclose()


def test_a_success_names_its_worker_and_carries_the_driver_log_followed_there(
    manager_connection, task_context, capfd, channel, monkeypatch
):
    multikueue = manager_connection
    multikueue.worker_connections(monkeypatch, "worker1", "worker2")
    context = task_context("train")
    event = asyncio.run(
        the_event(deferred(operator(template=mkc.body(FOLLOWED), log_tail_lines=20), context))
    )

    assert isinstance(event, TaskSuccessEvent)
    xcoms = channel.xcoms()
    worker = xcoms["rayjob"]["worker_cluster"]
    assert worker in ("worker1", "worker2")
    assert multikueue.dispatched_to(xcoms["rayjob"]["uid"]) == worker
    assert [a["worker_cluster"] for a in xcoms["timeline"]["admissions"]] == [worker]
    assert xcoms["timeline"]["worker_cluster"] == worker
    rayjob = xcoms["rayjob"]
    assert (
        xcoms["_link_RayDashboardLink"]
        == f"https://ray.example/{worker}/{rayjob['namespace']}/{rayjob['name']}/#/jobs"
    )
    told = capfd.readouterr().out
    # Kueue's own words name the worker in the ADMITTED or RUNNING line, whichever the wait saw first
    assert (
        f'multikueue: The workload was admitted on "{worker}"' in told
        or f"in worker cluster {worker}]" in told
    )
    assert f"was dispatched by MultiKueue to worker cluster {worker}" in told
    assert f"reached through the Airflow connection 'kueue_worker_{worker}'" in told
    # Followed on the worker while it ran (the manager ran no submitter pod, and MultiKueue deletes the
    # worker's copy as the job finishes, before a read at the end could find it)
    assert SUBMITTED in told.partition("Last 20 lines of the Ray driver (submitter) log")[2]


def test_a_wait_in_a_worker_slot_and_a_task_resumed_on_a_worker_carry_the_driver_log_from_the_worker_too(
    manager_connection, task_context, capfd, monkeypatch
):
    multikueue = manager_connection
    multikueue.worker_connections(monkeypatch, "worker1", "worker2")
    in_slot = task_context("train")
    operator(template=mkc.body(FOLLOWED), log_tail_lines=20, deferrable=False, poll_interval=0.1).execute(
        in_slot
    )
    told = capfd.readouterr().out
    assert SUBMITTED in told.partition("Last 20 lines of the Ray driver (submitter) log")[2]

    resumed = task_context("again", run_id="manual__2")
    op = operator(task_id="again", template=mkc.body(FOLLOWED), log_tail_lines=20, end_in_triggerer=False)
    event = asyncio.run(the_event(deferred(op, resumed)))
    assert SUBMITTED in event.payload["driver_log_tail"]
    op.execute_complete(resumed, event.payload)
    told = capfd.readouterr().out
    assert SUBMITTED in told.partition("Last 20 lines of the Ray driver (submitter) log")[2]
    assert multikueue.dispatched_to(event.payload["uid"]) == event.payload["worker_cluster"]


def test_a_poke_mode_sensor_carries_the_driver_log_followed_on_the_worker(
    manager_connection, task_context, capfd, monkeypatch
):
    """The sensor waiting in poke mode follows the log between pokes as the operator's wait in a slot does
    (MultiKueue deletes the worker's copy as the job ends, before a read at the end could find it)."""
    multikueue = manager_connection
    multikueue.worker_connections(monkeypatch, "worker1", "worker2")
    context = task_context("train")
    reference = operator(template=mkc.body(FOLLOWED), wait_for_completion=False).execute(context)
    sensor = RayJobSensor(
        task_id="wait",
        rayjob_name=reference["name"],
        namespace=mkc.NAMESPACE,
        deferrable=False,
        mode="poke",
        poke_interval=0.1,
        timeout=120,
        log_tail_lines=20,
    )
    sensor.execute(task_context("wait"))
    told = capfd.readouterr().out
    assert SUBMITTED in told.partition("Last 20 lines of the Ray driver (submitter) log")[2]


def test_without_a_worker_connection_the_task_succeeds_and_says_which_connection_to_create(
    manager_connection, task_context, capfd
):
    context = task_context("train")
    result = operator(log_tail_lines=20, deferrable=False, poll_interval=0.1).execute(context)

    worker = context["ti"].xcom["timeline"]["worker_cluster"]
    assert worker in ("worker1", "worker2")
    assert result["name"]
    told = capfd.readouterr()
    said = told.out + told.err
    assert f"No Airflow connection 'kueue_worker_{worker}' for MultiKueue worker cluster '{worker}'" in said
    assert f"AIRFLOW_CONN_KUEUE_WORKER_{worker.upper()}" in said
    assert "Last 20 lines of the Ray driver" not in said


def test_a_rayjob_whose_worker_is_lost_is_waited_for_evicted_under_its_run_timeout(
    manager_connection, task_context, capfd
):
    """The lost worker's copy keeps Running on the manager (its mirrored status) for Kueue's workerLostTimeout
    (60 simulated s here); then the check's Retry evicts it, and the manager keeps the quota: Kueue releases
    it only once the mirrored status stops being active (``jobframework`` reconciler step 6,
    ``RayJob.IsActive``), which the lost worker cannot say. The wait says so and its run clock goes on, so
    ``run_timeout`` ends it rather than nothing ever ending it."""
    multikueue = manager_connection
    context = task_context("train")
    op = operator(template=mkc.body("sleep infinity"), log_tail_lines=0, run_timeout=8)
    trigger = deferred(op, context)
    broken: list[str] = []

    def lose_the_worker():
        home = wait_for(lambda: multikueue.dispatched_to(trigger.uid), timeout=30)
        wait_for(
            lambda: (
                ((multikueue.rayjob(trigger.name) or {}).get("status") or {}).get("jobStatus") == "RUNNING"
            )
        )
        multikueue.set_kubeconfig_server(home, "http://127.0.0.1:1")
        broken.append(home)

    breaker = threading.Thread(target=lose_the_worker)
    breaker.start()
    try:
        event = asyncio.run(the_event(trigger, timeout=60))
    finally:
        breaker.join()
        for home in broken:
            multikueue.set_kubeconfig_server(home, None)
    payload = event.payload
    assert (payload["status"], payload["phase"]) == ("run_timeout", "EVICTED"), payload
    assert "still EVICTED" in payload["message"] and "(run_timeout=8s)" in payload["message"]
    [home] = broken
    timeline = payload["timeline"]
    assert [a["worker_cluster"] for a in timeline["admissions"]] == [home]
    assert [e["reason"] for e in timeline["evictions"]] == ["AdmissionCheck"]
    told = capfd.readouterr().out
    evicted_line = next(line for line in told.splitlines() if ": EVICTED (AdmissionCheck):" in line)
    assert 'Evicted due to AdmissionCheck in Retry state: "multikueue" (Admitting remote lost' in evicted_line
    assert "a worker out of reach says nothing until it is reachable again" in evicted_line


def test_the_preflight_judges_the_managers_quota_not_its_nodes(manager_connection, task_context):
    """The manager's ClusterQueue holds the quota (8 GPUs) and the workers the capacity: the manager's only
    node has no GPU, and a RayJob asking for one is still submitted (the preflight judges quota, never the
    manager's nodes); what the manager's quota can never admit is refused before anything is created."""
    multikueue = manager_connection
    client.CoreV1Api(multikueue.manager).create_node(
        {
            "metadata": {"name": "manager-cpu-only"},
            "status": {
                "capacity": {"cpu": "1", "memory": "4Gi"},
                "allocatable": {"cpu": "1", "memory": "4Gi"},
            },
        }
    )
    gpus = mkc.body(requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})
    op = operator(template=gpus, wait_for_completion=False, deferrable=False)
    reference = op.execute(task_context("gpu"))
    wait_for(lambda: multikueue.workload(reference["uid"]))

    too_big = mkc.body(requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "9"})
    with pytest.raises(
        AirflowFailException, match=r"RayJob needs 9 nvidia.com/gpu .* ClusterQueue cq provides at most 8"
    ):
        operator(template=too_big, wait_for_completion=False, deferrable=False, task_id="big").execute(
            task_context("big")
        )
    assert [
        j["metadata"]["uid"]
        for j in multikueue.custom.list_namespaced_custom_object(*mkc.RAY, mkc.NAMESPACE, "rayjobs")["items"]
    ] == [reference["uid"]]


def running_on_a_worker(multikueue, uid: str, name: str) -> str | None:
    """The worker whose copy of RayJob ``name`` runs its Ray job, once the manager's mirror says so."""
    worker = multikueue.dispatched_to(uid)
    copy = multikueue.rayjob(name, multikueue.remote(worker)) if worker else None
    return worker if ((copy or {}).get("status") or {}).get("jobStatus") == "RUNNING" else None


def copies_gone(multikueue, name: str, workload_name: str) -> bool:
    """No copy of the RayJob nor of its Workload is left on any worker (remote Workloads keep the manager's
    Workload name, ``cloneForCreate``)."""
    for worker in multikueue.workers:
        remote = multikueue.remote(worker)
        if multikueue.rayjob(name, remote) is not None:
            return False
        try:
            remote.get_namespaced_custom_object(*mkc.KUEUE, mkc.NAMESPACE, "workloads", workload_name)
            return False
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    return True


def test_marking_the_deferred_task_failed_deletes_the_managers_rayjob_and_kueue_removes_the_workers_copy(
    manager_connection, task_context, user_kill
):
    """What Airflow's triggerer does for a task marked failed (``RayJobTrigger.on_kill``) deletes the
    manager's RayJob only; MultiKueue deletes the worker's RayJob and Workload (``workload.go`` Reconcile: a
    deleted local Workload removes every remote's objects)."""
    multikueue = manager_connection
    context = task_context("train")
    trigger = deferred(operator(template=mkc.body("sleep infinity")), context)
    worker = wait_for(lambda: running_on_a_worker(multikueue, trigger.uid, trigger.name), timeout=30)
    workload_name = multikueue.workload(trigger.uid)["metadata"]["name"]

    user_kill(trigger)

    wait_for(lambda: multikueue.rayjob(trigger.name) is None, timeout=30)
    wait_for(lambda: copies_gone(multikueue, trigger.name, workload_name), timeout=30)
    assert worker in multikueue.workers


def test_killing_a_task_waiting_in_a_worker_slot_deletes_the_managers_rayjob_and_its_worker_copy(
    manager_connection, task_context
):
    """``deferrable=False``: the operator's ``on_kill`` (a user marking the running task failed) deletes the
    manager's RayJob this try owns; MultiKueue removes the copy."""
    multikueue = manager_connection
    op = operator(template=mkc.body("sleep infinity"), deferrable=False, poll_interval=0.1)
    outcome: list[list[BaseException]] = []
    waiting = threading.Thread(target=lambda: outcome.append(ended(op.execute, task_context("train"))))
    waiting.start()
    try:
        name = wait_for(lambda: next(iter(job_names(multikueue)), None), timeout=30)
        uid = multikueue.rayjob(name)["metadata"]["uid"]
        wait_for(lambda: running_on_a_worker(multikueue, uid, name), timeout=30)
        workload_name = multikueue.workload(uid)["metadata"]["name"]
        op.on_kill()
        wait_for(lambda: copies_gone(multikueue, name, workload_name), timeout=30)
    finally:
        waiting.join(timeout=30)
    assert multikueue.rayjob(name) is None
    [[raised]] = outcome
    assert "was deleted" in str(raised)


def job_names(multikueue) -> list[str]:
    items = multikueue.custom.list_namespaced_custom_object(*mkc.RAY, mkc.NAMESPACE, "rayjobs")["items"]
    return [j["metadata"]["name"] for j in items]


def ended(run, *args) -> list[BaseException]:
    """Run a task; what it raised (none: an empty list)."""
    raised: list[BaseException] = []
    try:
        run(*args)
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        raised.append(exc)
    return raised


def test_the_janitor_deletes_an_orphan_on_the_manager_and_kueue_removes_the_workers_copy(
    manager_connection, task_context
):
    """The janitor runs against the manager (its ``kubernetes_default``) as against one cluster: an orphan's
    manager RayJob is deleted, its quota freed on the manager, and MultiKueue removes the worker's copy."""
    from kueue_ray.janitor import DeleteOrphanedRayJobsOperator

    from tests.integration.kueue_ray.test_janitor import AirflowStates

    multikueue = manager_connection
    orphan = operator(
        template=mkc.body("sleep infinity"), wait_for_completion=False, task_id="submit"
    ).execute(task_context("submit", run_id="r1"))
    wait_for(lambda: running_on_a_worker(multikueue, orphan["uid"], orphan["name"]), timeout=30)
    workload_name = multikueue.workload(orphan["uid"])["metadata"]["name"]
    states = AirflowStates({"r1": {"submit": "failed"}})

    janitor = DeleteOrphanedRayJobsOperator(task_id="delete_orphans", namespaces=[mkc.NAMESPACE])
    found = janitor.execute({"ti": states})

    assert [(f["name"], f["result"]) for f in found] == [(orphan["name"], "deleted")]
    wait_for(lambda: multikueue.rayjob(orphan["name"]) is None, timeout=30)
    wait_for(lambda: copies_gone(multikueue, orphan["name"], workload_name), timeout=30)


def test_the_tabs_priority_change_is_refused_once_multikueue_dispatched_the_rayjob(
    manager_connection, task_context
):
    """Through the Kueue pages' cluster cache on the manager, as the tab's POST does it: before dispatch the
    label changes (the manager's Workload is the only one); once dispatched the change is refused with
    MultiKueue's reason, and the RayJob keeps its class (relabelling would have the manager's MultiKueue
    and the worker's Kueue overwrite the copy's class without end)."""
    from kueue_ray.priority_change import priority_terms
    from kueue_ray.ui.cache import CacheSettings, ClusterCache
    from kueue_ray.ui.priority_edit import change_priority, dispatched_to

    multikueue = manager_connection
    policy = {"allowed": ["low", "high"]}
    # a RayJob no worker has room for (3 CPUs > a worker's 2): it stays undispatched; and one that runs
    undispatched = operator(
        template=mkc.body("sleep infinity", requests={"cpu": "3", "memory": "1Gi"}),
        wait_for_completion=False,
        task_id="big",
    ).execute(task_context("big"))
    running = operator(template=mkc.body("sleep infinity"), wait_for_completion=False).execute(
        task_context("train")
    )
    worker = wait_for(lambda: running_on_a_worker(multikueue, running["uid"], running["name"]), timeout=30)
    terms = priority_terms(policy, type("Run", (), {"run_type": "manual"})())

    async def scenario():
        cache = ClusterCache("kubernetes_default", [mkc.NAMESPACE], CacheSettings(backoff_initial=0.05))
        await cache.start()
        try:
            deadline = asyncio.get_running_loop().time() + 30
            while dispatched_to(cache.snapshot().workloads, running) != worker:
                assert asyncio.get_running_loop().time() < deadline, "the cache never saw the dispatch"
                await asyncio.sleep(0.05)
            workloads = cache.snapshot().workloads
            assert dispatched_to(workloads, undispatched) is None
            refused = await change_priority(
                cache, running | terms, "low", "high", "ada", dispatched_to(workloads, running)
            )
            allowed = await change_priority(
                cache, undispatched | terms, "low", "high", "ada", dispatched_to(workloads, undispatched)
            )
            return refused, allowed
        finally:
            await cache.stop()

    (status, message), (ok, _) = asyncio.run(scenario())
    assert status == 409
    assert f"dispatched by MultiKueue to worker cluster '{worker}'" in message
    assert "without end" in message
    assert multikueue.rayjob(running["name"])["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "low"
    assert ok == 200
    assert (
        multikueue.rayjob(undispatched["name"])["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
        == "high"
    )


def test_a_rayjob_no_worker_can_admit_waits_for_a_worker_says_so_and_ends_under_its_queue_timeout(
    manager_connection, task_context, capfd
):
    """Airflow has no connection to the workers, so the preflight cannot judge them (the next test does):
    the manager reserves its quota (3.5 CPUs of 8) but no worker has room (2 CPUs each): the check stays
    Pending while MultiKueue keeps a copy on every worker, and the wait says it waits for a worker; quota
    reserved is still not admitted, so the queue clock runs and ``queue_timeout`` ends the wait."""
    context = task_context("big")
    big = mkc.body("sleep infinity", requests={"cpu": "3", "memory": "1Gi"})
    trigger = deferred(operator(template=big, task_id="big", queue_timeout=3), context)
    event = asyncio.run(the_event(trigger, timeout=60))

    payload = event.payload
    assert (payload["status"], payload["phase"]) == ("queue_timeout", "AWAITING_CHECKS"), payload
    assert payload["worker_cluster"] is None
    told = capfd.readouterr().out
    waiting = next(line for line in told.splitlines() if f"{trigger.name}: AWAITING_CHECKS" in line)
    assert (
        "quota reserved in ClusterQueue cq, waiting for admission checks: multikueue (Pending; waiting for a worker cluster to admit it"
        in waiting
    )


def manager_rayjobs(multikueue) -> list[str]:
    listed = multikueue.custom.list_namespaced_custom_object(*mkc.RAY, mkc.NAMESPACE, "rayjobs")["items"]
    return [j["metadata"]["name"] for j in listed]


def test_a_rayjob_no_worker_has_room_for_is_refused_before_anything_is_created(
    manager_connection, task_context, monkeypatch
):
    """With a connection to every worker of the check's MultiKueueConfig, the preflight reads each worker's
    queue: the manager's quota fits 3.5 CPUs, no worker's (2 CPUs) ever will, and the task fails at once
    naming both instead of waiting for its queue_timeout. With one worker unread it is left to Kueue."""
    multikueue = manager_connection
    multikueue.worker_connections(monkeypatch, "worker1", "worker2")
    big = mkc.body("sleep infinity", requests={"cpu": "3", "memory": "1Gi"})
    with pytest.raises(AirflowFailException) as refused:
        operator(template=big, task_id="big", wait_for_completion=False).execute(task_context("big"))
    message = str(refused.value)
    assert "no MultiKueue worker cluster of ClusterQueue cq (worker1, worker2) can ever admit it" in message
    assert (
        "on worker1, RayJob needs 3.5 CPU (head 3 + submitter 0.5) but ClusterQueue cq provides at most 2"
        in message
    )
    assert "on worker1 or worker2, raise nominalQuota or request less CPU" in message
    assert manager_rayjobs(multikueue) == []

    monkeypatch.delenv("AIRFLOW_CONN_KUEUE_WORKER_WORKER2")
    reference = operator(template=big, task_id="big", wait_for_completion=False).execute(task_context("big"))
    assert manager_rayjobs(multikueue) == [reference["name"]]


def test_the_preflight_on_a_manager_and_its_workers_stays_within_the_worker_accounts_grants(
    manager_connection, task_context, monkeypatch, tmp_path
):
    """The worker component's account on the manager reads the check and its MultiKueueConfig (granted by
    rbac.yaml's ClusterRole), and on each worker, through ``kueue_worker_<name>`` as the same account of
    rbac.yaml applied there, the LocalQueue and ClusterQueue: nothing either RBAC would refuse."""
    multikueue = manager_connection
    account = component_service_accounts(load_values())["worker"]
    user = f"system:serviceaccount:{AIRFLOW_NAMESPACE}:{account}"
    granted = rights_of(render_rbac(AIRFLOW_NAMESPACE), AIRFLOW_NAMESPACE, account)
    sims = {"kubernetes_default": multikueue.sims.manager} | {
        worker_connection_id(name): sim for name, sim in multikueue.sims.workers.items()
    }
    since = {conn: len(sim.requests()) for conn, sim in sims.items()}
    for conn, sim in sims.items():
        token = uuid.uuid4().hex
        sim.add_user(token, user)
        kubeconfig = tmp_path / f"{conn}.kubeconfig"
        write_kubeconfig(kubeconfig, sim.url, token)
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn.upper()}",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
        )

    big = mkc.body(requests={"cpu": "3", "memory": "1Gi"})
    with pytest.raises(AirflowFailException, match="no MultiKueue worker cluster"):
        operator(template=big, task_id="big", wait_for_completion=False).execute(task_context("big"))

    for conn, sim in sims.items():
        mine = [r for r in sim.requests()[since[conn] :] if r["user"] == user and r["resource"]]
        rights = {(r["group"], r["resource"], r["verb"], r["namespace"] or None) for r in mine}
        assert rights, f"no call on {conn}: the check would prove nothing"
        cluster_wide = {(g, res, verb) for g, res, verb, ns in rights if ns is None}
        in_namespace = {(g, res, verb) for g, res, verb, ns in rights if ns is not None}
        assert cluster_wide - granted.cluster == set(), f"cluster calls on {conn} rbac.yaml refuses"
        # rbac.yaml's Roles are for namespace ray; this cluster's queues are in default: judged by those.
        assert in_namespace - granted.namespaced["ray"] == set(), f"calls on {conn} the Role refuses"
    manager_calls = {
        (r["resource"], r["verb"])
        for r in multikueue.sims.manager.requests()[since["kubernetes_default"] :]
        if r["user"] == user
    }
    assert {("admissionchecks", "get"), ("multikueueconfigs", "get")} <= manager_calls
