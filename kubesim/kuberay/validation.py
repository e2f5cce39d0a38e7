"""KubeRay's RayJob / RayService validation (pure), with KubeRay v1.7.0's exact messages.

KubeRay validates on every reconcile, not in a webhook: an invalid RayJob is accepted by the API
server and then parked in ``jobDeploymentStatus: ValidationFailed`` with the message below, which is
what a user (or an Airflow sensor) sees. Only the rules a submitter can realistically trip are
implemented; each returns the first error like ``validateRayJob`` does.
"""

from __future__ import annotations

import re

import yaml

MAX_RAYCLUSTER_NAME_LENGTH = 53
MAX_RAYJOB_NAME_LENGTH = MAX_RAYCLUSTER_NAME_LENGTH - 6
MAX_RAYSERVICE_NAME_LENGTH = MAX_RAYCLUSTER_NAME_LENGTH - 6

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def dns1035_errors(name: str) -> list[str]:
    """``validation.IsDNS1035Label`` of apimachinery, as printed by Go's ``%v`` of the error list."""
    errors = []
    if len(name) > 63:
        errors.append("must be no more than 63 characters")
    if not _DNS1035.match(name):
        errors.append(_DNS1035_MESSAGE)
    return errors


def _metadata_error(kind: str, name: str, max_length: int) -> str | None:
    if len(name) > max_length:
        return f"The {kind} metadata is invalid: {kind} name should be no more than {max_length} characters"
    errors = dns1035_errors(name)
    if errors:
        return f"The {kind} metadata is invalid: {kind} name should be a valid DNS1035 label: [{' '.join(errors)}]"
    return None


def validate_rayjob(rayjob: dict) -> tuple[str, str] | None:
    """The first validation error as (event reason, message), or None when the RayJob is valid."""
    name = rayjob["metadata"]["name"]
    error = _metadata_error("RayJob", name, MAX_RAYJOB_NAME_LENGTH)
    if error:
        return "InvalidRayJobMetadata", error
    error = _rayjob_spec_error(rayjob.get("spec") or {})
    if error:
        return "InvalidRayJobSpec", error
    status = rayjob.get("status") or {}
    mode = (rayjob.get("spec") or {}).get("submissionMode", "K8sJobMode")
    if status.get("jobDeploymentStatus") == "Waiting" and mode != "InteractiveMode":
        return "InvalidRayJobStatus", (
            "The RayJob status is invalid: JobDeploymentStatus cannot be `Waiting` when SubmissionMode "
            "is not InteractiveMode"
        )
    return None


def _rayjob_spec_error(spec: dict) -> str | None:  # noqa: C901 - one rule per branch, in KubeRay's order
    invalid = "The RayJob spec is invalid: "
    suspend = bool(spec.get("suspend"))
    shutdown = bool(spec.get("shutdownAfterJobFinishes"))
    ttl = spec.get("ttlSecondsAfterFinished") or 0
    mode = spec.get("submissionMode", "K8sJobMode")
    backoff_limit = spec.get("backoffLimit")
    selector = spec.get("clusterSelector") or {}

    if suspend and not shutdown:
        return invalid + "a RayJob with shutdownAfterJobFinishes set to false is not allowed to be suspended"
    if ttl < 0:
        return invalid + "TTLSecondsAfterFinished must be a non-negative integer"
    if not shutdown and ttl > 0:
        return (
            invalid
            + "a RayJob with shutdownAfterJobFinishes set to false cannot have TTLSecondsAfterFinished"
        )
    rules = (spec.get("deletionStrategy") or {}).get("deletionRules")
    if rules and shutdown:
        return (
            invalid
            + "spec.shutdownAfterJobFinishes and spec.deletionStrategy.deletionRules are mutually exclusive"
        )
    if suspend and selector:
        return invalid + "the ClusterSelector mode doesn't support the suspend operation"
    if spec.get("rayClusterSpec") is None and not selector:
        return invalid + "one of RayClusterSpec or ClusterSelector must be set"
    if selector:
        if not selector.get("ray.io/cluster"):
            return "cluster name in ClusterSelector should not be empty"
        if mode == "SidecarMode":
            return "ClusterSelector is not supported in SidecarMode"
        if backoff_limit is not None and backoff_limit > 0:
            return invalid + "BackoffLimit is incompatible with ClusterSelector mode"
    if mode == "InteractiveMode" and backoff_limit is not None and backoff_limit > 0:
        return invalid + "BackoffLimit is incompatible with InteractiveMode"
    if spec.get("rayClusterSpec") is not None:
        error = raycluster_spec_error(spec["rayClusterSpec"])
        if error:
            return invalid + error
    runtime_env = spec.get("runtimeEnvYAML")
    if runtime_env:
        try:
            yaml.safe_load(runtime_env)
        except yaml.YAMLError as exc:
            return f"failed to unmarshal RuntimeEnvYAML: {runtime_env}: {exc}"
    for field_name in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        value = spec.get(field_name)
        if value is not None and value <= 0:
            return invalid + f"{field_name} must be a positive integer"
    if backoff_limit is not None and backoff_limit < 0:
        return invalid + "backoffLimit must be a positive integer"
    return None


def raycluster_spec_error(spec: dict) -> str | None:
    """The structural RayCluster rules of ``ValidateRayClusterSpec`` that matter for a simulated cluster."""
    head_containers = (((spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    )
    if not head_containers:
        return "headGroupSpec should have at least one container"
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    for group in spec.get("workerGroupSpecs") or []:
        if not ((group.get("template") or {}).get("spec") or {}).get("containers"):
            return "workerGroupSpec should have at least one container"
        name = group.get("groupName", "")
        min_replicas, max_replicas = group.get("minReplicas"), group.get("maxReplicas")
        if not autoscaling and (min_replicas is None or max_replicas is None):
            return (
                f"worker group {name} must set both minReplicas and maxReplicas when autoscaling is disabled"
            )
        if min_replicas is not None and min_replicas < 0:
            return f"worker group {name} has negative minReplicas {min_replicas}"
        if max_replicas is not None and max_replicas < 0:
            return f"worker group {name} has negative maxReplicas {max_replicas}"
        if min_replicas is not None and max_replicas is not None and min_replicas > max_replicas:
            return (
                f"worker group {name} has minReplicas {min_replicas} greater than maxReplicas {max_replicas}"
            )
    return None


def validate_rayservice(rayservice: dict) -> str | None:
    """The first RayService validation error message, or None."""
    error = _metadata_error("RayService", rayservice["metadata"]["name"], MAX_RAYSERVICE_NAME_LENGTH)
    if error:
        return error
    cluster_spec = (rayservice.get("spec") or {}).get("rayClusterConfig")
    if cluster_spec is None:
        return "The RayService spec is invalid: headGroupSpec should have at least one container"
    error = raycluster_spec_error(cluster_spec)
    return f"The RayService spec is invalid: {error}" if error else None
