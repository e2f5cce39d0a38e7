"""The part of Kueue's manager configuration kubesim honours: ``waitForPodsReady``, which job kinds
``integrations.frameworks`` enables, and which namespaces ``managedJobsNamespaceSelector`` selects.

Kueue v0.19 reads a ``Configuration`` (``config.kueue.x-k8s.io/v1beta2``, the ``controller_manager_config.yaml``
of its ConfigMap). ``waitForPodsReady`` is on by default there: an admitted Workload whose pods are not all
ready within ``timeout`` (30 min) is evicted (``PodsReadyTimeout``) and requeued after a backoff of
``backoffBaseSeconds * 2^(n-1)`` (60 s, 120 s, ...) capped at ``backoffMaxSeconds`` (3600 s), without limit
unless ``backoffLimitCount`` is set (then it is deactivated). ``integrations.frameworks`` lists the job
kinds Kueue manages; the shipped config lists ``ray.io/rayjob``, ``ray.io/raycluster`` and
``ray.io/rayservice`` and ``batch/job`` among others, and so does kubesim when the field is absent. ``kubesim serve
--kueue-config FILE`` takes the same YAML; only these fields are read, every duration is simulated time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DEFAULT_TIMEOUT = 30 * 60.0
DEFAULT_BACKOFF_BASE = 60.0
DEFAULT_BACKOFF_MAX = 3600.0
SHIPPED_FRAMEWORKS = frozenset({"ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice", "batch/job"})
"""The integrations in Kueue v0.19.2's shipped ``controller_manager_config.yaml`` that kubesim serves."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server gives every Namespace, its name: what the default selector below reads."""
KUEUE_NAMESPACE = "kueue-system"


def namespaces_not_in(*names: str) -> dict:
    """A ``metav1.LabelSelector`` for every namespace but ``names``: Kueue's default
    ``managedJobsNamespaceSelector`` is ``namespaces_not_in("kube-system", <Kueue's namespace>)``."""
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": list(names)}]}


DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR = namespaces_not_in("kube-system", KUEUE_NAMESPACE)
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")
DEFAULT_MULTIKUEUE_ORIGIN = "multikueue"
DEFAULT_WORKER_LOST_TIMEOUT = 15 * 60.0
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True)
class KueueConfig:
    pods_ready_timeout: float = DEFAULT_TIMEOUT
    """Simulated seconds an admitted Workload may wait for its pods (``waitForPodsReady.timeout``)."""
    recovery_timeout: float | None = None
    """``waitForPodsReady.recoveryTimeout``: after a pod failed (``WaitForRecovery``); None = ``timeout``."""
    backoff_base: float = DEFAULT_BACKOFF_BASE
    """``requeuingStrategy.backoffBaseSeconds``."""
    backoff_max: float = DEFAULT_BACKOFF_MAX
    """``requeuingStrategy.backoffMaxSeconds``."""
    backoff_limit_count: int | None = None
    """``requeuingStrategy.backoffLimitCount``: None requeues forever (Kueue's default)."""
    frameworks: frozenset[str] = field(default=SHIPPED_FRAMEWORKS)
    """``integrations.frameworks``: the job kinds Kueue manages."""
    managed_jobs_namespace_selector: dict = field(
        default_factory=lambda: dict(DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR)
    )
    """``managedJobsNamespaceSelector``: the namespaces whose jobs Kueue manages and labels for a
    ``default`` LocalQueue (default: all but ``kube-system`` and Kueue's own ``namespace``)."""
    namespace: str = KUEUE_NAMESPACE
    """``namespace``: where Kueue runs, and where MultiKueue reads its clusters' kubeconfig Secrets."""
    multikueue_origin: str = DEFAULT_MULTIKUEUE_ORIGIN
    """``multiKueue.origin``: the ``kueue.x-k8s.io/multikueue-origin`` value of the copies it makes."""
    worker_lost_timeout: float = DEFAULT_WORKER_LOST_TIMEOUT
    """``multiKueue.workerLostTimeout`` (simulated seconds): how long an admitting worker may be
    unreachable before its Workload is sent back for another dispatch."""

    def requeue_backoff(self, count: int) -> float:
        """Seconds before the ``count``-th PodsReadyTimeout eviction may be requeued: base * 2^(count-1),
        capped (Kueue adds a jitter of 0.01 %, which kubesim leaves out)."""
        return min(self.backoff_max, self.backoff_base * 2 ** max(0, count - 1))

    @property
    def effective_recovery_timeout(self) -> float:
        return self.pods_ready_timeout if self.recovery_timeout is None else self.recovery_timeout

    @classmethod
    def from_configuration(cls, document: dict | None) -> KueueConfig:
        """From a Kueue ``Configuration`` document (dict); missing fields take Kueue's defaults."""
        pods_ready = (document or {}).get("waitForPodsReady") or {}
        strategy = pods_ready.get("requeuingStrategy") or {}
        timeout = parse_duration(pods_ready.get("timeout")) or DEFAULT_TIMEOUT
        recovery = parse_duration(pods_ready.get("recoveryTimeout"))
        limit = strategy.get("backoffLimitCount")
        frameworks = ((document or {}).get("integrations") or {}).get("frameworks")
        selector = (document or {}).get("managedJobsNamespaceSelector")
        multikueue = (document or {}).get("multiKueue") or {}
        if selector is None:
            selector = namespaces_not_in("kube-system", (document or {}).get("namespace") or KUEUE_NAMESPACE)
        return cls(
            pods_ready_timeout=timeout,
            recovery_timeout=recovery,
            backoff_base=float(strategy.get("backoffBaseSeconds") or DEFAULT_BACKOFF_BASE),
            backoff_max=float(strategy.get("backoffMaxSeconds") or DEFAULT_BACKOFF_MAX),
            backoff_limit_count=None if limit is None else int(limit),
            frameworks=SHIPPED_FRAMEWORKS if frameworks is None else frozenset(frameworks),
            managed_jobs_namespace_selector=selector,
            namespace=(document or {}).get("namespace") or KUEUE_NAMESPACE,
            multikueue_origin=multikueue.get("origin") or DEFAULT_MULTIKUEUE_ORIGIN,
            worker_lost_timeout=parse_duration(multikueue.get("workerLostTimeout"))
            or DEFAULT_WORKER_LOST_TIMEOUT,
        )

    @classmethod
    def load(cls, path: str | Path) -> KueueConfig:
        document = yaml.safe_load(Path(path).read_text()) or {}
        if document.get("kind") not in (None, "Configuration"):
            raise ValueError(f"{path}: expected a Kueue Configuration, got kind {document.get('kind')!r}")
        return cls.from_configuration(document)


def parse_duration(value: str | int | float | None) -> float | None:
    """A Go ``time.Duration`` string (``30m``, ``1h30m``, ``90s``) or a number of seconds; None if unset."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"invalid duration {value!r}: use Go's form, e.g. 30m, 1h30m, 90s")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)
