"""Every admission scenario of tests/scenarios, driven through the Kubernetes API only.

Each scenario gets its own kubesim (so cluster-scoped queues never collide); with ``--cluster=real`` every
scenario runs on the session's real control plane instead (real Kueue v0.19.2, the reference), one after
another, each deleting what it created before the next begins. The test talks to it with the
official ``kubernetes`` client exactly as against a real cluster: it creates the queue objects, submits
RayJobs without ``spec.suspend`` (Kueue's webhook defaults it), deletes them to finish them, and polls
Workloads (found by the ``kueue.x-k8s.io/job-uid`` label) until each step's expectation holds.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kubesim import quantity
from kubesim.testing import run_kubesim
from tests.rayjobs import rayjob_body
from tests.scenarios import Expectation, QueueExpectation, Scenario, Step, all_scenarios

SCENARIOS = all_scenarios()
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

    def __init__(self, kubeconfig: str, second: float) -> None:
        self.api = client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))
        self.second = second
        """Real seconds per second of the timestamps the cluster writes (1: kubesim's are the wall clock's)."""
        self.last_change = 0.0  # time.monotonic() of the last RayJob created or step settled
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

    def submit(self, name: str, spec: dict) -> None:
        # Kueue orders one priority's Workloads by their creationTimestamp, to the second, then by their
        # random UIDs (kubesim as real Kueue): a story's RayJobs are created in different seconds of the wall
        # clock (kubesim's timestamps are the wall clock's too, whatever its time scale), so the story's order
        # is the queue's.
        time.sleep(max(0.0, self.last_change + self.second - time.monotonic()))
        namespace = spec.get("namespace", "default")
        created = self.api.create_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayjobs", rayjob(name, spec)
        )
        self.uids[name] = (namespace, created["metadata"]["uid"])
        # The next RayJob is submitted once this one exists for Kueue, i.e. has its Workload: Kueue only
        # creates it after KubeRay parked the job as Suspended, which is not instantaneous.
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while self.workload(namespace, created["metadata"]["uid"]) is None:
            if time.monotonic() > deadline:
                pytest.fail(f"no Workload for RayJob {name}")
            time.sleep(0.02)
        self.last_change = time.monotonic()

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

    def relabel(self, name: str, priority_class: str) -> None:
        """Point the RayJob's priority-class label at another WorkloadPriorityClass, as `kubectl label` would."""
        namespace, _ = self.uids[name]
        body = {"metadata": {"labels": {KUEUE_LABELS["priority"]: priority_class}}}
        self.api.patch_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name, body)

    def clean_up(self, scenario: Scenario) -> None:
        """Delete the scenario's RayJobs, then its Kueue objects (queues before flavors and classes), and
        wait until they are gone: on a shared cluster the next scenario reuses the names."""
        for name, spec in scenario.rayjobs.items():
            self._delete(("ray.io", "v1", "rayjobs", spec.get("namespace", "default"), name))
        objects = list(scenario.kueue) + [obj for step in scenario.story for obj in step.apply]
        order = ["LocalQueue", "ClusterQueue", "Cohort", "ResourceFlavor", "WorkloadPriorityClass"]
        for kind in order:
            for obj in objects:
                if obj["kind"] == kind:
                    group, version = obj["apiVersion"].split("/")
                    where = (group, version, PLURALS[kind], obj["metadata"].get("namespace"))
                    self._delete((*where, obj["metadata"]["name"]))
        self.uids.clear()

    def _delete(self, ref: tuple) -> None:
        group, version, plural, namespace, name = ref
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        try:
            if namespace:
                self.api.delete_namespaced_custom_object(group, version, namespace, plural, name)
            else:
                self.api.delete_cluster_custom_object(group, version, plural, name)
            while time.monotonic() < deadline:
                if namespace:
                    self.api.get_namespaced_custom_object(group, version, namespace, plural, name)
                else:
                    self.api.get_cluster_custom_object(group, version, plural, name)
                time.sleep(0.1)
        except ApiException as err:
            if err.status != 404:
                raise
            return
        pytest.fail(f"{plural}/{name} still there {SETTLE_TIMEOUT_S} s after its deletion")

    def cluster_queue(self, name: str) -> dict:
        return self.api.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", name)

    def observe(self) -> dict[str, tuple[dict | None, dict]]:
        """rayjob name -> (its Workload or None, the RayJob) for every live submitted RayJob."""
        seen = {}
        for name, (namespace, uid) in self.uids.items():
            job = self.api.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)
            seen[name] = (self.workload(namespace, uid), job)
            if any(e["reason"] == "Preempted" for e in evictions(seen[name][0])):
                self.preempted.add(name)
        return seen


def rayjob(name: str, spec: dict) -> dict:
    def sized(requests: dict) -> dict:
        return {k: str(v) for k, v in requests.items()}

    return rayjob_body(
        name,
        namespace=spec.get("namespace", "default"),
        labels={KUEUE_LABELS[key]: spec[key] for key in KUEUE_LABELS if spec.get(key)},
        startup_s=None,
        requests=sized(spec.get("head", {})),
        worker_groups=[
            {**group, "requests": sized(group.get("requests", {}))} for group in spec.get("workers", [])
        ],
        entrypoint="sleep infinity",  # runs until the story finishes it, on any cluster
        submission_mode=spec.get("mode", "HTTPMode"),
    )


def condition(workload: dict | None, type_: str) -> dict:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond
    return {}


def evictions(workload: dict | None) -> list[dict]:
    return ((workload or {}).get("status") or {}).get("schedulingStats", {}).get("evictions", [])


def admitted_pod_sets(workload: dict | None) -> list[dict]:
    admission = ((workload or {}).get("status") or {}).get("admission") or {}
    return admission.get("podSetAssignments") or []


def mismatches(
    then: dict[str, Expectation], seen: dict[str, tuple[dict | None, dict]], preempted: set[str]
) -> list[str]:
    """What does not (yet) hold of a step's ``then``; empty when every live RayJob shows what it should."""
    problems = []
    for name, expected in then.items():
        workload, job = seen[name]
        quota = condition(workload, "QuotaReserved")
        state = "admitted" if quota.get("status") == "True" else "pending" if workload else "no Workload"
        if state != expected.state:
            problems.append(f"{name}: expected {expected.state}, got {state}")
        if bool(expected.preempted) != (name in preempted):
            problems.append(f"{name}: expected preempted={bool(expected.preempted)}, got {name in preempted}")
        if isinstance(expected.preempted, str):
            got = condition(workload, "Preempted")
            if (got.get("status"), got.get("reason")) != ("True", expected.preempted):
                problems.append(f"{name}: expected Preempted=True/{expected.preempted}, got {got}")
        if expected.message is not None and expected.message not in quota.get("message", ""):
            problems.append(f"{name}: {expected.message!r} not in {quota.get('message', '')!r}")
        suspended = bool(job["spec"].get("suspend"))
        if expected.suspended is not None and suspended != expected.suspended:
            problems.append(f"{name}: expected suspend={expected.suspended}, got {suspended}")
        priority = ((workload or {}).get("spec") or {}).get("priority")
        if expected.priority is not None and priority != expected.priority:
            problems.append(f"{name}: expected priority {expected.priority}, got {priority}")
        for resource, flavor in (expected.flavors or {}).items():
            got = {
                a["flavors"][resource]
                for a in admitted_pod_sets(workload)
                if resource in a.get("flavors", {})
            }
            if got != {flavor}:
                problems.append(f"{name}: expected {resource} in flavor {flavor}, got {sorted(got)}")
        for resource, total in (expected.usage or {}).items():
            got = sum(
                quantity.to_canonical(resource, a.get("resourceUsage", {}).get(resource, "0"))
                for a in admitted_pod_sets(workload)
            )
            if got != quantity.to_canonical(resource, total):
                problems.append(
                    f"{name}: expected {resource} usage {total}, got {quantity.to_string(resource, got)}"
                )
        if expected.evictions is not None and evictions(workload) != list(expected.evictions):
            problems.append(
                f"{name}: expected evictions {list(expected.evictions)}, got {evictions(workload)}"
            )
        for type_, wanted in (expected.conditions or {}).items():
            got = condition(workload, type_)
            if (wanted is None and got) or (wanted and any(got.get(k) != v for k, v in wanted.items())):
                problems.append(f"{name}: expected {type_} {wanted or 'absent'}, got {got or 'absent'}")
    return problems


def queue_mismatches(driver: Driver, queues: dict[str, QueueExpectation]) -> list[str]:
    """How each named ClusterQueue's ``Active`` condition differs from the step's ``queues``."""
    problems = []
    for name, expected in queues.items():
        active = condition(driver.cluster_queue(name), "Active")
        problems += [f"ClusterQueue {name} Active: {problem}" for problem in expected.problems(active)]
    return problems


def settle(driver: Driver, step: Step) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        problems = mismatches(step.then, driver.observe(), driver.preempted) + queue_mismatches(
            driver, step.queues
        )
        if not problems:
            driver.last_change = time.monotonic()
            return
        if time.monotonic() > deadline:
            pytest.fail("; ".join(problems))
        time.sleep(0.1)


@pytest.fixture
def driver(request):
    """A driver for a fresh kubesim, or for with ``--cluster=real`` the session's real control plane."""
    if request.config.getoption("cluster") == "real":
        yield Driver(request.getfixturevalue("kubesim").kubeconfig, second=1.0)
        return
    with run_kubesim(time_scale=TIME_SCALE) as sim:
        # kubesim writes wall-clock timestamps whatever its time scale: a second of them is a real one.
        yield Driver(sim.kubeconfig, second=1.0)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(scenario: Scenario, driver: Driver) -> None:
    driver.clean_up(scenario)  # what a failed run before may have left on a shared cluster
    try:
        play(driver, scenario)
    finally:
        driver.clean_up(scenario)


def play(driver: Driver, scenario: Scenario) -> None:
    for obj in scenario.kueue:
        driver.apply(obj)
    for index, step in enumerate(scenario.story):
        for name in step.submit:
            driver.submit(name, scenario.rayjobs[name])
        for name in step.finish:
            driver.finish(name)
        for obj in step.apply:
            driver.apply(obj)
        for name, priority_class in step.relabel.items():
            driver.relabel(name, priority_class)
        if step.pause:
            time.sleep(step.pause)
        if step.then or step.queues:
            try:
                settle(driver, step)
            except pytest.fail.Exception as failure:
                raise AssertionError(f"step {index}: {failure}") from None
