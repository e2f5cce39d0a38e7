"""Kueue's job integration for KubeRay objects and batch/v1 Jobs, as pure functions over plain dicts.

Kueue v0.19 treats a RayJob, a RayCluster or a RayService as a "generic job": it builds PodSets from the
Ray cluster spec, names and owns a Workload for it, and on admission flips ``suspend`` off and injects the
assigned ResourceFlavors into the pod templates (restoring them on eviction: ``kubesim.kueue.podset_info``).
A batch/v1 Job is the same
with one pod set, ``main`` (``kubesim.kueue.batch_job``). Everything here is decision logic without I/O
so that the controller stays a thin loop and the rules can be unit tested with dicts.

Which kinds Kueue manages is its configuration's ``integrations.frameworks`` (``KueueConfig.frameworks``;
the shipped config enables all three and ``batch/job``). A RayCluster that a RayJob or RayService owns
is that parent's business while the parent's integration is enabled; with ``ray.io/rayservice`` left
out, Kueue manages a RayService through the RayClusters KubeRay creates for it (each queued and admitted
on its own), as it did before v0.17.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubesim import quantity
from kubesim.kueue import batch_job

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
"""The Workload a job is to use instead of one of its own: an annotation (WorkloadIdentifierAnnotations is on
in v0.19), or a label as before; MultiKueue sets it on the copies it makes on a worker."""
PODSET_LABEL = "kueue.x-k8s.io/podset"
LOCAL_QUEUE_POD_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_POD_LABEL = "kueue.x-k8s.io/cluster-queue-name"
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
WORKLOAD_KEY = "workloads.kueue.x-k8s.io"
MAX_POD_SETS = 18
MAX_NAME_PREFIX = 253 - 6

HEAD_POD_SET = "head"
SUBMITTER_POD_SET = "submitter"
SUBMITTER_CONTAINER = "ray-job-submitter"

# KubeRay's default submitter container resources (K8sJobMode), which Kueue accounts for.
SUBMITTER_REQUESTS = {"cpu": "500m", "memory": "200Mi"}
SUBMITTER_LIMITS = {"cpu": "1", "memory": "1Gi"}


@dataclass(frozen=True)
class JobKind:
    """One integration (ray.io/rayjob, ray.io/raycluster, ray.io/rayservice, batch/job) and where its
    fields live."""

    kind: str
    key: str
    cluster_spec_field: str | None  # None: the spec itself is the RayCluster spec (or a Job's spec)
    framework: str
    """Its name in Kueue's ``integrations.frameworks``."""
    group: str = "ray.io"

    @property
    def api_version(self) -> str:
        return f"{self.group}/v1"


RAYJOB = JobKind("RayJob", "rayjobs.ray.io", "rayClusterSpec", "ray.io/rayjob")
RAYCLUSTER = JobKind("RayCluster", "rayclusters.ray.io", None, "ray.io/raycluster")
RAYSERVICE = JobKind("RayService", "rayservices.ray.io", "rayClusterConfig", "ray.io/rayservice")
BATCH_JOB = JobKind("Job", "jobs.batch", None, "batch/job", group="batch")
JOB_KINDS = {k.key: k for k in (RAYJOB, RAYCLUSTER, RAYSERVICE, BATCH_JOB)}
JOB_KINDS_BY_KIND = {k.kind: k for k in (RAYJOB, RAYCLUSTER, RAYSERVICE, BATCH_JOB)}
ALL_FRAMEWORKS = frozenset(k.framework for k in JOB_KINDS.values())
"""The integrations of Kueue's shipped configuration that kubesim serves: all of them."""


# ----------------------------------------------------------------------------------------------- naming


def workload_name(kind: str, group: str, name: str, uid: str) -> str:
    """Upstream ``GetWorkloadNameForOwnerWithGVK``: ``<kind>-<name>-<sha1(kind, group, name, uid)[:5]>``.

    The hash keeps a re-created job (same name, new uid) from adopting the old job's Workload.
    """
    prefix = f"{kind.lower()}-{name}"[:MAX_NAME_PREFIX]
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()[:5]
    return f"{prefix}-{digest}"


def workload_name_for(kind: JobKind, job: dict) -> str:
    meta = job["metadata"]
    return workload_name(kind.kind, kind.group, meta["name"], meta["uid"])


# ----------------------------------------------------------------------------------------------- state


def queue_name(job: dict) -> str:
    return (job.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL, "")


def priority_class_name(job: dict) -> str:
    return (job.get("metadata", {}).get("labels") or {}).get(PRIORITY_CLASS_LABEL, "")


def cluster_spec(kind: JobKind, job: dict) -> dict | None:
    spec = job.get("spec") or {}
    if kind.cluster_spec_field is None:
        return spec
    return spec.get(kind.cluster_spec_field)


def owner_kind(ref: dict) -> JobKind | None:
    """The integration an owner reference names, matched by apiVersion and kind as Kueue matches GVKs."""
    kind = JOB_KINDS_BY_KIND.get(ref.get("kind", ""))
    return kind if kind is not None and ref.get("apiVersion") == kind.api_version else None


def controller_ref(obj: dict) -> dict | None:
    return next(
        (r for r in obj.get("metadata", {}).get("ownerReferences") or [] if r.get("controller")), None
    )


def owner_managed_by_kueue(obj: dict, frameworks: frozenset[str] = ALL_FRAMEWORKS) -> bool:
    """``IsOwnerManagedByKueueForObject``: the controller owner is of a kind whose integration is enabled,
    whatever its labels. LocalQueue defaulting leaves such a Job alone (KubeRay's submitter Job)."""
    ref = controller_ref(obj)
    kind = owner_kind(ref) if ref else None
    return kind is not None and kind.framework in frameworks


OwnerLookup = Callable[[JobKind, str, str], dict | None]
"""(kind, namespace, name) -> the owner object, or None when it does not exist."""


def has_managed_ancestor(
    job: dict, owner_of: OwnerLookup | None, frameworks: frozenset[str] = ALL_FRAMEWORKS
) -> bool:
    """Whether ``find_managed_ancestor`` finds one: then Kueue admits that ancestor and never makes a
    Workload for this job, nor suspends it on create. An owner that cannot be read stops Kueue with an
    error, which creates nothing either: True."""
    return find_managed_ancestor(job, owner_of, frameworks)[0]


def find_managed_ancestor(
    job: dict, owner_of: OwnerLookup | None, frameworks: frozenset[str] = ALL_FRAMEWORKS
) -> tuple[bool, dict | None]:
    """``FindAncestorJobManagedByKueue`` (``manageJobsWithoutQueueName`` false): walking up the controller
    owners while their kind is one Kueue knows, (True, that owner) for the first of an enabled
    integration with a queue label; (True, None) when an owner cannot be read (Kueue stops with an error);
    (False, None) when there is none."""
    namespace = job.get("metadata", {}).get("namespace", "")
    current, seen = job, set()
    while (ref := controller_ref(current)) is not None and (kind := owner_kind(ref)) is not None:
        if ref.get("uid") in seen:
            return False, None  # cyclic ownership: Kueue gives up on the search
        seen.add(ref.get("uid"))
        parent = owner_of(kind, namespace, ref["name"]) if owner_of else None
        if parent is None:
            return True, None
        if parent["metadata"].get("uid") != ref.get("uid"):
            return False, None
        if kind.framework in frameworks and queue_name(parent):
            return True, parent
        current = parent
    return False, None


def owned_by_ray_controller(job: dict, frameworks: frozenset[str] = ALL_FRAMEWORKS) -> bool:
    """A RayCluster created by a RayJob or RayService whose integration is enabled: its parent is the
    Kueue-managed job, not it (``FindAncestorJobManagedByKueue``)."""
    parents = {k.kind for k in (RAYJOB, RAYSERVICE) if k.framework in frameworks}
    return any(
        ref.get("controller") and ref.get("kind") in parents
        for ref in job.get("metadata", {}).get("ownerReferences") or []
    )


def is_managed(
    kind: JobKind,
    job: dict,
    frameworks: frozenset[str] = ALL_FRAMEWORKS,
    owner_of: OwnerLookup | None = None,
) -> bool:
    """Whether Kueue makes a Workload for this object (``manageJobsWithoutQueueName`` is false, as shipped).

    Only kinds whose integration is enabled. A RayJob that only targets an existing cluster
    (clusterSelector, no rayClusterSpec) is skipped, and so is a RayCluster that a RayJob/RayService owns
    while that parent's integration is enabled (Kueue admits the parent instead), and a batch Job with a
    queue-labelled ancestor Kueue manages (``has_managed_ancestor``, owners read through ``owner_of``).
    """
    if kind.framework not in frameworks or not queue_name(job):
        return False
    if kind is RAYJOB:
        spec = job.get("spec") or {}
        return bool(spec.get("rayClusterSpec")) or not spec.get("clusterSelector")
    if kind is RAYCLUSTER:
        return not owned_by_ray_controller(job, frameworks)
    if kind is BATCH_JOB:
        return not has_managed_ancestor(job, owner_of, frameworks)
    return True


def is_suspended(kind: JobKind, job: dict) -> bool:
    spec = job.get("spec") or {}
    if kind is RAYSERVICE:
        return bool((spec.get("rayClusterConfig") or {}).get("suspend"))
    return bool(spec.get("suspend"))


def is_active(kind: JobKind, job: dict) -> bool:
    """Upstream ``IsActive``: the job still holds (or is acquiring) resources on the cluster.

    Kueue creates a Workload only for an inactive job, and clears an evicted Workload's admission only once
    the job stopped being active (KubeRay finished suspending it).
    """
    status = job.get("status") or {}
    if kind is BATCH_JOB:
        return batch_job.is_active(job)
    if kind is RAYJOB:
        return status.get("jobDeploymentStatus", "") not in ("", "Suspended")
    if kind is RAYCLUSTER:
        return status.get("state") == "ready"
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def finished(kind: JobKind, job: dict) -> tuple[bool, str, str]:
    """(finished, Finished-condition reason, message); RayJob: Complete/Failed, success iff SUCCEEDED."""
    if kind is BATCH_JOB:
        return batch_job.finished(job)
    status = job.get("status") or {}
    if kind is RAYJOB:
        if status.get("jobDeploymentStatus") not in ("Complete", "Failed"):
            return False, "", ""
        reason = "Succeeded" if status.get("jobStatus") == "SUCCEEDED" else "Failed"
        return True, reason, status.get("message", "")
    if kind is RAYCLUSTER and status.get("state") == "failed":
        return True, "Failed", status.get("reason", "")
    return False, "", ""


def is_on_hold(kind: JobKind, job: dict) -> bool:
    """RayJob ``ValidationFailed``: KubeRay gave up on it, so Kueue releases its quota without finishing it."""
    return kind is RAYJOB and (job.get("status") or {}).get("jobDeploymentStatus") == "ValidationFailed"


def pods_ready(kind: JobKind, job: dict) -> bool:
    if kind is BATCH_JOB:
        return batch_job.pods_ready(job)
    status = job.get("status") or {}
    if kind is RAYJOB:
        return (status.get("rayClusterStatus") or {}).get("state") == "ready"
    if kind is RAYCLUSTER:
        return status.get("state") == "ready"
    return is_active(kind, job)


# ----------------------------------------------------------------------------------------------- pod sets


def default_submitter_template(job: dict) -> dict:
    """KubeRay's default submitter pod template (K8sJobMode) that Kueue accounts for and writes on start:
    one container running the head's image (the head group's first container), as both KubeRay's
    ``GetDefaultSubmitterContainer`` and Kueue's copy of it in ``getSubmitterTemplate`` say."""
    head = (((job.get("spec") or {}).get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template")
    image = (((head or {}).get("spec") or {}).get("containers") or [{}])[0].get("image")
    container: dict = {"name": SUBMITTER_CONTAINER}
    if image:  # an empty image is left out of the JSON, as Go's omitempty does
        container["image"] = image
    container["resources"] = {"requests": dict(SUBMITTER_REQUESTS), "limits": dict(SUBMITTER_LIMITS)}
    return {"spec": {"restartPolicy": "Never", "containers": [container]}}


def worker_count(group: dict) -> int:
    """Pods of a worker group in its pod set: ``replicas`` x ``numOfHosts``.

    A group without ``replicas`` counts 0: the RayJob/RayCluster CRD defaults the field to 0 before
    Kueue ever reads the object (Kueue's own fallback of 1 only applies to a nil it never sees).
    """
    count = int(group.get("replicas") or 0)
    hosts = int(group.get("numOfHosts") or 1)
    return count * hosts if hosts > 1 else count


def build_pod_sets(kind: JobKind, job: dict) -> list[dict]:
    """Workload ``spec.podSets`` of a job: ``head``, one per worker group, then (RayJob K8sJobMode) ``submitter``.

    The templates are copies of the job's, so a Workload also records what the pod templates looked like
    before admission (used to restore them on eviction).
    """
    if kind is BATCH_JOB:
        template = copy.deepcopy(batch_job.template(job))
        return [{"name": batch_job.MAIN_POD_SET, "count": batch_job.pod_count(job), "template": template}]
    rc_spec = cluster_spec(kind, job) or {}
    head_template = copy.deepcopy((rc_spec.get("headGroupSpec") or {}).get("template") or {})
    if rc_spec.get("enableInTreeAutoscaling"):
        options = rc_spec.get("autoscalerOptions") or {}
        resources = options.get("resources") or {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        }
        containers = head_template.setdefault("spec", {}).setdefault("containers", [])
        containers.append({"name": "autoscaler", "resources": copy.deepcopy(resources)})
    pod_sets = [{"name": HEAD_POD_SET, "count": 1, "template": head_template}]
    for group in rc_spec.get("workerGroupSpecs") or []:
        pod_sets.append(
            {
                "name": str(group.get("groupName", "")).lower(),
                "count": worker_count(group),
                "template": copy.deepcopy(group.get("template") or {}),
            }
        )
    if kind is RAYJOB:
        spec = job.get("spec") or {}
        mode = spec.get("submissionMode") or "K8sJobMode"
        if mode == "K8sJobMode":
            template = copy.deepcopy(spec.get("submitterPodTemplate") or default_submitter_template(job))
            pod_sets.append({"name": SUBMITTER_POD_SET, "count": 1, "template": template})
        elif mode == "SidecarMode":
            containers = pod_sets[0]["template"].setdefault("spec", {}).setdefault("containers", [])
            containers.append(
                {"name": SUBMITTER_CONTAINER, "resources": {"requests": dict(SUBMITTER_REQUESTS)}}
            )
    return pod_sets


def container_requests(container: dict) -> dict[str, str]:
    """Requests of one container, with limits standing in for missing requests (as Kueue does)."""
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: str(value) for name, value in merged.items()}


def pod_requests(pod_spec: dict) -> dict[str, int]:
    """Per-pod requests as Kueue computes them: containers summed (limits fill missing requests), the
    largest init container if bigger, plus the pod overhead."""
    total: dict[str, int] = {}
    for container in pod_spec.get("containers") or []:
        for name, value in container_requests(container).items():
            total[name] = total.get(name, 0) + quantity.to_canonical(name, value)
    for container in pod_spec.get("initContainers") or []:
        for name, value in container_requests(container).items():
            total[name] = max(total.get(name, 0), quantity.to_canonical(name, value))
    for name, value in (pod_spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + quantity.to_canonical(name, value)
    return total


def _shape(pod_set_name: str, count: int, template: dict) -> tuple:
    spec = template.get("spec") or {}
    return (
        pod_set_name,
        count,
        spec.get("containers") or [],
        spec.get("initContainers") or [],
        spec.get("tolerations") or [],
    )


def _job_shapes(kind: JobKind, job: dict) -> list[tuple]:
    """What ``build_pod_sets`` would record, without copying: (name, count, containers, init containers,
    tolerations) per pod set. Only the fields Kueue compares (``equality.ComparePodSets``)."""
    if kind is BATCH_JOB:
        return [_shape(batch_job.MAIN_POD_SET, batch_job.pod_count(job), batch_job.template(job))]
    rc_spec = cluster_spec(kind, job) or {}
    head = (rc_spec.get("headGroupSpec") or {}).get("template") or {}
    if rc_spec.get("enableInTreeAutoscaling"):  # the autoscaler container Kueue adds: compare the full build
        return [_shape(ps["name"], ps["count"], ps["template"]) for ps in build_pod_sets(kind, job)]
    shapes = [_shape(HEAD_POD_SET, 1, head)]
    for group in rc_spec.get("workerGroupSpecs") or []:
        shapes.append(
            _shape(str(group.get("groupName", "")).lower(), worker_count(group), group.get("template") or {})
        )
    if kind is RAYJOB:
        spec = job.get("spec") or {}
        mode = spec.get("submissionMode") or "K8sJobMode"
        if mode == "K8sJobMode":
            template = spec.get("submitterPodTemplate") or default_submitter_template(job)
            shapes.append(_shape(SUBMITTER_POD_SET, 1, template))
        elif mode == "SidecarMode":
            return [_shape(ps["name"], ps["count"], ps["template"]) for ps in build_pod_sets(kind, job)]
    return shapes


def equivalent_to_workload(kind: JobKind, job: dict, workload: dict) -> bool:
    """``EquivalentToWorkload``: the job's pod sets are still the ones its Workload was made for.

    Kueue compares each pod set's count and containers (and init containers), and the tolerations only
    while the Workload holds no quota (admission injects the flavors' tolerations, so a running job's
    differ). A job changed otherwise (a new image, new environment, other replicas) no longer matches:
    Kueue then replaces the Workload.
    """
    recorded = [
        _shape(ps.get("name", ""), int(ps.get("count") or 0), ps.get("template") or {})
        for ps in (workload.get("spec") or {}).get("podSets") or []
    ]
    current = _job_shapes(kind, job)
    if len(recorded) != len(current):
        return False
    with_tolerations = ((workload.get("status") or {}).get("admission")) is None
    for mine, theirs in zip(current, recorded, strict=True):
        if mine[1:4] != theirs[1:4] or (with_tolerations and mine[4] != theirs[4]):
            return False
    return True


# ----------------------------------------------------------------------------------------------- workload


def prebuilt_workload_name(job: dict) -> str:
    """``PrebuiltWorkloadNameFor``: the annotation first, then the label.

    >>> prebuilt_workload_name({"metadata": {"labels": {PREBUILT_WORKLOAD: "wl"}}})
    'wl'
    """
    meta = job.get("metadata") or {}
    return (meta.get("annotations") or {}).get(PREBUILT_WORKLOAD) or (meta.get("labels") or {}).get(
        PREBUILT_WORKLOAD, ""
    )


def build_workload(kind: JobKind, job: dict, *, priority: int, priority_class: str | None) -> dict:
    """The Workload Kueue creates for ``job``: owned by it, found by the job-uid label, in its queue."""
    meta = job["metadata"]
    spec: dict[str, Any] = {
        "queueName": queue_name(job),
        "priority": priority,
        "podSets": build_pod_sets(kind, job),
        "active": True,
    }
    if priority_class:
        spec["priorityClassRef"] = {
            "group": KUEUE_GROUP,
            "kind": "WorkloadPriorityClass",
            "name": priority_class,
        }
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name_for(kind, job),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": kind.api_version,
                    "kind": kind.kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


# ----------------------------------------------------------------------------------------------- suspend


def set_suspend(kind: JobKind, job: dict, suspend: bool) -> None:
    spec = job.setdefault("spec", {})
    if kind is RAYSERVICE:
        spec.setdefault("rayClusterConfig", {})["suspend"] = suspend
    else:
        spec["suspend"] = suspend
