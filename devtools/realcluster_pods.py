"""The pod-lifecycle stand-in of the real-stack harness (devtools/realcluster.py): what a scheduler and a
kubelet would do for pods on a control plane without nodes.

It registers one fake Node, binds every unscheduled pod to it (the ``binding`` subresource, as the
scheduler does) and then writes the status a kubelet would write once the containers started: Running,
Ready, a pod IP. The containers of Ray's pods never run and never end. A batch Job's pod runs its
containers as kubesim does (``kubesim.batch.container.container_run``: ``sleep``, ``echo``, ``exit``)
and ends Succeeded or Failed with their exit code; a KubeRay K8sJobMode submitter (``ray job submit`` /
``ray job logs --follow``) is run as that CLI would run, against the head's dashboard. A Ray
head pod's IP gets a Ray dashboard (``heads``, devtools/realcluster_dashboard.py) once the pod is
Running, and loses it when the pod is gone. A pod being deleted is removed at once, as a kubelet does once its
containers have stopped.

    driver = PodDriver(api_client, heads=HeadDashboards(netns))
    threading.Thread(target=driver.run, args=(stop_event,), daemon=True).start()
"""

from __future__ import annotations

import datetime
import itertools
import logging
import math
import threading
import time

import yaml
from kubernetes import client, watch

from devtools.realcluster_dashboard import KUBELET_PORT
from devtools.realcluster_netns import NODE_IP
from kubesim.batch.container import ContainerRun, container_run, shell_line
from kubesim.kuberay.submitter import RAY_JOB_COMMANDS

log = logging.getLogger(__name__)

NODE = "realcluster-node-1"
NODE_CAPACITY = {"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "16", "pods": "500"}


def finished_status(pod: dict, exit_code: int, now: str) -> dict:
    """The status a kubelet reports once ``pod``'s containers exited with ``exit_code``.

    >>> finished_status({"spec": {"containers": [{"name": "c"}]}}, 1, "t")["phase"]
    'Failed'
    """
    containers = (pod.get("spec") or {}).get("containers") or []
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "finishedAt": now,
        "startedAt": ((pod.get("status") or {}).get("startTime")) or now,
    }
    return {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": [
            {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
            for kind in ("ContainersReady", "Ready")
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "ready": False,
                "started": False,
                "state": {"running": None, "terminated": terminated},
            }
            for c in containers
        ],
    }


def running_status(pod: dict, pod_ip: str, now: str) -> dict:
    """The status a kubelet reports for ``pod`` once all its containers started and are ready.

    >>> running_status({"spec": {"containers": [{"name": "c", "image": "i"}]}}, "10.244.0.2", "t")["phase"]
    'Running'
    """
    containers = (pod.get("spec") or {}).get("containers") or []
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": now}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    return {
        "phase": "Running",
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "hostIP": NODE_IP,
        "startTime": now,
        "conditions": conditions,
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }
            for c in containers
        ],
    }


class PodDriver:
    """Binds pods to ``NODE`` and marks them Running; ``run`` loops until ``stop`` is set."""

    def __init__(self, api_client: client.ApiClient, heads=None):
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.heads = heads
        # pods given an IP: a late event of their Pending state changes nothing
        self._started: set[str] = set()
        self._ips = (f"10.244.{n // 250}.{n % 250 + 2}" for n in itertools.count())

    def ensure_node(self) -> None:
        body = {
            # accelerator=nvidia: the project's GPU ResourceFlavor sends GPU pods to nodes labelled so
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE, "accelerator": "nvidia"}},
            "status": {"capacity": NODE_CAPACITY, "allocatable": NODE_CAPACITY},
        }
        try:
            self.core.create_node(body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        now = _now()
        ready = {"type": "Ready", "status": "True", "lastHeartbeatTime": now, "lastTransitionTime": now}
        status = {
            "conditions": [ready],
            # where the API server reads pod logs: the harness's kubelet stand-in (realcluster_dashboard)
            "addresses": [{"type": "InternalIP", "address": NODE_IP}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
        }
        self.core.patch_node_status(NODE, {"status": status})

    def handle(self, pod: dict) -> None:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        try:
            if meta.get("deletionTimestamp"):
                if spec.get("nodeName"):  # the kubelet's last word: containers stopped, the pod is gone
                    self.core.delete_namespaced_pod(
                        meta["name"], meta["namespace"], grace_period_seconds=0,
                        body={"preconditions": {"uid": meta["uid"]}}, _preload_content=False,
                    )  # fmt: skip
                return
            if status.get("phase") not in (None, "Pending") or meta["uid"] in self._started:
                return
            if not spec.get("nodeName"):
                self.core.create_namespaced_binding(
                    meta["namespace"],
                    {"metadata": {"name": meta["name"]}, "target": {"kind": "Node", "name": NODE}},
                    _preload_content=False,
                )
            pod_ip = next(self._ips)
            head = ray_head(pod) if self.heads is not None else None
            if head:
                # A Ray head answers on its dashboard before its readiness probe passes: the pod is Ready,
                # and so an endpoint of its Services, only once the dashboard listens.
                self.heads.open(meta["namespace"], head, pod_ip)
            try:
                self.core.patch_namespaced_pod_status(
                    meta["name"], meta["namespace"], {"status": running_status(pod, pod_ip, _now())}
                )
            except client.ApiException:
                if head:
                    self.heads.close(meta["namespace"], head, pod_ip)
                raise
            self._started.add(meta["uid"])
            if self.heads is None:
                return
            if _runs_ray_cli(pod):
                if submitter := self._submission(pod):  # None when its RayJob is gone: nothing to submit
                    threading.Thread(
                        target=self._run_submitter, args=(pod, *submitter), name="submitter", daemon=True
                    ).start()
            elif _owned_by_job(pod):
                runs = [container_run(c) for c in spec.get("containers") or []]
                if runs and all(math.isfinite(r.seconds) for r in runs):
                    threading.Thread(target=self._run_containers, args=(pod, runs), daemon=True).start()
        except client.ApiException as exc:
            if exc.status not in (404, 409):  # deleted or bound meanwhile: the next event tells
                raise

    def _submission(self, pod: dict) -> tuple[str, dict, tuple[str, str]] | None:
        """(head cluster, submission, (pod, container) of the CLI) for a pod running KubeRay's submitter
        CLI: the request ``ray job submit`` sends, built from the RayJob as KubeRay builds the CLI's
        arguments (the submitter Job and its RayJob share their name); None when the RayJob is gone."""
        for container in (pod.get("spec") or {}).get("containers") or []:
            if not any(command in shell_line(container) for command in RAY_JOB_COMMANDS):
                continue
            env = {e["name"]: e.get("value", "") for e in container.get("env") or []}
            namespace = pod["metadata"]["namespace"]
            job_name = (pod["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name", "")
            try:
                rayjob = self.custom.get_namespaced_custom_object(
                    "ray.io", "v1", namespace, "rayjobs", job_name
                )
            except client.ApiException:
                return None
            spec = rayjob.get("spec") or {}
            submission = {
                "entrypoint": (spec.get("entrypoint") or "").strip(),
                "submission_id": env.get("RAY_JOB_SUBMISSION_ID", ""),
                "runtime_env": yaml.safe_load(spec.get("runtimeEnvYAML") or "") or {},
                "metadata": spec.get("metadata") or {},
            }
            cluster = env.get("RAY_DASHBOARD_ADDRESS", "").split("-head-svc")[0]
            return cluster, submission, (pod["metadata"]["name"], container["name"])
        return None

    def _run_submitter(self, pod: dict, cluster: str, submission: dict, log_to: tuple[str, str]) -> None:
        meta = pod["metadata"]
        self._finish(pod, self.heads.submitter(meta["namespace"], cluster, submission, log_to))

    def _run_containers(self, pod: dict, runs: list[ContainerRun]) -> None:
        """A Job pod's containers run their time, print their lines and exit (the first non-zero code wins)."""
        meta = pod["metadata"]
        time.sleep(max(r.seconds for r in runs) / self.heads.time_scale)
        for container, run in zip(pod["spec"]["containers"], runs, strict=True):
            self.heads.write_log(meta["namespace"], meta["name"], container["name"], list(run.output))
        self._finish(pod, next((r.exit_code for r in runs if r.exit_code), 0))

    def _finish(self, pod: dict, code: int) -> None:
        """Report the pod's containers exited with ``code``, as a kubelet does (a pod deleted meanwhile is
        left alone)."""
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": finished_status(pod, code, _now())}
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise

    def forget(self, pod: dict) -> None:
        """The pod is gone: a Ray head takes its dashboard and the jobs on it along."""
        self._started.discard(pod["metadata"]["uid"])
        ip = (pod.get("status") or {}).get("podIP")
        if self.heads is not None and ray_head(pod) and ip:
            self.heads.close(pod["metadata"]["namespace"], ray_head(pod), ip)

    def run(self, stop: threading.Event) -> None:
        self.ensure_node()
        version = None  # resumed across the short watches, so that no deletion falls between two
        while not stop.is_set():
            stream = watch.Watch()
            resume = {"resource_version": version} if version else {}
            try:
                for event in stream.stream(
                    self.core.list_pod_for_all_namespaces, timeout_seconds=5, _request_timeout=10, **resume
                ):
                    if stop.is_set():
                        break
                    try:
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self.handle(event["raw_object"])
                        elif event["type"] == "DELETED":
                            self.forget(event["raw_object"])
                    except client.ApiException as exc:  # as a kubelet: this pod failed, the next goes on
                        meta = event["raw_object"]["metadata"]
                        log.warning(
                            "pod %s/%s: %s %s",
                            meta.get("namespace"),
                            meta.get("name"),
                            exc.status,
                            exc.reason,
                        )
                version = stream.resource_version
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
                version = None
            finally:
                stream.stop()


def _runs_ray_cli(pod: dict) -> bool:
    return any(
        command in shell_line(container)
        for container in (pod.get("spec") or {}).get("containers") or []
        for command in RAY_JOB_COMMANDS
    )


def _owned_by_job(pod: dict) -> bool:
    return any(ref.get("kind") == "Job" for ref in pod["metadata"].get("ownerReferences") or [])


def ray_head(pod: dict) -> str | None:
    """The RayCluster whose head ``pod`` is (KubeRay's labels), else None.

    >>> ray_head({"metadata": {"labels": {"ray.io/node-type": "head", "ray.io/cluster": "rc"}}})
    'rc'
    """
    labels = pod["metadata"].get("labels") or {}
    return labels.get("ray.io/cluster") if labels.get("ray.io/node-type") == "head" else None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
