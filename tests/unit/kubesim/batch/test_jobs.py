"""batch/v1 Jobs: the API server's defaulting and validation, the Job controller running their pods, and
Kueue's batch/job integration (Workload, admission into the pod template, eviction, finish)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from kubesim.batch.container import container_run
from kubesim.cluster import Cluster
from kubesim.errors import ApiError
from kubesim.kueue import jobs, webhook
from kubesim.kueue.jobs import BATCH_JOB
from tests.unit.kubesim.support import until

NS = "ml"
TIME_SCALE = 1000.0
JOBS = "jobs.batch"
WORKLOADS = "workloads.kueue.x-k8s.io"


def job(name: str = "pi", *, command: str = "sleep 5", queue: str | None = None, **spec) -> dict:
    labels = {jobs.QUEUE_LABEL: queue} if queue else {}
    container = {
        "name": "base",
        "image": "busybox",
        "command": ["sh", "-c", command],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    body = {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
    body.update(spec)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": body,
    }


def conditions(obj: dict) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def run(body: Callable, *, controllers=("kubesim.batch",), kueue: bool = False) -> None:
    async def main() -> None:
        names = (*controllers, "kubesim.kueue") if kueue else controllers
        cluster = Cluster(time_scale=TIME_SCALE, controllers=names)
        cluster.store.create("namespaces", {"metadata": {"name": NS}})
        if kueue:
            queues(cluster)
        await cluster.start()
        try:
            await asyncio.wait_for(body(cluster), 10)
        finally:
            await cluster.stop()

    asyncio.run(main())


def queues(cluster: Cluster) -> None:
    store = cluster.store
    flavor = {"nodeLabels": {"accelerator": "nvidia"}, "tolerations": [{"key": "sku", "operator": "Exists"}]}
    store.create("resourceflavors.kueue.x-k8s.io", {"metadata": {"name": "gpu"}, "spec": flavor})
    quota = [{"name": "cpu", "nominalQuota": "1"}, {"name": "memory", "nominalQuota": "1Gi"}]
    cq = {
        "namespaceSelector": {},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "gpu", "resources": quota}]}
        ],
    }
    store.create("clusterqueues.kueue.x-k8s.io", {"metadata": {"name": "cq"}, "spec": cq})
    lq = {"metadata": {"name": "user-queue", "namespace": NS}, "spec": {"clusterQueue": "cq"}}
    store.create("localqueues.kueue.x-k8s.io", lq)
    for name, value in (("low", 10), ("high", 1000)):
        store.create("workloadpriorityclasses.kueue.x-k8s.io", {"metadata": {"name": name}, "value": value})


def get(cluster: Cluster, name: str) -> dict:
    return cluster.store.get(JOBS, name, namespace=NS)


def pods(cluster: Cluster, name: str) -> list[dict]:
    uid = get(cluster, name)["metadata"]["uid"]
    found, _ = cluster.store.list(
        "pods", namespace=NS, label_selector=f"batch.kubernetes.io/controller-uid={uid}"
    )
    return found


def bare() -> Cluster:
    """The API server alone: only the test writes."""
    cluster = Cluster(controllers=())
    cluster.store.create("namespaces", {"metadata": {"name": NS}})
    return cluster


# -- the API server ---------------------------------------------------------------------------------------


def test_the_api_server_defaults_a_job_and_ties_its_pods_to_it_by_uid():
    cluster = bare()
    created = cluster.store.create(JOBS, job(), namespace=NS)
    spec, uid = created["spec"], created["metadata"]["uid"]
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"], spec["suspend"]) == (
        1,
        1,
        6,
        False,
    )
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
        "job-name": "pi",
        "batch.kubernetes.io/job-name": "pi",
    }


def test_a_job_whose_pods_would_restart_always_is_refused_naming_the_field():
    cluster = bare()
    body = job()
    del body["spec"]["template"]["spec"]["restartPolicy"]
    with pytest.raises(ApiError) as refused:
        cluster.store.create(JOBS, body, namespace=NS)
    assert refused.value.code == 422
    assert refused.value.message == (
        'Job.batch "pi" is invalid: spec.template.spec.restartPolicy: Unsupported value: "Always": '
        'supported values: "OnFailure", "Never"'
    )


def test_the_pod_template_changes_only_its_scheduling_directives_and_only_while_suspended_and_unstarted():
    cluster = bare()
    created = cluster.store.create(JOBS, job(suspend=True), namespace=NS)
    created["spec"]["template"]["spec"]["nodeSelector"] = {"accelerator": "nvidia"}
    created["spec"]["suspend"] = False
    started = cluster.store.update(JOBS, created)
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {"accelerator": "nvidia"}
    started["spec"]["template"]["spec"]["nodeSelector"] = {}
    with pytest.raises(ApiError) as refused:
        cluster.store.update(JOBS, started)
    assert refused.value.code == 422 and "spec.template: Invalid value" in refused.value.message
    started = cluster.store.get(JOBS, "pi", namespace=NS)
    started["spec"]["template"]["spec"]["containers"][0]["image"] = "perl"
    started["spec"]["suspend"] = True
    with pytest.raises(ApiError):
        cluster.store.update(JOBS, started)


# -- the Job controller -----------------------------------------------------------------------------------


def test_a_container_runs_as_its_command_says():
    assert container_run({"command": ["sh", "-c", "echo hi; sleep 7"]}) == container_run(
        {"command": ["/bin/bash"], "args": ["-c", "echo hi && sleep 7"]}
    )
    assert container_run({"command": ["sleep", "7"]}).seconds == 7
    assert container_run({"command": ["sh", "-c", "sleep 2; exit 3"]}).exit_code == 3
    assert container_run({"command": ["python", "train.py"]}).seconds == 30


def test_an_unsuspended_job_runs_its_pods_to_complete():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(
            JOBS, job(command="echo pi is 3.14; sleep 5", parallelism=2, completions=2), namespace=NS
        )
        done = await until(
            lambda: conditions(get(cluster, "pi")).get("Complete") == "True" and get(cluster, "pi"),
            "Complete",
        )
        assert list(conditions(done)) == ["SuccessCriteriaMet", "Complete"]
        assert done["status"]["succeeded"] == 2 and "active" not in done["status"]
        assert done["status"]["completionTime"] and done["status"]["startTime"]
        found = pods(cluster, "pi")
        assert len(found) == 2 and {p["status"]["phase"] for p in found} == {"Succeeded"}
        pod = found[0]
        assert pod["metadata"]["name"].startswith("pi-") and len(pod["metadata"]["name"]) == len("pi-") + 5
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
        assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "pi"
        assert cluster.logs.read(NS, pod["metadata"]["name"], "base") == "pi is 3.14\n"
        await until(lambda: ("Normal", "Completed", "Job completed") in job_events(cluster), "Completed")
        said = job_events(cluster)
        created = sorted(f"Created pod: {p['metadata']['name']}" for p in found)
        assert sorted(m for _, r, m in said if r == "SuccessfulCreate") == created

    run(body)


def job_events(cluster: Cluster, name: str = "pi") -> list[tuple[str, str, str]]:
    """The Job controller's Events about Job ``name``: (type, reason, message), oldest first."""
    found, _ = cluster.store.list("events", namespace=NS)
    return [
        (e["type"], e["reason"], e["message"])
        for e in found
        if e["involvedObject"]["kind"] == "Job"
        and e["involvedObject"]["name"] == name
        and e["source"]["component"] == "job-controller"
    ]


def test_a_failing_job_retries_up_to_its_backoff_limit_then_fails():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(JOBS, job(command="sleep 1; exit 2", backoffLimit=1), namespace=NS)
        failed = await until(
            lambda: conditions(get(cluster, "pi")).get("Failed") == "True" and get(cluster, "pi"), "Failed"
        )
        assert list(conditions(failed)) == ["FailureTarget", "Failed"]
        assert failed["status"]["conditions"][-1]["reason"] == "BackoffLimitExceeded"
        assert failed["status"]["failed"] == 2
        warning = ("Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        await until(lambda: warning in job_events(cluster), "the backoff limit's Warning")

    run(body)


def test_suspending_a_running_job_deletes_its_pods():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(JOBS, job(command="sleep infinity"), namespace=NS)
        await until(lambda: get(cluster, "pi").get("status", {}).get("ready") == 1, "a ready pod")
        cluster.store.patch(JOBS, "pi", {"spec": {"suspend": True}}, namespace=NS)
        suspended = await until(
            lambda: (
                not pods(cluster, "pi")
                and conditions(get(cluster, "pi")).get("Suspended") == "True"
                and get(cluster, "pi")
            ),
            "suspended without pods",
        )
        assert "active" not in suspended["status"]
        await until(lambda: ("Normal", "Suspended", "Job suspended") in job_events(cluster), "Event")
        said = job_events(cluster)
        assert any(r == "SuccessfulDelete" and m.startswith("Deleted pod: pi-") for _, r, m in said)
        cluster.store.patch(JOBS, "pi", {"spec": {"suspend": False}}, namespace=NS)
        await until(lambda: ("Normal", "Resumed", "Job resumed") in job_events(cluster), "Resumed")

    run(body)


# -- Kueue's batch/job integration --------------------------------------------------------------------------


def test_kueue_keeps_a_queued_job_suspended_and_owns_a_workload_for_it():
    async def body(cluster: Cluster) -> None:
        body_ = job(queue="user-queue", parallelism=1)
        body_["metadata"]["labels"][jobs.PRIORITY_CLASS_LABEL] = "low"
        created = cluster.store.create(JOBS, body_, namespace=NS)
        assert created["spec"]["suspend"] is True
        name = jobs.workload_name("Job", "batch", "pi", created["metadata"]["uid"])
        assert name.startswith("job-pi-")
        wl = await until(
            lambda: next(iter(cluster.store.list(WORKLOADS, namespace=NS)[0]), None), "a Workload"
        )
        assert wl["metadata"]["name"] == name
        assert wl["metadata"]["ownerReferences"][0]["kind"] == "Job"
        assert wl["spec"]["priority"] == 10
        assert [(ps["name"], ps["count"]) for ps in wl["spec"]["podSets"]] == [("main", 1)]
        assert jobs.pod_requests(wl["spec"]["podSets"][0]["template"]["spec"]) == {
            "cpu": 1000,
            "memory": 1 << 30,
        }

    run(body, kueue=True)


def test_admission_starts_the_job_on_its_flavor_and_completion_finishes_the_workload():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(JOBS, job(queue="user-queue"), namespace=NS)
        started = await until(
            lambda: not get(cluster, "pi")["spec"]["suspend"] and get(cluster, "pi"), "admitted"
        )
        pod_spec = started["spec"]["template"]["spec"]
        assert pod_spec["nodeSelector"] == {"accelerator": "nvidia"}
        assert pod_spec["tolerations"] == [{"key": "sku", "operator": "Exists"}]
        pod = (await until(lambda: pods(cluster, "pi"), "a pod"))[0]
        assert pod["spec"]["nodeSelector"] == {"accelerator": "nvidia"}

        def finished():
            wl = cluster.store.list(WORKLOADS, namespace=NS)[0][0]
            return conditions(wl).get("Finished") == "True" and wl

        wl = await until(finished, "Workload Finished")
        assert wl["status"]["conditions"][-1]["reason"] == "Succeeded"
        assert conditions(get(cluster, "pi"))["Complete"] == "True"

    run(body, kueue=True)


def test_preemption_suspends_the_job_deletes_its_pods_and_restores_its_template():
    async def body(cluster: Cluster) -> None:
        low = job("low", queue="user-queue", command="sleep infinity")
        low["metadata"]["labels"][jobs.PRIORITY_CLASS_LABEL] = "low"
        cluster.store.create(JOBS, low, namespace=NS)
        await until(lambda: get(cluster, "low").get("status", {}).get("ready") == 1, "low runs")
        high = job("high", queue="user-queue", command="sleep infinity")
        high["metadata"]["labels"][jobs.PRIORITY_CLASS_LABEL] = "high"
        cluster.store.create(JOBS, high, namespace=NS)
        await until(lambda: not get(cluster, "high")["spec"]["suspend"], "high admitted")
        evicted = get(cluster, "low")
        assert evicted["spec"]["suspend"] is True
        assert "nodeSelector" not in evicted["spec"]["template"]["spec"]
        assert "tolerations" not in evicted["spec"]["template"]["spec"]
        assert "startTime" not in evicted.get("status", {})
        await until(lambda: not pods(cluster, "low"), "low's pods deleted")

    run(body, kueue=True)


def owned_by(kind: str, api_version: str, owner: dict | None, **labels: str) -> dict:
    """A Job whose controller owner is ``kind`` ``r`` (``owner``: what reading it returns, None: missing)."""
    child = job(queue=labels.get("queue"))
    uid = (owner or {}).get("metadata", {}).get("uid", "u")
    child["metadata"].update(namespace=NS, uid="child")
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": api_version, "kind": kind, "name": "r", "uid": uid, "controller": True}
    ]
    return child


def rayjob_owner(queue: str | None) -> dict:
    return {"metadata": {"name": "r", "uid": "u", "labels": {jobs.QUEUE_LABEL: queue} if queue else {}}}


def test_kueue_makes_no_workload_for_a_job_whose_ancestor_it_admits_by_queue_label():
    def lookup(owner: dict | None):
        return lambda kind, namespace, name: owner if (kind.kind, name) == ("RayJob", "r") else None

    queued_parent = owned_by("RayJob", "ray.io/v1", rayjob_owner("user-queue"), queue="user-queue")
    assert not jobs.is_managed(BATCH_JOB, queued_parent, owner_of=lookup(rayjob_owner("user-queue")))
    # The RayJob has no queue label: Kueue does not manage it, so the queue-labelled Job is its own workload.
    unqueued_parent = owned_by("RayJob", "ray.io/v1", rayjob_owner(None), queue="user-queue")
    assert jobs.is_managed(BATCH_JOB, unqueued_parent, owner_of=lookup(rayjob_owner(None)))
    # An owner Kueue does not know (a CronJob) ends the search: the Job is top-level.
    cron = owned_by("CronJob", "batch/v1", None, queue="user-queue")
    assert jobs.is_managed(BATCH_JOB, cron, owner_of=lookup(None))
    # The RayJob integration disabled: its RayJobs are no managed ancestors.
    only_jobs = frozenset({BATCH_JOB.framework})
    assert jobs.is_managed(BATCH_JOB, queued_parent, only_jobs, lookup(rayjob_owner("user-queue")))
    # An owner that cannot be read: Kueue stops with an error and creates nothing.
    assert not jobs.is_managed(BATCH_JOB, queued_parent, owner_of=lookup(None))


def test_default_local_queue_labels_a_job_unless_its_controller_owner_is_a_kind_kueue_manages():
    def default_queue_label(child: dict) -> str | None:
        webhook.apply_defaults(BATCH_JOB, child, default_queue=True, owner_of=lambda *_: None)
        return child["metadata"]["labels"].get(jobs.QUEUE_LABEL)

    # KubeRay's submitter Job: owned by its RayJob, whatever the RayJob's labels.
    assert default_queue_label(owned_by("RayJob", "ray.io/v1", rayjob_owner(None))) is None
    # Owned by a kind no Kueue integration handles: defaulted like an ownerless Job, then suspended.
    cron = owned_by("CronJob", "batch/v1", None)
    assert default_queue_label(cron) == "default"
    assert cron["spec"]["suspend"] is True
    assert default_queue_label(job()) == "default"


def test_a_queued_job_under_a_queued_rayjob_gets_no_workload_but_under_an_unqueued_one_it_does():
    head = {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "head", "image": "ray"}]}}}

    def rayjob(name: str, queue: str | None) -> dict:
        labels = {jobs.QUEUE_LABEL: queue} if queue else {}
        spec = {
            "entrypoint": "x",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {"headGroupSpec": head},
        }
        return {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": name, "labels": labels},
            "spec": spec,
        }

    def child_of(owner: dict) -> dict:
        child = job(f"{owner['metadata']['name']}-child", queue="user-queue", command="sleep infinity")
        child["metadata"]["ownerReferences"] = [
            {
                **{k: owner[k] for k in ("apiVersion", "kind")},
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
        return child

    def workload_owners(cluster: Cluster) -> set[str]:
        found, _ = cluster.store.list(WORKLOADS, namespace=NS)
        return {w["metadata"]["ownerReferences"][0]["name"] for w in found}

    async def body(cluster: Cluster) -> None:
        queued = cluster.store.create("rayjobs.ray.io", rayjob("queued", "user-queue"), namespace=NS)
        unqueued = cluster.store.create("rayjobs.ray.io", rayjob("unqueued", None), namespace=NS)
        under_queued = cluster.store.create(JOBS, child_of(queued), namespace=NS)
        under_unqueued = cluster.store.create(JOBS, child_of(unqueued), namespace=NS)
        assert under_queued["spec"]["suspend"] is False  # Kueue admits its RayJob, not it
        assert under_unqueued["spec"]["suspend"] is True
        await until(
            lambda: "unqueued-child" in workload_owners(cluster), "the unqueued RayJob's child queued"
        )
        assert workload_owners(cluster) == {"queued", "unqueued-child"}

    run(body, kueue=True)
