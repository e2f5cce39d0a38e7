"""Kueue's admission webhooks for RayJob / RayCluster / RayService / batch Job (mutating ``m*.kb.io``,
validating ``v*.kb.io``), run as a store admission hook: the same place the API server calls real webhooks.

Mutation (create only): default the queue label to ``default`` when a LocalQueue named ``default`` exists
in the namespace, and default managed jobs to suspended so that nothing runs before Kueue admits it.
The same LocalQueue defaulting applies to the other kinds kubesim serves that Kueue's shipped config
integrates: ownerless Pods and batch Jobs (``label_for_default_queue``). Only in the namespaces Kueue's
``managedJobsNamespaceSelector`` selects (by default all but ``kube-system`` and ``kueue-system``).
Validation (create and update): the rules Kueue v0.19.2 enforces, denied with the API server's wording
``admission webhook "<name>" denied the request: <field errors>`` (403 Forbidden).

ClusterQueues: the one CEL rule of the ClusterQueue CRD that decides how kubesim schedules
(``flavorFungibility.preference`` only with both policies ``TryNextFlavor``), refused as the API server
refuses a CEL violation (422 Invalid). kubesim's schema check skips CEL, and without this a queue a real
cluster refuses would be accepted and scheduled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from kubesim.errors import ApiError
from kubesim.errors import invalid as invalid_object
from kubesim.kueue import jobs
from kubesim.kueue.admission_checks import ADMISSION_CHECK_KEY, MULTIKUEUE_CONTROLLER, strategy
from kubesim.kueue.config import DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR, NAMESPACE_NAME_LABEL
from kubesim.kueue.jobs import BATCH_JOB, RAYCLUSTER, RAYJOB, RAYSERVICE, JobKind
from kubesim.selectors import match_label_selector_obj

WEBHOOK_NAMES = {
    RAYJOB.key: "vrayjob.kb.io",
    RAYCLUSTER.key: "vraycluster.kb.io",
    RAYSERVICE.key: "vrayservice.kb.io",
    BATCH_JOB.key: "vjob.kb.io",
}
DEFAULT_LOCAL_QUEUE = "default"
LOCAL_QUEUE_KEY = "localqueues.kueue.x-k8s.io"
CLUSTER_QUEUE_KEY = "clusterqueues.kueue.x-k8s.io"
KUBERAY_CONTROLLER = "ray.io/kuberay-operator"
PREFERENCE_RULE = "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor"
IMMUTABLE = "field is immutable"


# ----------------------------------------------------------------------------------------------- field errors


def _go_value(value: object) -> str:
    """How apimachinery's ``field.Error`` prints a bad value (``%v`` / ``%q`` / ``%#v``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))}:{json.dumps(str(v))}" for k, v in sorted(value.items()))
        return "map[string]string{" + items + "}"
    return str(value)


def invalid(path: str, value: object, detail: str) -> str:
    return f"{path}: Invalid value: {_go_value(value)}: {detail}"


def required(path: str, detail: str) -> str:
    return f"{path}: Required value: {detail}"


def forbidden(path: str, detail: str) -> str:
    return f"{path}: Forbidden: {detail}"


def too_many(path: str, actual: int, maximum: int) -> str:
    return f"{path}: Too many: {actual}: must have at most {maximum} items"


def aggregate(errors: list[str]) -> str:
    """``field.ErrorList.ToAggregate().Error()``: one message as is, several as ``[a, b]`` (deduplicated)."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# ----------------------------------------------------------------------------------------------- rules


def _label_path(key: str) -> str:
    return f"metadata.labels[{key}]"


def _dns1123_subdomain_errors(value: str) -> list[str]:
    errors = []
    if len(value) > 253:
        errors.append("must be no more than 253 characters")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", value):
        errors.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    return errors


def _cluster_spec_errors(job: dict, rc_spec: dict, path: str) -> list[str]:
    """``raycluster.ValidateCreate``: autoscaling only as an elastic job, ≤ 18 pod sets, no worker "head"."""
    errors = []
    annotations = job.get("metadata", {}).get("annotations") or {}
    if rc_spec.get("enableInTreeAutoscaling") and annotations.get(jobs.ELASTIC_JOB_ANNOTATION) != "true":
        errors.append(
            invalid(
                f"{path}.enableInTreeAutoscaling",
                True,
                "a kueue managed job should only use autoscaling when workload slicing is enabled",
            )
        )
    groups = rc_spec.get("workerGroupSpecs") or []
    if len(groups) + 1 > jobs.MAX_POD_SETS:
        errors.append(too_many(f"{path}.workerGroupSpecs", len(groups) + 1, jobs.MAX_POD_SETS))
    for index, group in enumerate(groups):
        if group.get("groupName") == jobs.HEAD_POD_SET:
            errors.append(
                forbidden(
                    f"{path}.workerGroupSpecs[{index}].groupName", '"head" is reserved for the head group'
                )
            )
    return errors


def _queue_name_errors(job: dict) -> list[str]:
    name = jobs.queue_name(job)
    if jobs.QUEUE_LABEL not in (job.get("metadata", {}).get("labels") or {}):
        return []
    problems = _dns1123_subdomain_errors(name)
    return [invalid(_label_path(jobs.QUEUE_LABEL), name, ",".join(problems))] if problems else []


def validate_create(kind: JobKind, job: dict, frameworks: frozenset[str] = jobs.ALL_FRAMEWORKS) -> list[str]:
    """Field errors for a new (or updated) managed job, in upstream's order (none for a kind whose
    integration is disabled: its webhook is not registered)."""
    if kind.framework not in frameworks or not jobs.queue_name(job):
        return []
    errors: list[str] = []
    if kind is BATCH_JOB:
        return _queue_name_errors(job)
    if kind is RAYJOB:
        spec = job.get("spec") or {}
        has_selector = bool(spec.get("clusterSelector"))
        has_cluster_spec = spec.get("rayClusterSpec") is not None
        if has_selector and has_cluster_spec:
            return [
                invalid(
                    "spec.clusterSelector",
                    spec["clusterSelector"],
                    "a kueue managed job should not use an existing cluster",
                )
            ]
        if has_selector:
            return []
        if not has_cluster_spec:
            return [
                required(
                    "spec.rayClusterSpec",
                    "rayClusterSpec is required for Kueue-managed jobs that don't use clusterSelector",
                )
            ]
        if not spec.get("shutdownAfterJobFinishes", False):
            errors.append(
                invalid(
                    "spec.shutdownAfterJobFinishes",
                    bool(spec.get("shutdownAfterJobFinishes", False)),
                    "a kueue managed job should delete the cluster after finishing",
                )
            )
        errors += _cluster_spec_errors(job, spec["rayClusterSpec"], "spec.rayClusterSpec")
    elif kind is RAYCLUSTER:
        if jobs.owned_by_ray_controller(job, frameworks):
            return []
        errors += _cluster_spec_errors(job, job.get("spec") or {}, "spec")
    else:
        errors += _cluster_spec_errors(
            job, (job.get("spec") or {}).get("rayClusterConfig") or {}, "spec.rayClusterConfig"
        )
    return errors + _queue_name_errors(job)


def validate_update(
    kind: JobKind,
    old: dict,
    new: dict,
    default_queue_exists: bool,
    frameworks: frozenset[str] = jobs.ALL_FRAMEWORKS,
) -> list[str]:
    """``ValidateJobOnUpdate`` then the create rules: queue and priority labels vs. suspension."""
    if kind.framework not in frameworks or not jobs.queue_name(new):
        return []
    errors: list[str] = []
    suspended = jobs.is_suspended(kind, new)
    old_queue, new_queue = jobs.queue_name(old), jobs.queue_name(new)
    if not suspended and old_queue != new_queue:
        errors.append(invalid(_label_path(jobs.QUEUE_LABEL), new_queue, IMMUTABLE))
    if not new_queue and old_queue and default_queue_exists:
        errors.append(
            invalid(
                _label_path(jobs.QUEUE_LABEL),
                "",
                "queue-name must not be empty in namespace with default queue",
            )
        )
    old_class, new_class = jobs.priority_class_name(old), jobs.priority_class_name(new)
    if not suspended and not old_class and new_class:
        errors.append(
            invalid(
                _label_path(jobs.PRIORITY_CLASS_LABEL),
                new_class,
                "WorkloadPriorityClass cannot be added to a non-suspended workload",
            )
        )
    elif old_class and not new_class:
        errors.append(
            invalid(
                _label_path(jobs.PRIORITY_CLASS_LABEL),
                "",
                "WorkloadPriorityClass cannot be removed from a workload",
            )
        )
    return errors + validate_create(kind, new, frameworks)


def cluster_queue_causes(cq: dict) -> list[dict]:
    """The ClusterQueue CRD's CEL rule on ``spec.flavorFungibility``, as 422 causes (empty when it holds).

    CEL sees the object after defaulting, so an unset ``whenCanBorrow`` is ``MayStopSearch`` and breaks
    the rule, while an unset ``whenCanPreempt`` is ``TryNextFlavor``.
    """
    fungibility = (cq.get("spec") or {}).get("flavorFungibility")
    if not isinstance(fungibility, dict) or fungibility.get("preference") is None:
        return []
    borrow = fungibility.get("whenCanBorrow") or "MayStopSearch"
    preempt = fungibility.get("whenCanPreempt") or "TryNextFlavor"
    if borrow == preempt == "TryNextFlavor":
        return []
    return [
        {
            "reason": "FieldValueInvalid",
            "message": f'Invalid value: "object": {PREFERENCE_RULE}',
            "field": "spec.flavorFungibility",
        }
    ]


# ----------------------------------------------------------------------------------------------- defaulting


def apply_defaults(
    kind: JobKind,
    job: dict,
    default_queue: bool,
    frameworks: frozenset[str] = jobs.ALL_FRAMEWORKS,
    owner_of: jobs.OwnerLookup | None = None,
) -> None:
    """Mutating webhook on create: default the queue label, then suspend a managed job.

    ``default_queue``: a LocalQueue named ``default`` exists in the job's namespace and Kueue's
    ``managedJobsNamespaceSelector`` selects that namespace (``ApplyDefaultLocalQueueWith
    ManagedJobsNamespaceSelector``, for every kind). A job whose controller owner is of an enabled
    integration's kind (KubeRay's submitter Job or a RayCluster, owned by their RayJob) gets no default
    queue label (``IsOwnerManagedByKueueForObject``), and a Job with a queue-labelled managed ancestor is
    not suspended (``WorkloadShouldBeSuspended``). A job with a queue label is suspended whatever its
    namespace: the selector only limits the defaulting (and which jobs the reconciler manages)."""
    if kind.framework not in frameworks:
        return
    if kind is RAYCLUSTER and jobs.owned_by_ray_controller(job, frameworks):
        return
    if kind is BATCH_JOB:
        if not jobs.owner_managed_by_kueue(job, frameworks):
            label_for_default_queue(job, default_queue, owners_allowed=True)
    else:
        label_for_default_queue(job, default_queue, owners_allowed=True)
    if jobs.is_managed(kind, job, frameworks, owner_of) and not jobs.is_suspended(kind, job):
        jobs.set_suspend(kind, job, True)


def can_default_managed_by(job: dict) -> bool:
    """RayJob's ``CanDefaultManagedBy`` (MultiKueue is on by default in v0.19): unset, or KubeRay's own.

    >>> can_default_managed_by({"spec": {"managedBy": "ray.io/kuberay-operator"}})
    True
    """
    return (job.get("spec") or {}).get("managedBy") in (None, "", KUBERAY_CONTROLLER)


# ----------------------------------------------------------------------------------------------- other kinds

DEFAULTED_KINDS = ("pods", "jobs.batch")
"""Kinds besides the Ray ones whose objects Kueue v0.19 puts into a LocalQueue named ``default``: its shipped
configuration enables the ``pod``, ``batch/job``, ``deployment`` and ``statefulset`` integrations (kubesim
serves no Deployments or StatefulSets)."""


def label_for_default_queue(obj: dict, default_queue: bool, *, owners_allowed: bool = False) -> bool:
    """LocalQueueDefaulting: an object without a queue label, where ``default_queue`` (a LocalQueue named
    ``default`` in a namespace ``managedJobsNamespaceSelector`` selects), gets
    ``kueue.x-k8s.io/queue-name: default``. A Pod only when it has no owner (kubesim does not gate Pods:
    its only pods are Jobs' and KubeRay's, which have owners); a job kind (``owners_allowed``) also when an
    owner Kueue does not manage has it (``apply_defaults`` leaves out the rest). A labelled Job is then
    suspended and queued by the batch/job integration. True when it labelled the object."""
    metadata = obj.setdefault("metadata", {})
    if not default_queue or (metadata.get("ownerReferences") and not owners_allowed):
        return False
    if jobs.queue_name(obj):
        return False
    metadata.setdefault("labels", {})[jobs.QUEUE_LABEL] = DEFAULT_LOCAL_QUEUE
    return True


# ----------------------------------------------------------------------------------------------- hook


def make_admission_hook(
    store,
    frameworks: frozenset[str] = jobs.ALL_FRAMEWORKS,
    namespace_selector: dict | None = None,
) -> Callable[[str, object, dict, dict | None], None]:
    """The store admission hook standing in for Kueue's webhook configurations (only the enabled
    integrations' webhooks are registered). ``namespace_selector``: Kueue's
    ``managedJobsNamespaceSelector`` (default: every namespace but ``kube-system`` and ``kueue-system``)."""
    selector = DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR if namespace_selector is None else namespace_selector

    def default_queue_exists(namespace: str | None) -> bool:
        """A LocalQueue named ``default`` exists there, and the namespace is one Kueue manages."""
        try:
            store.get(LOCAL_QUEUE_KEY, DEFAULT_LOCAL_QUEUE, namespace=namespace)
        except ApiError:
            return False
        namespace_obj = store.get_or_none("namespaces", namespace or "")
        labels = ((namespace_obj or {}).get("metadata") or {}).get("labels") or {
            NAMESPACE_NAME_LABEL: namespace or ""
        }
        return match_label_selector_obj(selector, labels)

    def owner_of(kind: JobKind, namespace: str, name: str) -> dict | None:
        try:
            return store.get(kind.key, name, namespace=namespace)
        except ApiError:
            return None

    def multikueue_cluster_queue(job: dict) -> bool:
        """The job's LocalQueue points at a ClusterQueue one of whose admission checks is MultiKueue's
        (``ApplyDefaultForManagedBy``; any such AdmissionCheck counts, active or not)."""
        meta = job.get("metadata") or {}
        lq = store.get_or_none(LOCAL_QUEUE_KEY, jobs.queue_name(job), namespace=meta.get("namespace"))
        cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
        cq = store.get_or_none(CLUSTER_QUEUE_KEY, cq_name) if cq_name else None
        for name in strategy(cq) if cq is not None else ():
            check = store.get_or_none(ADMISSION_CHECK_KEY, name)
            if ((check or {}).get("spec") or {}).get("controllerName") == MULTIKUEUE_CONTROLLER:
                return True
        return False

    def hook(operation: str, rt, obj: dict, old: dict | None) -> None:
        if rt.key == CLUSTER_QUEUE_KEY:
            causes = cluster_queue_causes(obj)
            if causes:
                raise invalid_object(rt, (obj.get("metadata") or {}).get("name", ""), causes)
            return
        job_integration = rt.key == BATCH_JOB.key and BATCH_JOB.framework in frameworks
        if rt.key in DEFAULTED_KINDS and not job_integration:
            if operation == "CREATE":
                label_for_default_queue(obj, default_queue_exists(obj.get("metadata", {}).get("namespace")))
            return
        kind = jobs.JOB_KINDS.get(rt.key)
        if kind is None:
            return
        namespace = obj.get("metadata", {}).get("namespace") or (old or {}).get("metadata", {}).get(
            "namespace"
        )
        has_default = default_queue_exists(namespace)
        if operation == "CREATE":
            apply_defaults(kind, obj, has_default, frameworks, owner_of)
            if (
                kind is RAYJOB
                and can_default_managed_by(obj)
                and jobs.queue_name(obj)
                and multikueue_cluster_queue(obj)
            ):
                obj.setdefault("spec", {})["managedBy"] = MULTIKUEUE_CONTROLLER
            errors = validate_create(kind, obj, frameworks)
        else:
            errors = validate_update(kind, old or {}, obj, has_default, frameworks)
        if errors:
            message = f'admission webhook "{WEBHOOK_NAMES[kind.key]}" denied the request: {aggregate(errors)}'
            raise ApiError(403, "Forbidden", message)

    return hook
