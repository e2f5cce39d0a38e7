"""Build and size RayJob / RayService bodies before anything is sent to the cluster.

A body is rendered from a template (``kueue_ray.templates``), the operator's overrides are applied (image,
runtime env, replicas, resources, annotations, Kueue's queue and priority labels, the Airflow identity),
and it is checked (``kueue_ray.validation``). ``total_request`` reproduces how Kueue turns a RayJob into
Workload pod sets (head, each worker group, K8sJobMode's submitter), so the operator can tell "will never
fit" before Kueue leaves the job pending forever.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any, Literal

from kueue_ray.capacity import Shortfall, explain_capacity_shortfall
from kueue_ray.errors import ManifestError
from kueue_ray.naming import (
    CLUSTER_CONFIG_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    AirflowIdentity,
)
from kueue_ray.quantity import (
    add_resources,
    format_resources,
    max_resources,
    parse_resources,
    scale_resources,
)
from kueue_ray.templates import (
    TEMPLATES_DIR,
    SearchPath,
    plain,
    render_template,
    resolve_template,
    template_folders,
    to_yaml,
)
from kueue_ray.validation import (
    check_quantity,
    load_mapping,
    ray_groups,
    validate_rayjob,
    validate_rayservice,
)

__all__ = [
    "AirflowIdentity",
    "BuiltRayJob",
    "Shortfall",
    "TEMPLATES_DIR",
    "build",
    "build_rayjob",
    "build_rayservice",
    "explain_capacity_shortfall",
    "pod_sets",
    "render_template",
    "resolve_template",
    "template_folders",
    "total_request",
    "validate_rayjob",
    "validate_rayservice",
]


SUBMITTER_REQUESTS = {"cpu": Decimal("0.5"), "memory": Decimal(200 * 2**20)}
"""KubeRay's default ray-job-submitter container requests (500m / 200Mi), as Kueue counts them."""
AUTOSCALER_REQUESTS = {"cpu": Decimal("0.5"), "memory": Decimal(512 * 2**20)}
REDIS_CLEANUP_REQUESTS = {"cpu": Decimal("0.2"), "memory": Decimal(256 * 2**20)}
RESOURCE_ORDER = ("cpu", "memory", "nvidia.com/gpu")


@dataclass(frozen=True)
class BuiltRayJob:
    """A ready-to-create body (RayJob, or RayService from ``build_rayservice``) and its quota needs."""

    body: dict
    name: str
    total_request: dict[str, str]
    """What Kueue's Workload will request in total, e.g. {"cpu": "2500m", "memory": "8209715200"}."""
    pod_sets: list[dict]
    """Kueue's pod sets: [{"name": "head", "count": 1, "requests": {"cpu": "2", ...}}, ...] (per pod)."""


# ---------------------------------------------------------------------------------------------- building


def build(
    kind: Literal["RayJob", "RayService"],
    template: str | os.PathLike | Mapping,
    *,
    name: str,
    namespace: str,
    queue: str,
    priority: str,
    identity: AirflowIdentity,
    values: Mapping[str, Any] | None = None,
    entrypoint: str | None = None,
    image: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    worker_replicas: int | Mapping[str, int] | None = None,
    resources: Mapping[str, Mapping[str, str | int]] | None = None,
    annotations: Mapping[str, str] | None = None,
    template_searchpath: SearchPath = None,
) -> BuiltRayJob:
    """Render, override, label and validate a ``kind`` (``RayJob`` or ``RayService``: ``build_rayjob``,
    ``build_rayservice``); raise ManifestError on any problem.

    Always: Kueue's queue and priority labels, our managed-by / identity labels and the full identity
    annotations (used for ownership checks); ``image``, ``worker_replicas`` and ``resources`` set in its
    Ray cluster. A RayJob also: ``spec.suspend: true`` (Kueue admits by unsuspending),
    ``shutdownAfterJobFinishes: true`` (Kueue requires it; a template saying false is an error),
    ``entrypoint``, ``runtime_env`` merged into ``runtimeEnvYAML`` and ``image`` in its submitter. A
    RayService (serving): ``runtime_env`` merged into every application of ``serveConfigV2``, and the
    digest of its cluster config (``cluster_config_digest``); ``total_request`` counts the head and worker
    groups.
    """
    body = render_template(
        template, values, template_searchpath, implicit={"name": name, "namespace": namespace}
    )
    _expect_kind(body, kind)
    spec = body.setdefault("spec", {})
    if kind == "RayJob":
        _rayjob_spec(spec, entrypoint, runtime_env)
    elif entrypoint is not None:
        raise ManifestError(
            "only a RayJob has an entrypoint", field="entrypoint", value=entrypoint, fix="omit it"
        )
    cluster_field = "rayClusterSpec" if kind == "RayJob" else "rayClusterConfig"
    cluster = spec.get(cluster_field)
    _apply_common(
        body, cluster, f"spec.{cluster_field}", name, namespace, queue, priority, identity, annotations
    )
    if kind == "RayService":
        _serve_runtime_env(spec, runtime_env)
    if cluster is not None:
        if image is not None:
            _set_image(cluster, image)
            submitter = spec.get("submitterPodTemplate") if kind == "RayJob" else None
            if submitter:
                _ray_container(submitter, "spec.submitterPodTemplate")["image"] = image
        _apply_replicas(cluster, worker_replicas)
        _apply_resources(cluster, resources)
    if kind == "RayJob":
        validate_rayjob(body)
    else:
        validate_rayservice(body)
        body["metadata"]["annotations"][CLUSTER_CONFIG_ANNOTATION] = cluster_config_digest(cluster)
    sets = pod_sets(body)
    return BuiltRayJob(body=body, name=name, total_request=_total(sets), pod_sets=sets)


build_rayjob = partial(build, "RayJob")
"""``build`` a RayJob (``SubmitRayJobOperator``)."""
build_rayservice = partial(build, "RayService")
"""``build`` a RayService (``DeployRayServiceOperator``)."""


def _rayjob_spec(spec: dict, entrypoint: str | None, runtime_env: Mapping[str, Any] | None) -> None:
    """What a RayJob's spec always says (Kueue's terms) and the operator's ``entrypoint`` and ``runtime_env``."""
    if spec.get("shutdownAfterJobFinishes") is False:
        raise ManifestError(
            "Kueue only manages RayJobs that delete their cluster after finishing",
            field="spec.shutdownAfterJobFinishes",
            value=False,
            fix="remove the field or set it to true",
        )
    spec["shutdownAfterJobFinishes"] = True
    spec["suspend"] = True
    if entrypoint is not None:
        spec["entrypoint"] = entrypoint
    if runtime_env is not None:
        spec["runtimeEnvYAML"] = _merge_runtime_env(spec.get("runtimeEnvYAML"), runtime_env)


def _serve_runtime_env(spec: dict, runtime_env: Mapping[str, Any] | None) -> None:
    """The operator's ``runtime_env`` merged into every application of a RayService's ``serveConfigV2``."""
    if runtime_env is None or not spec.get("serveConfigV2"):
        return
    serve = load_mapping(spec["serveConfigV2"], "spec.serveConfigV2")
    for app in serve.get("applications") or []:
        app["runtime_env"] = _deep_merge(app.get("runtime_env") or {}, runtime_env)
    spec["serveConfigV2"] = to_yaml(serve)


def cluster_config_digest(cluster_config: Mapping[str, Any] | None) -> str:
    """What decides whether KubeRay brings up a new Ray cluster for a RayService: its ``rayClusterConfig``
    without ``suspend`` (Kueue's to set) and the worker groups' ``replicas`` (an autoscaler's), the same
    fields KubeRay leaves out of the hash it compares clusters by. Two configs with equal digests are served
    by the same cluster; a different digest means a new cluster and a traffic switch."""
    config = copy.deepcopy(dict(cluster_config or {}))
    config.pop("suspend", None)
    for group in config.get("workerGroupSpecs") or ():
        group.pop("replicas", None)
        (group.get("scaleStrategy") or {}).pop("workersToDelete", None)
    return hashlib.sha256(json.dumps(plain(config), sort_keys=True).encode()).hexdigest()[:16]


def _expect_kind(body: dict, kind: str) -> None:
    if body.get("kind") != kind or not str(body.get("apiVersion", "")).startswith("ray.io/"):
        raise ManifestError(
            f"expected a ray.io/v1 {kind}",
            field="kind",
            value=f"{body.get('apiVersion')}/{body.get('kind')}",
            fix=f"use a {kind} template (apiVersion: ray.io/v1, kind: {kind})",
        )


def _apply_common(
    body: dict,
    cluster: dict | None,
    cluster_field: str,
    name: str,
    namespace: str,
    queue: str,
    priority: str,
    identity: AirflowIdentity,
    annotations: Mapping[str, str] | None,
) -> None:
    metadata = body.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata["name"] = name
    metadata["namespace"] = namespace
    labels = metadata.get("labels") or {}
    labels.update(identity.labels())
    labels[QUEUE_LABEL] = queue
    labels[PRIORITY_CLASS_LABEL] = priority
    metadata["labels"] = labels
    merged = dict(metadata.get("annotations") or {})
    merged.update({key: str(value) for key, value in (annotations or {}).items()})
    merged.update(identity.annotations())
    metadata["annotations"] = merged
    if cluster is not None and not isinstance(cluster, dict):
        raise ManifestError("must be a mapping", field=cluster_field, value=cluster, fix="check the template")


def _merge_runtime_env(existing: Any, override: Mapping[str, Any]) -> str:
    base = load_mapping(existing, "spec.runtimeEnvYAML") if existing else {}
    if not isinstance(override, Mapping):
        raise ManifestError(
            "runtime_env must be a mapping",
            field="runtime_env",
            value=override,
            fix='pass e.g. {"pip": [...]}',
        )
    return to_yaml(_deep_merge(base, override))


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict:
    """Nested mappings merge key by key; any other value (lists included) is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _ray_container(pod_template: dict, field: str) -> dict:
    """KubeRay runs Ray in the first container of a pod template."""
    containers = ((pod_template or {}).get("spec") or {}).get("containers") or []
    if not containers:
        raise ManifestError(
            "pod template has no containers",
            field=f"{field}.spec.containers",
            value=[],
            fix="add the Ray container",
        )
    return containers[0]


def _set_image(cluster: dict, image: str) -> None:
    for _, path, group in ray_groups(cluster):
        _ray_container(group.get("template") or {}, f"rayClusterSpec.{path}.template")["image"] = image


def _apply_replicas(cluster: dict, worker_replicas: int | Mapping[str, int] | None) -> None:
    if worker_replicas is None:
        return
    workers = cluster.get("workerGroupSpecs") or []
    names = [str(group.get("groupName")) for group in workers]
    if isinstance(worker_replicas, Mapping):
        unknown = sorted(set(worker_replicas) - set(names))
        if unknown:
            raise ManifestError(
                "unknown worker group",
                field="worker_replicas",
                value=unknown,
                fix=f"use the template's worker groups: {names}",
            )
        wanted = dict(worker_replicas)
    else:
        if not workers:
            raise ManifestError(
                "the template has no worker groups",
                field="worker_replicas",
                value=worker_replicas,
                fix="omit it",
            )
        wanted = dict.fromkeys(names, worker_replicas)
    for group in workers:
        count = wanted.get(str(group.get("groupName")))
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ManifestError(
                "replicas must be a non-negative integer",
                field=f"worker_replicas.{group.get('groupName')}",
                value=count,
                fix="pass an integer >= 0",
            )
        group["replicas"] = count
        group["minReplicas"] = min(int(group.get("minReplicas", count)), count)
        group["maxReplicas"] = max(int(group.get("maxReplicas", count)), count)


def _apply_resources(cluster: dict, resources: Mapping[str, Mapping[str, str | int]] | None) -> None:
    """Set requests AND limits of the named groups' Ray containers: Kueue counts requests, and equal
    limits keep the pods Guaranteed and the Workload size honest."""
    if not resources:
        return
    groups = {name: (path, group) for name, path, group in ray_groups(cluster)}
    for name, amounts in resources.items():
        if name not in groups:
            raise ManifestError(
                "unknown group", field=f"resources.{name}", value=name, fix=f"use one of {sorted(groups)}"
            )
        path, group = groups[name]
        container = _ray_container(group.get("template") or {}, f"rayClusterSpec.{path}.template")
        spec = container.setdefault("resources", {})
        for resource, amount in amounts.items():
            check_quantity(amount, f"resources.{name}.{resource}")
            spec.setdefault("requests", {})[resource] = str(amount)
            spec.setdefault("limits", {})[resource] = str(amount)


# ------------------------------------------------------------------------------------------ quota sizing


def pod_sets(body: dict) -> list[dict]:
    """Kueue's pod sets for a RayJob (or RayService cluster): name, pod count, requests per pod.

    head: 1 pod (+ autoscaler sidecar with in-tree autoscaling, + submitter sidecar in SidecarMode,
    max-merged with the Redis cleanup job when GCS fault tolerance is on); each worker group:
    replicas (0 when missing, the CRD default) x numOfHosts; submitter (K8sJobMode only, last): submitterPodTemplate's
    requests or KubeRay's default 500m CPU / 200Mi. Limits stand in for missing requests.
    """
    spec = body.get("spec") or {}
    is_job = body.get("kind") != "RayService"
    cluster = (spec.get("rayClusterSpec") if is_job else spec.get("rayClusterConfig")) or {}
    mode = spec.get("submissionMode", "K8sJobMode") if is_job else None
    head = pod_requests(((cluster.get("headGroupSpec") or {}).get("template")) or {})
    if cluster.get("enableInTreeAutoscaling"):
        options = (cluster.get("autoscalerOptions") or {}).get("resources")
        head = add_resources(head, _container_requests(options) if options else AUTOSCALER_REQUESTS)
    if mode == "SidecarMode":
        head = add_resources(head, SUBMITTER_REQUESTS)
    if cluster.get("gcsFaultToleranceOptions"):
        head = max_resources(head, REDIS_CLEANUP_REQUESTS)
    sets = [_pod_set("head", 1, head)]
    for group in cluster.get("workerGroupSpecs") or []:
        count = int(group.get("replicas") or 0)  # the CRD defaults a missing replicas to 0
        hosts = int(group.get("numOfHosts", 1) or 1)
        if hosts > 1:
            count *= hosts
        sets.append(
            _pod_set(
                str(group.get("groupName", "")).lower(), count, pod_requests(group.get("template") or {})
            )
        )
    if mode == "K8sJobMode":
        template = spec.get("submitterPodTemplate")
        sets.append(
            _pod_set("submitter", 1, pod_requests(template) if template else dict(SUBMITTER_REQUESTS))
        )
    return sets


def total_request(body: dict) -> dict[str, str]:
    """Total quota the Workload will request: sum over pod sets of count x per-pod requests."""
    return _total(pod_sets(body))


def _total(sets: list[dict]) -> dict[str, str]:
    totals = add_resources(*(scale_resources(parse_resources(s["requests"]), s["count"]) for s in sets))
    return format_resources(totals, order=RESOURCE_ORDER)


def _pod_set(name: str, count: int, requests: Mapping[str, Decimal]) -> dict:
    return {"name": name, "count": count, "requests": format_resources(requests, order=RESOURCE_ORDER)}


def pod_requests(template: Mapping) -> dict[str, Decimal]:
    """A pod's effective requests: max(sum of containers, each init container) + overhead."""
    spec = template.get("spec") or {}
    main = add_resources(*(_container_requests(c.get("resources")) for c in spec.get("containers") or []))
    init = [_container_requests(c.get("resources")) for c in spec.get("initContainers") or []]
    return add_resources(max_resources(main, *init), parse_resources(spec.get("overhead")))


def _container_requests(resources: Mapping | None) -> dict[str, Decimal]:
    resources = resources or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return parse_resources(merged)
