"""Every admission scenario in shared/scenarios, driven through the Kubernetes API only.

Each scenario gets its own kubesim (so cluster-scoped queues never collide). The test talks to it with the
official ``kubernetes`` client exactly as against a real cluster: it creates the queue objects, submits
RayJobs without ``spec.suspend`` (Kueue's webhook defaults it), deletes them to finish them, and polls
Workloads (found by the ``kueue.x-k8s.io/job-uid`` label) until each step's expectation holds.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim.testing import run_kubesim
from tests.conftest import CRDS_DIR, SHARED

SCENARIOS = sorted((SHARED / "scenarios").glob("*.yaml"))
TIME_SCALE = 200
SETTLE_TIMEOUT_S = 30
KUEUE_LABELS = {"queue": "kueue.x-k8s.io/queue-name", "priority": "kueue.x-k8s.io/priority-class"}
PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "Cohort": "cohorts",
}


class Driver:
    """Applies scenario steps with the Kubernetes client and reads back what Kueue decided."""

    def __init__(self, kubeconfig: str) -> None:
        self.api = client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))
        self.uids: dict[str, tuple[str, str]] = {}  # rayjob name -> (namespace, uid)
        self.preempted: set[str] = set()  # every RayJob seen preempted, finished ones included

    def apply(self, obj: dict) -> None:
        group, version = obj["apiVersion"].split("/")
        plural = PLURALS[obj["kind"]]
        namespace = obj["metadata"].get("namespace")
        name = obj["metadata"]["name"]
        try:
            if namespace:
                current = self.api.get_namespaced_custom_object(group, version, namespace, plural, name)
            else:
                current = self.api.get_cluster_custom_object(group, version, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise
            if namespace:
                self.api.create_namespaced_custom_object(group, version, namespace, plural, obj)
            else:
                self.api.create_cluster_custom_object(group, version, plural, obj)
            return
        body = dict(
            obj, metadata=dict(obj["metadata"], resourceVersion=current["metadata"]["resourceVersion"])
        )
        if namespace:
            self.api.replace_namespaced_custom_object(group, version, namespace, plural, name, body)
        else:
            self.api.replace_cluster_custom_object(group, version, plural, name, body)

    def submit(self, spec: dict) -> None:
        namespace = spec.get("namespace", "default")
        created = self.api.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", rayjob(spec))
        self.uids[spec["name"]] = (namespace, created["metadata"]["uid"])
        # The next RayJob is submitted once this one exists for Kueue, i.e. has its Workload: Kueue only
        # creates it after KubeRay parked the job as Suspended, which is not instantaneous.
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while self.workload(namespace, created["metadata"]["uid"]) is None:
            if time.monotonic() > deadline:
                pytest.fail(f"no Workload for RayJob {spec['name']}")
            time.sleep(0.02)

    def workload(self, namespace: str, uid: str) -> dict | None:
        items = self.api.list_namespaced_custom_object(
            "kueue.x-k8s.io",
            "v1beta2",
            namespace,
            "workloads",
            label_selector=f"kueue.x-k8s.io/job-uid={uid}",
        )["items"]
        return items[0] if items else None

    def finish(self, name: str) -> None:
        namespace, _ = self.uids.pop(name)
        self.api.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)

    def observe(self) -> dict[str, tuple[dict | None, dict]]:
        """rayjob name -> (its Workload or None, the RayJob) for every live submitted RayJob."""
        seen = {}
        for name, (namespace, uid) in self.uids.items():
            job = self.api.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)
            seen[name] = (self.workload(namespace, uid), job)
            if any(e["reason"] == "Preempted" for e in evictions(seen[name][0])):
                self.preempted.add(name)
        return seen


def rayjob(spec: dict) -> dict:
    labels = {KUEUE_LABELS[key]: spec[key] for key in KUEUE_LABELS if spec.get(key)}

    def container(name: str, requests: dict) -> dict:
        resources = {k: str(v) for k, v in requests.items()}
        return {
            "name": name,
            "image": "rayproject/ray:2.46.0",
            "resources": {"requests": resources, "limits": dict(resources)},
        }

    cluster = {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [container("ray-head", spec.get("head", {}))]}},
        }
    }
    if spec.get("workers"):
        cluster["workerGroupSpecs"] = [
            {
                "groupName": group["group"],
                "replicas": group.get("replicas", 1),
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("ray-worker", group.get("requests", {}))]}},
            }
            for group in spec["workers"]
        ]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": spec["name"],
            "namespace": spec.get("namespace", "default"),
            "labels": labels,
            "annotations": {"kubesim.dev/duration": "inf", "kubesim.dev/startup": "1"},
        },
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,
            "submissionMode": spec.get("submissionMode", "HTTPMode"),
            "rayClusterSpec": cluster,
        },
    }


def condition(workload: dict | None, type_: str) -> dict:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond
    return {}


def evictions(workload: dict | None) -> list[dict]:
    return ((workload or {}).get("status") or {}).get("schedulingStats", {}).get("evictions", [])


def mismatches(expect: dict, seen: dict[str, tuple[dict | None, dict]], preempted: set[str]) -> list[str]:
    """What does not (yet) hold of ``expect``; empty when the step's expectation is met."""
    reserved = {n for n, (wl, _) in seen.items() if condition(wl, "QuotaReserved").get("status") == "True"}
    waiting = {n for n, (wl, _) in seen.items() if wl is not None and n not in reserved}
    problems = []
    for key, actual in (("admitted", reserved), ("pending", waiting), ("preempted", preempted)):
        if key in expect and set(expect[key]) != actual:
            problems.append(f"{key}: expected {sorted(expect[key])}, got {sorted(actual)}")
    for name, reason in (expect.get("preempted_reason") or {}).items():
        got = condition(seen[name][0], "Preempted").get("reason")
        if got != reason:
            problems.append(f"preempted_reason[{name}]: expected {reason}, got {got}")
    for name, text in (expect.get("message_contains") or {}).items():
        message = condition(seen[name][0], "QuotaReserved").get("message", "")
        if text not in message:
            problems.append(f"message[{name}]: {text!r} not in {message!r}")
    for name, suspend in (expect.get("suspended") or {}).items():
        got = bool(seen[name][1]["spec"].get("suspend"))
        if got != suspend:
            problems.append(f"suspended[{name}]: expected {suspend}, got {got}")
    return problems


def settle(driver: Driver, expect: dict) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        problems = mismatches(expect, driver.observe(), driver.preempted)
        if not problems:
            return
        if time.monotonic() > deadline:
            pytest.fail("; ".join(problems))
        time.sleep(0.1)


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    scenario = yaml.safe_load(path.read_text())
    with run_kubesim(crds_dir=CRDS_DIR, time_scale=TIME_SCALE) as sim:
        driver = Driver(sim.kubeconfig)
        for obj in scenario.get("objects") or []:
            driver.apply(obj)
        for index, step in enumerate(scenario["steps"]):
            for spec in step.get("submit") or []:
                driver.submit(spec)
            for name in step.get("finish") or []:
                driver.finish(name)
            for obj in step.get("apply") or []:
                driver.apply(obj)
            if "wait" in step:
                time.sleep(float(step["wait"]))
            if "expect" in step:
                try:
                    settle(driver, step["expect"])
                except pytest.fail.Exception as failure:
                    raise AssertionError(f"step {index}: {failure}") from None
