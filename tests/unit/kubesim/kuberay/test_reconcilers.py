"""The KubeRay controller in-process: a Cluster running kubesim.kuberay and the Job controller that runs its
submitter Jobs (kubesim.batch), as a real cluster's kube-controller-manager does, driven through the store."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import pytest

from kubesim.cluster import Cluster
from kubesim.errors import ApiError

NS = "default"
RAYJOBS = "rayjobs.ray.io"
RAYCLUSTERS = "rayclusters.ray.io"
TIME_SCALE = 1000.0
WAIT_REAL_SECONDS = 10.0


def cluster_spec() -> dict:
    def container(name: str, cpu: str, memory: str) -> dict:
        return {
            "name": name,
            "image": "rayproject/ray:2.52.0",
            "resources": {"requests": {"cpu": cpu, "memory": memory}},
        }

    return {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [container("ray-head", "1", "2Gi")]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "small",
                "replicas": 2,
                "minReplicas": 0,
                "maxReplicas": 4,
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("ray-worker", "500m", "1Gi")]}},
            }
        ],
    }


def rayjob(name: str = "train", annotations: dict | None = None, **spec) -> dict:
    body = {
        "entrypoint": "python train.py",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster_spec(),
    }
    body.update(spec)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {"kubesim.dev/startup": "2", **(annotations or {})},
        },
        "spec": body,
    }


async def started(
    controllers: tuple[str, ...] = ("kubesim.batch", "kubesim.kuberay"), time_scale: float = TIME_SCALE
) -> Cluster:
    cluster = Cluster(time_scale=time_scale, controllers=controllers)
    await cluster.start()
    with contextlib.suppress(ApiError):  # the store may create "default" itself
        cluster.store.create("namespaces", {"metadata": {"name": NS}})
    return cluster


async def until(check: Callable[[], object], what: str) -> object:
    deadline = time.monotonic() + WAIT_REAL_SECONDS
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def status_of(cluster: Cluster, name: str = "train") -> dict:
    return cluster.store.get(RAYJOBS, name, namespace=NS).get("status") or {}


def deployment_is(cluster: Cluster, *states: str, name: str = "train") -> Callable[[], dict | None]:
    def check() -> dict | None:
        status = status_of(cluster, name)
        return status if status.get("jobDeploymentStatus") in states else None

    return check


def exists(cluster: Cluster, key: str, name: str) -> bool:
    try:
        cluster.store.get(key, name, namespace=NS)
        return True
    except ApiError as exc:
        assert exc.code == 404
        return False


def events(cluster: Cluster) -> list[tuple[str, str]]:
    items, _ = cluster.store.list("events", namespace=NS)
    return [(e["reason"], e["message"]) for e in items]


def scenario(
    body: Callable[[Cluster], object],
    controllers: tuple[str, ...] | None = None,
    time_scale: float = TIME_SCALE,
) -> None:
    async def main() -> None:
        cluster = await started(controllers or ("kubesim.batch", "kubesim.kuberay"), time_scale)
        try:
            await body(cluster)
        finally:
            await cluster.stop()

    asyncio.run(main())


def test_successful_rayjob_runs_its_cluster_and_submitter_and_cleans_up():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(
            RAYJOBS, rayjob(runtimeEnvYAML="env_vars:\n  NUM_EPOCHS: '3'\n  BATCH_SIZE: '16'\n")
        )
        running = await until(
            lambda: (s := status_of(cluster)).get("jobStatus") == "RUNNING" and s, "RUNNING"
        )
        assert running["jobId"].startswith("train-") and running["rayClusterName"].startswith("train-")
        assert (
            running["dashboardURL"] == f"{running['rayClusterName']}-head-svc.default.svc.cluster.local:8265"
        )
        assert running["rayClusterStatus"]["state"] == "ready"
        assert running["rayClusterStatus"]["desiredCPU"] == "2"
        assert running["rayClusterStatus"]["desiredMemory"] == "4Gi"
        assert cluster.store.get(RAYJOBS, "train", namespace=NS)["metadata"]["finalizers"] == [
            "ray.io/rayjob-finalizer"
        ]
        raycluster = cluster.store.get(RAYCLUSTERS, running["rayClusterName"], namespace=NS)
        assert raycluster["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
        assert raycluster["metadata"]["ownerReferences"][0]["kind"] == "RayJob"

        done = await until(deployment_is(cluster, "Complete"), "Complete")
        assert (done["jobStatus"], done["succeeded"], done["failed"]) == ("SUCCEEDED", 1, 0)
        assert done["message"] == "Job finished successfully."
        assert done["endTime"]
        # shutdownAfterJobFinishes with TTL 0: the RayCluster goes, the submitter Job stays
        await until(lambda: not exists(cluster, RAYCLUSTERS, done["rayClusterName"]), "cluster deletion")
        job = cluster.store.get("jobs.batch", "train", namespace=NS)
        uid = job["metadata"]["uid"]
        assert job["spec"]["selector"]["matchLabels"] == {"batch.kubernetes.io/controller-uid": uid}
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
        pods, _ = cluster.store.list(
            "pods", namespace=NS, label_selector="batch.kubernetes.io/job-name=train"
        )
        assert [p["status"]["phase"] for p in pods] == ["Succeeded"]
        log = cluster.logs.read(NS, pods[0]["metadata"]["name"], "ray-job-submitter")
        assert f"Job '{done['jobId']}' submitted successfully" in log
        assert "Job submission server address: http://" in log
        # The driver log agrees with the run's params: 3 epochs, not a count derived from a duration.
        assert [line.split()[1] for line in log.splitlines() if line.startswith("epoch ")] == [
            "1/3",
            "2/3",
            "3/3",
        ]
        assert log.rstrip().endswith(f"Job '{done['jobId']}' succeeded")
        reasons = [reason for reason, _ in events(cluster)]
        assert ("CreatedRayJobSubmitter", "Created Kubernetes Job default/train") in events(cluster)
        assert {"CreatedRayCluster", "DeletedRayCluster"} <= set(reasons)

    scenario(body)


def test_suspend_deletes_everything_and_resume_starts_a_new_attempt():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob(entrypoint="sleep infinity"))
        first = await until(
            lambda: (s := status_of(cluster)).get("jobStatus") == "RUNNING" and s, "first attempt RUNNING"
        )
        cluster.store.patch(RAYJOBS, "train", {"spec": {"suspend": True}}, namespace=NS)
        suspended = await until(deployment_is(cluster, "Suspended"), "Suspended")
        for cleared in ("jobId", "rayClusterName", "dashboardURL", "message", "reason"):
            assert cleared not in suspended
        assert suspended["jobStatus"] == ""
        assert not exists(cluster, RAYCLUSTERS, first["rayClusterName"])
        assert not exists(cluster, "jobs.batch", "train")
        pods, _ = cluster.store.list("pods", namespace=NS)
        assert pods == []

        cluster.store.patch(RAYJOBS, "train", {"spec": {"suspend": False}}, namespace=NS)
        second = await until(
            lambda: (s := status_of(cluster)).get("jobStatus") == "RUNNING" and s, "second attempt RUNNING"
        )
        assert second["jobId"] != first["jobId"]
        assert second["rayClusterName"] != first["rayClusterName"]
        assert second["failed"] == 0

    scenario(body)


def test_created_suspended_rayjob_waits_without_creating_anything():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob(suspend=True))
        await until(deployment_is(cluster, "Suspended"), "Suspended")
        clusters, _ = cluster.store.list(RAYCLUSTERS, namespace=NS)
        assert clusters == []

    scenario(body)


def test_fail_attempts_are_retried_within_backoff_limit():
    async def body(cluster: Cluster) -> None:
        annotations = {"kubesim.dev/fail-attempts": "1"}  # no RayJob field says "fail the first try only"
        cluster.store.create(RAYJOBS, rayjob(annotations=annotations, backoffLimit=2))
        first = await until(lambda: (s := status_of(cluster)).get("jobId") and s, "first jobId")
        done = await until(deployment_is(cluster, "Complete", "Failed"), "a final state")
        assert (done["jobDeploymentStatus"], done["jobStatus"]) == ("Complete", "SUCCEEDED")
        assert (done["failed"], done["succeeded"]) == (1, 1)
        assert done["jobId"] != first["jobId"]

    scenario(body)


def test_app_failure_beyond_backoff_limit_fails_the_rayjob():
    async def body(cluster: Cluster) -> None:
        # The annotation's failure raises in the driver (a traceback); an entrypoint's exit code is below.
        annotations = {"kubesim.dev/duration": "3", "kubesim.dev/outcome": "AppFailed"}
        cluster.store.create(RAYJOBS, rayjob(annotations=annotations, backoffLimit=1))
        done = await until(deployment_is(cluster, "Complete", "Failed"), "a final state")
        assert (done["jobDeploymentStatus"], done["jobStatus"], done["reason"]) == (
            "Failed",
            "FAILED",
            "AppFailed",
        )
        assert done["failed"] == 2
        assert "RuntimeError: simulated application failure" in done["message"]
        pods, _ = cluster.store.list("pods", namespace=NS, label_selector="job-name=train")
        log = cluster.logs.read(NS, pods[0]["metadata"]["name"])
        assert "Traceback (most recent call last):" in log
        assert log.rstrip().endswith(f"Job '{done['jobId']}' failed")

    scenario(body)


def test_an_entrypoint_that_exits_non_zero_fails_the_ray_job_with_its_exit_code():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob(entrypoint="sleep 3; exit 3"))
        done = await until(deployment_is(cluster, "Complete", "Failed"), "a final state")
        assert (done["jobDeploymentStatus"], done["jobStatus"], done["reason"]) == (
            "Failed",
            "FAILED",
            "AppFailed",
        )
        assert done["message"].startswith("Job entrypoint command failed with exit code 3")
        assert "simulated" not in done["message"]

    scenario(body)


def test_submission_failure_exhausts_the_submitter_job():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob(annotations={"kubesim.dev/outcome": "SubmissionFailed"}))
        done = await until(deployment_is(cluster, "Complete", "Failed"), "a final state")
        assert (done["jobDeploymentStatus"], done["jobStatus"], done["reason"]) == (
            "Failed",
            "",
            "SubmissionFailed",
        )
        assert done["message"] == (
            "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff limit"
        )
        job = cluster.store.get("jobs.batch", "train", namespace=NS)
        uid = job["metadata"]["uid"]
        pods, _ = cluster.store.list("pods", namespace=NS, label_selector="job-name=train")
        assert sorted(p["status"]["phase"] for p in pods) == ["Failed"] * 3  # submitter backoffLimit 2
        for pod in pods:  # made by the Job controller from the template the API server labelled
            assert pod["metadata"]["labels"]["controller-uid"] == uid
            assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "train"
            assert pod["metadata"]["ownerReferences"][0]["uid"] == uid
        assert job["status"]["failed"] == 3
        assert "active" not in job["status"]

    scenario(body)


def test_kuberay_only_creates_the_submitter_job_its_pods_are_the_job_controllers():
    """Without kube-controller-manager's Job controller the submitter Job gets no pod, so nothing submits
    the Ray job: KubeRay itself never makes the submitter's pods."""

    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob())
        await until(deployment_is(cluster, "Running"), "Running")
        job = await until(
            lambda: (
                exists(cluster, "jobs.batch", "train")
                and cluster.store.get("jobs.batch", "train", namespace=NS)
            ),
            "the submitter Job",
        )
        assert job["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
        assert job["metadata"]["labels"]["app.kubernetes.io/created-by"] == "kuberay-operator"
        assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
        assert job["spec"]["backoffLimit"] == 2
        await asyncio.sleep(60 / TIME_SCALE)  # a minute: long past any pod start
        pods, _ = cluster.store.list("pods", namespace=NS, label_selector="job-name=train")
        assert pods == []
        assert cluster.store.get("jobs.batch", "train", namespace=NS).get("status") in (None, {})
        assert (status_of(cluster)["jobDeploymentStatus"], status_of(cluster)["jobStatus"]) == ("Running", "")

    scenario(body, controllers=("kubesim.kuberay",))


def test_active_deadline_fails_without_retry():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(
            RAYJOBS, rayjob(entrypoint="sleep infinity", activeDeadlineSeconds=8, backoffLimit=3)
        )
        done = await until(deployment_is(cluster, "Complete", "Failed"), "a final state")
        assert (done["reason"], done["failed"]) == ("DeadlineExceeded", 1)
        assert done["message"].startswith("The RayJob has passed the activeDeadlineSeconds.")

    scenario(body)


@pytest.mark.parametrize(
    ("name", "spec", "event", "message"),
    [
        (
            "x" * 48,
            {},
            "InvalidRayJobMetadata",
            "The RayJob metadata is invalid: RayJob name should be no more than 47 characters",
        ),
        (
            "train",
            {"shutdownAfterJobFinishes": False, "suspend": True},
            "InvalidRayJobSpec",
            "The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended",
        ),
        (
            "train",
            {"rayClusterSpec": None},
            "InvalidRayJobSpec",
            "The RayJob spec is invalid: one of RayClusterSpec or ClusterSelector must be set",
        ),
        (
            "train",
            {"shutdownAfterJobFinishes": False, "ttlSecondsAfterFinished": 60},
            "InvalidRayJobSpec",
            "The RayJob spec is invalid: a RayJob with shutdownAfterJobFinishes set to false cannot have "
            "TTLSecondsAfterFinished",
        ),
    ],
)
def test_invalid_rayjob_is_parked_in_validation_failed(name, spec, event, message):
    async def body(cluster: Cluster) -> None:
        manifest = rayjob(name=name)
        for field, value in spec.items():
            if value is None:
                manifest["spec"].pop(field)
            else:
                manifest["spec"][field] = value
        cluster.store.create(RAYJOBS, manifest)
        failed = await until(deployment_is(cluster, "ValidationFailed", name=name), "ValidationFailed")
        assert (failed["reason"], failed["message"]) == ("ValidationFailed", message)
        assert (event, f"default/{name}: {message}") in events(cluster)
        clusters, _ = cluster.store.list(RAYCLUSTERS, namespace=NS)
        assert clusters == []

    scenario(body)


def test_ttl_deletes_only_the_cluster_after_it_expires():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob(entrypoint="sleep 1", ttlSecondsAfterFinished=60))
        done = await until(deployment_is(cluster, "Complete"), "Complete")
        assert exists(cluster, RAYCLUSTERS, done["rayClusterName"])  # 60 simulated s = 60 ms from now
        await until(lambda: not exists(cluster, RAYCLUSTERS, done["rayClusterName"]), "TTL deletion")
        assert exists(cluster, "jobs.batch", "train")
        assert status_of(cluster)["jobDeploymentStatus"] == "Complete"

    scenario(body)


def test_deleting_a_running_rayjob_removes_its_children():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob(entrypoint="sleep infinity"))
        running = await until(
            lambda: (s := status_of(cluster)).get("jobStatus") == "RUNNING" and s, "RUNNING"
        )
        cluster.store.delete(RAYJOBS, "train", namespace=NS)
        await until(lambda: not exists(cluster, RAYJOBS, "train"), "RayJob removal")
        assert not exists(cluster, RAYCLUSTERS, running["rayClusterName"])
        assert not exists(cluster, "jobs.batch", "train")
        pods, _ = cluster.store.list("pods", namespace=NS)
        assert pods == []

    scenario(body)


def test_http_mode_runs_without_a_submitter():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(RAYJOBS, rayjob(entrypoint="sleep 2", submissionMode="HTTPMode"))
        done = await until(deployment_is(cluster, "Complete", "Failed"), "a final state")
        assert (done["jobDeploymentStatus"], done["jobStatus"]) == ("Complete", "SUCCEEDED")
        assert not exists(cluster, "jobs.batch", "train")

    scenario(body)


def test_standalone_raycluster_becomes_ready_and_suspends():
    async def body(cluster: Cluster) -> None:
        manifest = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "adhoc", "namespace": NS, "annotations": {"kubesim.dev/startup": "1"}},
            "spec": cluster_spec(),
        }
        cluster.store.create(RAYCLUSTERS, manifest)

        def state() -> str | None:
            return (cluster.store.get(RAYCLUSTERS, "adhoc", namespace=NS).get("status") or {}).get("state")

        await until(lambda: state() == "ready", "ready")
        status = cluster.store.get(RAYCLUSTERS, "adhoc", namespace=NS)["status"]
        assert status["readyWorkerReplicas"] == 2
        assert status["head"]["podName"].startswith("adhoc-head-")
        pods, _ = cluster.store.list(
            "pods", namespace=NS, label_selector="ray.io/cluster=adhoc,ray.io/node-type=worker"
        )
        assert len(pods) == 2 and all(p["metadata"]["labels"]["ray.io/group"] == "small" for p in pods)

        cluster.store.patch(RAYCLUSTERS, "adhoc", {"spec": {"suspend": True}}, namespace=NS)
        await until(lambda: state() == "suspended", "suspended")
        pods, _ = cluster.store.list("pods", namespace=NS, label_selector="ray.io/cluster=adhoc")
        assert pods == []

    scenario(body)
