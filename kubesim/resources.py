"""Every kind kubesim serves, and where its schema and printer columns come from.

Built-in kinds are declared here with the scope, subresources and short names the real API server
publishes, because discovery (and ``kubectl``) depends on them. The custom resources get their
``openAPIV3Schema`` and ``additionalPrinterColumns`` from the real CRD files vendored in ``crds/``
(see its README for their releases), so that validation and ``kubectl get`` output follow upstream
instead of a hand-written copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

CRDS_DIR = Path(__file__).resolve().parent / "crds"
"""The vendored upstream CRDs (Kueue v0.19.2, KubeRay v1.7.0): kubesim's schemas unless told otherwise."""

# The versions we serve for the custom resources (the CRDs also carry older, unserved-by-us versions).
SERVED_VERSIONS = {"ray.io": "v1", "kueue.x-k8s.io": "v1beta2"}


@dataclass
class ResourceType:
    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    subresources: set[str] = field(default_factory=set)
    printer_columns: list[dict] = field(default_factory=list)
    schema: dict | None = None
    list_kind: str = ""

    def __post_init__(self) -> None:
        if not self.list_kind:
            self.list_kind = f"{self.kind}List"

    @property
    def key(self) -> str:
        """How the store names the resource: ``pods``, ``rayjobs.ray.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_kind(self) -> str:
        """The kind as error messages spell it: ``Pod``, ``RayJob.ray.io``."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def custom(self) -> bool:
        """Served from a CustomResourceDefinition on a real cluster (RayJob, ClusterQueue, ...): the API
        server decodes its objects without a scheme, so ``apiVersion`` and ``kind`` are required."""
        return self.group not in BUILTIN_GROUPS

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


BUILTIN_GROUPS = frozenset({"", "batch", "rbac.authorization.k8s.io"})
"""The API groups kubesim serves that a real API server compiles in; every other group is a CRD's."""


def _builtin(group, version, kind, plural, namespaced, *, short=(), categories=(), sub=()) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        short_names=list(short),
        categories=list(categories),
        subresources=set(sub),
    )


def builtin_types() -> list[ResourceType]:
    """The kinds we serve, with scope, subresources and short names as the real API publishes them."""
    rbac = "rbac.authorization.k8s.io"
    kueue = "kueue.x-k8s.io"
    return [
        _builtin("", "v1", "Namespace", "namespaces", False, short=["ns"], sub=["status"]),
        _builtin("", "v1", "Node", "nodes", False, short=["no"], sub=["status"]),
        _builtin("", "v1", "Pod", "pods", True, short=["po"], categories=["all"], sub=["status", "log"]),
        _builtin("", "v1", "Event", "events", True, short=["ev"]),
        _builtin("", "v1", "ServiceAccount", "serviceaccounts", True, short=["sa"]),
        _builtin("", "v1", "Service", "services", True, short=["svc"], categories=["all"], sub=["status"]),
        _builtin("", "v1", "ConfigMap", "configmaps", True, short=["cm"]),
        _builtin("", "v1", "Secret", "secrets", True),
        _builtin("batch", "v1", "Job", "jobs", True, categories=["all"], sub=["status"]),
        _builtin(rbac, "v1", "Role", "roles", True),
        _builtin(rbac, "v1", "RoleBinding", "rolebindings", True),
        _builtin(rbac, "v1", "ClusterRole", "clusterroles", False),
        _builtin(rbac, "v1", "ClusterRoleBinding", "clusterrolebindings", False),
        _builtin("ray.io", "v1", "RayJob", "rayjobs", True, categories=["all"], sub=["status"]),
        _builtin("ray.io", "v1", "RayCluster", "rayclusters", True, categories=["all"], sub=["status"]),
        _builtin("ray.io", "v1", "RayService", "rayservices", True, categories=["all"], sub=["status"]),
        _builtin(
            kueue, "v1beta2", "ResourceFlavor", "resourceflavors", False, short=["flavor", "flavors", "rf"]
        ),
        _builtin(kueue, "v1beta2", "ClusterQueue", "clusterqueues", False, short=["cq"], sub=["status"]),
        _builtin(kueue, "v1beta2", "WorkloadPriorityClass", "workloadpriorityclasses", False, short=["wpc"]),
        _builtin(kueue, "v1beta2", "Cohort", "cohorts", False, short=["co"], sub=["status"]),
        _builtin(kueue, "v1beta2", "AdmissionCheck", "admissionchecks", False, short=["ac"], sub=["status"]),
        _builtin(kueue, "v1beta2", "MultiKueueConfig", "multikueueconfigs", False, short=["mkconf"]),
        _builtin(
            kueue, "v1beta2", "MultiKueueCluster", "multikueueclusters", False, short=["mkc"], sub=["status"]
        ),
        _builtin(
            kueue,
            "v1beta2",
            "LocalQueue",
            "localqueues",
            True,
            short=["queue", "queues", "lq"],
            sub=["status"],
        ),
        _builtin(
            kueue,
            "v1beta2",
            "Workload",
            "workloads",
            True,
            short=["kwl", "kueueworkload", "kueueworkloads"],
            sub=["status"],
        ),
    ]


class Registry:
    """Resolves resource keys, group/versions and kinds to their ``ResourceType``."""

    def __init__(self, crds_dir: str | Path | None = CRDS_DIR) -> None:
        """``crds_dir`` None serves the kinds without schemas (tests of the bare store use that)."""
        self._by_key: dict[str, ResourceType] = {rt.key: rt for rt in builtin_types()}
        if crds_dir is not None:
            self._load_crds(Path(crds_dir))

    def get(self, key: str) -> ResourceType | None:
        return self._by_key.get(key)

    def by_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._by_key.values() if rt.group == group and rt.version == version]

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        for rt in self._by_key.values():
            if rt.api_version == api_version and rt.kind == kind:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return list(self._by_key.values())

    def _load_crds(self, crds_dir: Path) -> None:
        if not crds_dir.is_dir():
            raise FileNotFoundError(f"CRD directory {crds_dir} does not exist")
        for path in sorted(crds_dir.glob("*.y*ml")):
            for doc in _read_crds(str(path.resolve()), path.stat().st_mtime_ns):
                self._attach_crd(doc)

    def _attach_crd(self, crd: dict) -> None:
        """Attach the served version's schema and printer columns to the matching built-in entry.

        A CRD for a kind we do not declare is ignored: kubesim only serves kinds whose controllers it
        emulates, and an unknown CRD would be served without anything behind it.
        """
        spec = crd["spec"]
        group = spec["group"]
        rt = self._by_key.get(f"{spec['names']['plural']}.{group}")
        if rt is None:
            return
        wanted = SERVED_VERSIONS.get(group, rt.version)
        for version in spec.get("versions", []):
            if version.get("name") != wanted:
                continue
            rt.schema = (version.get("schema") or {}).get("openAPIV3Schema")
            rt.printer_columns = list(version.get("additionalPrinterColumns") or [])
            rt.subresources = {name for name in (version.get("subresources") or {})}
            rt.categories = list(spec["names"].get("categories") or [])
            rt.short_names = list(spec["names"].get("shortNames") or [])
            rt.list_kind = spec["names"].get("listKind") or rt.list_kind


@lru_cache(maxsize=64)
def _read_crds(path: str, mtime_ns: int) -> tuple[dict, ...]:
    """Parse a CRD file once per process: the Workload CRD alone is ~19k lines, and tests build many
    registries. Callers treat the result (schemas included) as read-only."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as fh:
        return tuple(
            d for d in yaml.load_all(fh, Loader=loader) if d and d.get("kind") == "CustomResourceDefinition"
        )
