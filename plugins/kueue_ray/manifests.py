"""Build, check and size RayJob / RayService bodies before anything is sent to the cluster.

Templates are Jinja2 files rendered so that user values can never change the YAML structure: every
``{{ expression }}`` is emitted as a quoted YAML scalar (JSON), then the text is parsed with
``yaml.safe_load``. A DAG param such as ``"x\\nkind: Pod"`` therefore stays one string. A consequence for
template authors: an expression must be a whole YAML value (``key: {{ value }}``); build composite
strings inside the expression (``{{ "s3://bucket/" ~ run }}``). The ``to_yaml`` filter turns a mapping
into YAML text, for ``runtimeEnvYAML`` and ``serveConfigV2``.

``total_request`` reproduces how Kueue turns a RayJob into Workload pod sets (head, each worker group,
K8sJobMode's submitter), so the operator can tell "will never fit" before Kueue leaves the job pending
forever.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import jinja2
import yaml

from kueue_ray.capacity import Shortfall, explain_capacity_shortfall
from kueue_ray.errors import ManifestError
from kueue_ray.naming import (
    CLUSTER_CONFIG_ANNOTATION,
    ELASTIC_JOB_ANNOTATION,
    MAX_RAYJOB_NAME,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    AirflowIdentity,
    is_dns1035_label,
    is_label_value,
)
from kueue_ray.quantity import (
    QuantityError,
    add_resources,
    format_resources,
    max_resources,
    parse_quantity,
    parse_resources,
    scale_resources,
)

__all__ = [
    "AirflowIdentity",
    "BuiltRayJob",
    "Shortfall",
    "TEMPLATES_DIR",
    "build_rayjob",
    "build_rayservice",
    "explain_capacity_shortfall",
    "pod_sets",
    "render_template",
    "total_request",
    "validate_rayjob",
    "validate_rayservice",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = REPO_ROOT / "include" / "manifests" / "rayjobs"

SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "SidecarMode")
"""KubeRay's submission modes that work under Kueue from Airflow (InteractiveMode is refused: see
``validate_rayjob``)."""
MAX_WORKER_GROUPS_K8SJOBMODE = 16
"""Kueue allows 18 pod sets; head + submitter leave 16 for worker groups."""
MAX_WORKER_GROUPS = 17
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


# --------------------------------------------------------------------------------------------- rendering


def _plain(value: Any) -> Any:
    """Walk a rendered value; an undefined variable nested in a dict/list literal raises here, naming it."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises UndefinedError with the variable's name
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _yaml_scalar(value: Any) -> str:
    """Jinja ``finalize``: every expression becomes a quoted scalar or a JSON flow collection."""
    value = _plain(value)
    try:
        return json.dumps(value)
    except TypeError:
        return json.dumps(str(value))


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(_plain(value), sort_keys=False, default_flow_style=False)


_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined,
    finalize=_yaml_scalar,
    autoescape=False,
    keep_trailing_newline=True,
)
_ENV.filters["to_yaml"] = _to_yaml


SearchPath = str | os.PathLike | Sequence[str | os.PathLike] | None
"""Folders to look for templates in, as Airflow's ``template_searchpath`` is given: one or a list."""


def template_folders(searchpath: SearchPath = None) -> list[Path]:
    """The folders a template name is looked up in, in order: ``searchpath`` (a user's project folders),
    then the templates shipped with this project (``TEMPLATES_DIR``)."""
    if searchpath is None:
        given: list = []
    elif isinstance(searchpath, str | os.PathLike):
        given = [searchpath]
    else:
        given = list(searchpath)
    folders = [Path(folder) for folder in given]
    return folders + ([TEMPLATES_DIR] if TEMPLATES_DIR not in folders else [])


def resolve_template(template: str | os.PathLike, searchpath: SearchPath = None) -> Path:
    """Find a template: an absolute path, or a name (".yaml.j2" may be omitted) or relative path looked up
    in each folder of ``template_folders(searchpath)`` and last in the working directory."""
    path = Path(template)
    folders = template_folders(searchpath)
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [c for folder in folders for c in (folder / path, folder / f"{path}.yaml.j2")] + [path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    available = sorted({p.name for folder in folders for p in folder.glob("*.yaml.j2")})
    raise ManifestError(
        f"template not found in {[str(folder) for folder in folders]} nor as a path",
        field="template",
        value=str(template),
        fix=(
            f"use one of {available}, a path to a .yaml.j2 file, or add the folder holding "
            f"{path.name if path.name.endswith('.yaml.j2') else f'{path.name}.yaml.j2'} to the operator's "
            "template_searchpath (or the DAG's)"
        ),
    )


def render_template(
    template: str | os.PathLike | Mapping,
    values: Mapping[str, Any] | None = None,
    searchpath: SearchPath = None,
) -> dict:
    """Render a template file (found by ``resolve_template``) or copy a ready dict into a manifest dict."""
    if isinstance(template, Mapping):
        return copy.deepcopy(dict(template))
    path = resolve_template(template, searchpath)
    try:
        text = _ENV.from_string(path.read_text()).render(**dict(values or {}))
    except jinja2.UndefinedError as exc:
        raise ManifestError(
            f"template {path.name} needs a value: {exc.message}",
            field="values",
            value=sorted((values or {}).keys()),
            fix="pass the missing variable in values={...}",
        ) from exc
    except jinja2.TemplateError as exc:
        raise ManifestError(
            f"template {path.name} does not render: {exc}",
            field="template",
            value=str(template),
            fix="fix the Jinja syntax",
        ) from exc
    try:
        body = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(
            f"template {path.name} renders invalid YAML: {exc}",
            field="template",
            value=str(template),
            fix="use every {{ expression }} as a whole YAML value (key: {{ value }})",
        ) from exc
    if not isinstance(body, dict):
        raise ManifestError(
            "template does not render to a mapping",
            field="template",
            value=str(template),
            fix="check the file",
        )
    return body


# ---------------------------------------------------------------------------------------------- building


def build_rayjob(
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
    """Render, override, label and validate a RayJob; raise ManifestError on any problem.

    Always: ``spec.suspend: true`` (Kueue admits by unsuspending), ``shutdownAfterJobFinishes: true``
    (Kueue requires it; a template saying false is an error), Kueue's queue and priority labels, our
    managed-by / identity labels and the full identity annotations (used for ownership checks).
    """
    body = render_template(
        template, {"name": name, "namespace": namespace, **dict(values or {})}, template_searchpath
    )
    _expect_kind(body, "RayJob")
    spec = body.setdefault("spec", {})
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
    cluster = spec.get("rayClusterSpec")
    _apply_common(
        body, cluster, "spec.rayClusterSpec", name, namespace, queue, priority, identity, annotations
    )
    if cluster is not None:
        if image is not None:
            _set_image(cluster, image)
            submitter = spec.get("submitterPodTemplate")
            if submitter:
                _ray_container(submitter, "spec.submitterPodTemplate")["image"] = image
        _apply_replicas(cluster, worker_replicas)
        _apply_resources(cluster, resources)
    validate_rayjob(body)
    sets = pod_sets(body)
    return BuiltRayJob(body=body, name=name, total_request=_total(sets), pod_sets=sets)


def build_rayservice(
    template: str | os.PathLike | Mapping,
    *,
    name: str,
    namespace: str,
    queue: str,
    priority: str,
    identity: AirflowIdentity,
    values: Mapping[str, Any] | None = None,
    image: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    worker_replicas: int | Mapping[str, int] | None = None,
    resources: Mapping[str, Mapping[str, str | int]] | None = None,
    annotations: Mapping[str, str] | None = None,
    template_searchpath: SearchPath = None,
) -> BuiltRayJob:
    """Like ``build_rayjob`` for a Kueue-managed RayService (serving); ``runtime_env`` is merged into
    every application of ``serveConfigV2``. ``total_request`` counts the head and worker groups."""
    body = render_template(
        template, {"name": name, "namespace": namespace, **dict(values or {})}, template_searchpath
    )
    _expect_kind(body, "RayService")
    spec = body.setdefault("spec", {})
    cluster = spec.get("rayClusterConfig")
    _apply_common(
        body, cluster, "spec.rayClusterConfig", name, namespace, queue, priority, identity, annotations
    )
    if runtime_env is not None and spec.get("serveConfigV2"):
        serve = _load_mapping(spec["serveConfigV2"], "spec.serveConfigV2")
        for app in serve.get("applications") or []:
            app["runtime_env"] = _deep_merge(app.get("runtime_env") or {}, runtime_env)
        spec["serveConfigV2"] = _to_yaml(serve)
    if cluster is not None:
        if image is not None:
            _set_image(cluster, image)
        _apply_replicas(cluster, worker_replicas)
        _apply_resources(cluster, resources)
    validate_rayservice(body)
    body["metadata"]["annotations"][CLUSTER_CONFIG_ANNOTATION] = cluster_config_digest(cluster)
    sets = pod_sets(body)
    return BuiltRayJob(body=body, name=name, total_request=_total(sets), pod_sets=sets)


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
    return hashlib.sha256(json.dumps(_plain(config), sort_keys=True).encode()).hexdigest()[:16]


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
    base = _load_mapping(existing, "spec.runtimeEnvYAML") if existing else {}
    if not isinstance(override, Mapping):
        raise ManifestError(
            "runtime_env must be a mapping",
            field="runtime_env",
            value=override,
            fix='pass e.g. {"pip": [...]}',
        )
    return _to_yaml(_deep_merge(base, override))


def _load_mapping(text: Any, field: str) -> dict:
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


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict:
    """Nested mappings merge key by key; any other value (lists included) is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _groups(cluster: dict) -> list[tuple[str, str, dict]]:
    """(pod set name, field path, group spec) for the head and each worker group."""
    groups = [("head", "headGroupSpec", cluster.get("headGroupSpec") or {})]
    for index, group in enumerate(cluster.get("workerGroupSpecs") or []):
        groups.append((str(group.get("groupName", "")), f"workerGroupSpecs[{index}]", group))
    return groups


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
    for _, path, group in _groups(cluster):
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
    groups = {name: (path, group) for name, path, group in _groups(cluster)}
    for name, amounts in resources.items():
        if name not in groups:
            raise ManifestError(
                "unknown group", field=f"resources.{name}", value=name, fix=f"use one of {sorted(groups)}"
            )
        path, group = groups[name]
        container = _ray_container(group.get("template") or {}, f"rayClusterSpec.{path}.template")
        spec = container.setdefault("resources", {})
        for resource, amount in amounts.items():
            _check_quantity(amount, f"resources.{name}.{resource}")
            spec.setdefault("requests", {})[resource] = str(amount)
            spec.setdefault("limits", {})[resource] = str(amount)


def _check_quantity(amount: Any, field: str) -> Decimal:
    try:
        value = parse_quantity(amount)
    except QuantityError as exc:
        raise ManifestError(
            str(exc), field=field, value=amount, fix="use a quantity such as 500m, 2, 8G or 200Mi"
        ) from exc
    if value < 0:
        raise ManifestError("must not be negative", field=field, value=amount, fix="use a quantity >= 0")
    return value


# -------------------------------------------------------------------------------------------- validation


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
    if not spec.get("rayClusterSpec"):
        raise ManifestError(
            "rayClusterSpec is required for Kueue-managed jobs",
            field="spec.rayClusterSpec",
            value=spec.get("rayClusterSpec"),
            fix="describe the head (and worker groups) under spec.rayClusterSpec",
        )
    if spec.get("shutdownAfterJobFinishes") is not True:
        raise ManifestError(
            "Kueue only manages RayJobs that delete their cluster after finishing",
            field="spec.shutdownAfterJobFinishes",
            value=spec.get("shutdownAfterJobFinishes"),
            fix="set spec.shutdownAfterJobFinishes: true",
        )
    if "runtimeEnvYAML" in spec:
        _load_mapping(spec["runtimeEnvYAML"], "spec.runtimeEnvYAML")
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
    if not spec.get("rayClusterConfig"):
        raise ManifestError(
            "rayClusterConfig is required",
            field="spec.rayClusterConfig",
            value=spec.get("rayClusterConfig"),
            fix="describe the head (and worker groups) under spec.rayClusterConfig",
        )
    if "serveConfigV2" in spec:
        _load_mapping(spec["serveConfigV2"], "spec.serveConfigV2")
    _validate_cluster(spec["rayClusterConfig"], "spec.rayClusterConfig", metadata, k8s_job_mode=False)


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
    for name, path, group in _groups(cluster):
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
                    _check_quantity(amount, f"{path}.resources.{section}[{resource}]")


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
    head = _pod_requests(((cluster.get("headGroupSpec") or {}).get("template")) or {})
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
                str(group.get("groupName", "")).lower(), count, _pod_requests(group.get("template") or {})
            )
        )
    if mode == "K8sJobMode":
        template = spec.get("submitterPodTemplate")
        sets.append(
            _pod_set("submitter", 1, _pod_requests(template) if template else dict(SUBMITTER_REQUESTS))
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


def _pod_requests(template: Mapping) -> dict[str, Decimal]:
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
