"""Checking a rendered RayJob / RayService body for what Kueue or KubeRay would reject, or silently
mishandle, before anything is sent to the cluster. Each error names the field, the value and the fix.

Apart from ``kueue_ray.manifests`` (which applies the operator's overrides and sizes the pod sets) because
the rules here are the clusters' and read on their own; the builders call them last, on the final body.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import yaml

from kueue_ray.errors import ManifestError
from kueue_ray.naming import (
    ELASTIC_JOB_ANNOTATION,
    MAX_RAYJOB_NAME,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    is_dns1035_label,
    is_label_value,
)
from kueue_ray.quantity import QuantityError, parse_quantity

SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "SidecarMode")
"""KubeRay's submission modes that work under Kueue from Airflow (InteractiveMode is refused: see
``validate_rayjob``)."""
MAX_WORKER_GROUPS_K8SJOBMODE = 16
"""Kueue allows 18 pod sets; head + submitter leave 16 for worker groups."""
MAX_WORKER_GROUPS = 17


def load_mapping(text: Any, field: str) -> dict:
    try:
        loaded = yaml.safe_load(text) if isinstance(text, str) else text
    except yaml.YAMLError as exc:
        raise ManifestError(
            f"not valid YAML: {exc}", field=field, value=text, fix="write a YAML mapping"
        ) from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ManifestError("must be a YAML mapping", field=field, value=text, fix="write a YAML mapping")
    return loaded


def ray_groups(cluster: dict) -> list[tuple[str, str, dict]]:
    """(pod set name, field path, group spec) for the head and each worker group."""
    groups = [("head", "headGroupSpec", cluster.get("headGroupSpec") or {})]
    for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
        groups.append((str(group.get("groupName", "")), f"workerGroupSpecs[{index}]", group))
    return groups


def check_quantity(amount: Any, field: str) -> Decimal:
    try:
        value = parse_quantity(amount)
    except QuantityError as exc:
        raise ManifestError(
            str(exc), field=field, value=amount, fix="use a quantity such as 500m, 2, 8G or 200Mi"
        ) from exc
    if value < 0:
        raise ManifestError("must not be negative", field=field, value=amount, fix="use a quantity >= 0")
    return value


def validate_rayjob(body: dict) -> None:
    """Raise ManifestError for the first thing Kueue or KubeRay would reject (or silently mishandle)."""
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    _validate_name(metadata.get("name"))
    _validate_labels(metadata.get("labels") or {})
    mode = spec.get("submissionMode", "K8sJobMode")
    if mode not in (*SUBMISSION_MODES, "InteractiveMode"):
        raise ManifestError(
            "unknown submission mode",
            field="spec.submissionMode",
            value=mode,
            fix=f"use one of {list(SUBMISSION_MODES)}",
        )
    if mode == "InteractiveMode":
        raise ManifestError(
            "InteractiveMode cannot run under Kueue from Airflow: KubeRay waits for a spec.jobId that nobody "
            "sets, and such a RayJob cannot be suspended, so a preemption of it never completes",
            field="spec.submissionMode",
            value=mode,
            fix="use K8sJobMode (the default; driver log in the task log) or HTTPMode",
        )
    if not str(spec.get("entrypoint") or "").strip():
        raise ManifestError(
            f"{mode} needs the command to run",
            field="spec.entrypoint",
            value=spec.get("entrypoint"),
            fix="set entrypoint (e.g. 'python train.py') in the template or the operator",
        )
    if spec.get("clusterSelector") is not None:
        raise ManifestError(
            "a Kueue-managed RayJob must bring its own cluster; with clusterSelector Kueue "
            + ("rejects it" if spec.get("rayClusterSpec") else "ignores it"),
            field="spec.clusterSelector",
            value=spec.get("clusterSelector"),
            fix="remove clusterSelector and describe the cluster in rayClusterSpec",
        )
    _require_cluster(spec, "rayClusterSpec", " for Kueue-managed jobs")
    if spec.get("shutdownAfterJobFinishes") is not True:
        raise ManifestError(
            "Kueue only manages RayJobs that delete their cluster after finishing",
            field="spec.shutdownAfterJobFinishes",
            value=spec.get("shutdownAfterJobFinishes"),
            fix="set spec.shutdownAfterJobFinishes: true",
        )
    if "runtimeEnvYAML" in spec:
        load_mapping(spec["runtimeEnvYAML"], "spec.runtimeEnvYAML")
    _validate_cluster(
        spec["rayClusterSpec"], "spec.rayClusterSpec", metadata, k8s_job_mode=mode == "K8sJobMode"
    )
    submitter = spec.get("submitterPodTemplate")
    if submitter:
        _validate_pod_template(submitter, "spec.submitterPodTemplate")


def validate_rayservice(body: dict) -> None:
    """RayService counterpart of ``validate_rayjob`` (no entrypoint, no submitter)."""
    metadata = body.get("metadata") or {}
    spec = body.get("spec") or {}
    _validate_name(metadata.get("name"))
    _validate_labels(metadata.get("labels") or {})
    _require_cluster(spec, "rayClusterConfig")
    if "serveConfigV2" in spec:
        load_mapping(spec["serveConfigV2"], "spec.serveConfigV2")
    _validate_cluster(spec["rayClusterConfig"], "spec.rayClusterConfig", metadata, k8s_job_mode=False)


def _require_cluster(spec: dict, key: str, scope: str = "") -> None:
    """Both kinds must describe their own Ray cluster (``key``: rayClusterSpec, rayClusterConfig)."""
    if not spec.get(key):
        raise ManifestError(
            f"{key} is required{scope}",
            field=f"spec.{key}",
            value=spec.get(key),
            fix=f"describe the head (and worker groups) under spec.{key}",
        )


def _validate_name(name: Any) -> None:
    if not isinstance(name, str) or not is_dns1035_label(name) or len(name) > MAX_RAYJOB_NAME:
        raise ManifestError(
            f"must be a DNS-1035 label of at most {MAX_RAYJOB_NAME} characters (KubeRay appends suffixes)",
            field="metadata.name",
            value=name,
            fix="use kueue_ray.naming.rayjob_name(...) or lower-case letters, digits and '-', starting with a letter",
        )


def _validate_labels(labels: Mapping[str, Any]) -> None:
    for key, what in ((QUEUE_LABEL, "LocalQueue name"), (PRIORITY_CLASS_LABEL, "WorkloadPriorityClass name")):
        value = labels.get(key)
        if value is None:
            continue
        if not isinstance(value, str) or not value or not is_label_value(value):
            raise ManifestError(
                f"{what} is not a valid label value",
                field=f"metadata.labels[{key}]",
                value=value,
                fix=f"use the {what} exactly as it exists in the cluster (<= 63 of [A-Za-z0-9._-])",
            )


def _validate_cluster(cluster: dict, field: str, metadata: Mapping, *, k8s_job_mode: bool) -> None:
    if (
        cluster.get("enableInTreeAutoscaling")
        and (metadata.get("annotations") or {}).get(ELASTIC_JOB_ANNOTATION) != "true"
    ):
        raise ManifestError(
            "Kueue admits a fixed-size cluster; autoscaling needs elastic workload slices",
            field=f"{field}.enableInTreeAutoscaling",
            value=True,
            fix=f'remove enableInTreeAutoscaling, or add the annotation {ELASTIC_JOB_ANNOTATION}: "true"',
        )
    if not cluster.get("headGroupSpec"):
        raise ManifestError(
            "the head group is required",
            field=f"{field}.headGroupSpec",
            value=None,
            fix="add headGroupSpec.template",
        )
    workers = cluster.get("workerGroupSpecs") or []
    limit = MAX_WORKER_GROUPS_K8SJOBMODE if k8s_job_mode else MAX_WORKER_GROUPS
    if len(workers) > limit:
        raise ManifestError(
            f"Kueue allows at most {limit} worker groups here (18 pod sets incl. head"
            + (" and submitter)" if k8s_job_mode else ")"),
            field=f"{field}.workerGroupSpecs",
            value=len(workers),
            fix="merge worker groups" + (" or use submissionMode HTTPMode" if k8s_job_mode else ""),
        )
    seen: set[str] = set()
    for name, path, group in ray_groups(cluster):
        group_field = f"{field}.{path}"
        if path != "headGroupSpec":
            pod_set = name.lower()
            if not name or pod_set == "head":
                raise ManifestError(
                    '"head" is reserved for the head group' if name else "worker group needs a groupName",
                    field=f"{group_field}.groupName",
                    value=name,
                    fix="rename the worker group, e.g. 'workers'",
                )
            if pod_set in seen:
                raise ManifestError(
                    "duplicate worker group name",
                    field=f"{group_field}.groupName",
                    value=name,
                    fix="use unique names",
                )
            seen.add(pod_set)
            _validate_replicas(group, group_field)
        _validate_pod_template(group.get("template"), f"{group_field}.template")


def _validate_replicas(group: Mapping, field: str) -> None:
    values = {}
    for key in ("replicas", "minReplicas", "maxReplicas", "numOfHosts"):
        if key not in group:
            continue
        value = group[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ManifestError(
                "must be a non-negative integer",
                field=f"{field}.{key}",
                value=value,
                fix="use an integer >= 0",
            )
        values[key] = value
    if values.get("minReplicas", 0) > values.get("maxReplicas", values.get("minReplicas", 0)):
        raise ManifestError(
            "minReplicas is above maxReplicas",
            field=f"{field}.minReplicas",
            value=values["minReplicas"],
            fix=f"use minReplicas <= maxReplicas ({values['maxReplicas']})",
        )


def _validate_pod_template(template: Any, field: str) -> None:
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    if not containers:
        raise ManifestError(
            "needs at least one container",
            field=f"{field}.spec.containers",
            value=[],
            fix="add the Ray container",
        )
    init = ((template or {}).get("spec") or {}).get("initContainers") or []
    for kind, items in (("containers", containers), ("initContainers", init)):
        for index, container in enumerate(items):
            path = f"{field}.spec.{kind}[{index}]"
            if not (container or {}).get("image"):
                raise ManifestError(
                    "container has no image",
                    field=f"{path}.image",
                    value=None,
                    fix="set image (or pass image=...)",
                )
            for section in ("requests", "limits"):
                for resource, amount in (((container.get("resources") or {}).get(section)) or {}).items():
                    check_quantity(amount, f"{path}.resources.{section}[{resource}]")
            _validate_not_overcommitted(container.get("resources") or {}, f"{path}.resources")


def overcommit_allowed(resource: str) -> bool:
    """Kubernetes' ``IsOvercommitAllowed``: a native resource (no domain, or a ``kubernetes.io/`` one) but
    hugepages. Any other (``nvidia.com/gpu``) must have a limit equal to its request.

    >>> overcommit_allowed("cpu"), overcommit_allowed("nvidia.com/gpu"), overcommit_allowed("hugepages-2Mi")
    (True, False, False)
    """
    native = "/" not in resource or "kubernetes.io/" in resource
    return native and not resource.startswith("hugepages-")


def _validate_not_overcommitted(resources: Mapping, field: str) -> None:
    """The API server validates the pods KubeRay creates, not the RayJob's templates: a GPU request without
    an equal limit is accepted in the RayJob, admitted by Kueue (holding its quota) and then every head or
    worker pod is refused ("Limit must be set for non overcommitable resources")."""
    limits = resources.get("limits") or {}
    for resource, amount in (resources.get("requests") or {}).items():
        if overcommit_allowed(resource):
            continue
        if resource not in limits:
            raise ManifestError(
                "Kubernetes refuses the pod: an extended resource's request needs an equal limit",
                field=f"{field}.limits[{resource}]",
                value=None,
                fix=f"set limits {resource}: {amount} (or give it under limits only)",
            )
        if parse_quantity(str(amount)) != parse_quantity(str(limits[resource])):
            raise ManifestError(
                f"Kubernetes refuses the pod: an extended resource's request must equal its limit "
                f"({limits[resource]})",
                field=f"{field}.requests[{resource}]",
                value=amount,
                fix=f"set the request and the limit of {resource} to the same amount",
            )
