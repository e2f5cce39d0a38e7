"""MultiKueue's connections to its worker clusters, and the ``Active`` conditions they decide.

Kueue v0.19.2's ``clustersReconciler`` (``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``)
loads each MultiKueueCluster's kubeconfig (a Secret's ``kubeconfig`` key in Kueue's namespace, or a file
for ``locationType: Path``), refuses an unsafe one (``validateKubeconfig``), connects, and writes the
cluster's ``Active`` condition; the ``ACReconciler`` (``admissioncheck.go``) then marks each MultiKueue
AdmissionCheck ``Active`` by how many of its MultiKueueConfig's clusters are. The rules are pure; the
controller (``kubesim.multikueue.controller``) applies them.

"Connecting" is finding the kubeconfig's server among the API servers this process serves
(``Cluster.reachable``): kubesim's clusters share one process, and the connection is the worker's store.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

MULTIKUEUE_CLUSTER_KEY = "multikueueclusters.kueue.x-k8s.io"
MULTIKUEUE_CONFIG_KEY = "multikueueconfigs.kueue.x-k8s.io"
SECRET_KEY = "kubeconfig"
"""``MultiKueueConfigSecretKey``."""
KUEUE_GROUP = "kueue.x-k8s.io"
RETRY_INCREMENT = 5.0
RETRY_MAX_STEPS = 7

MSG_AC_ACTIVE = "The admission check is active"
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ConfigError(Exception):
    """A kubeconfig that cannot be loaded: ``reason`` is the condition's reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Verdict:
    """What a MultiKueueCluster's ``Active`` condition says."""

    active: bool
    reason: str
    message: str


def retry_after(failed_attempts: int) -> float:
    """``retryAfter``: 0, then 5 s doubling per failed attempt, at most 5 s * 2^6.

    >>> [retry_after(n) for n in (0, 1, 2, 7, 9)]
    [0, 5.0, 10.0, 320.0, 320.0]
    """
    if failed_attempts == 0:
        return 0
    return (1 << (min(failed_attempts, RETRY_MAX_STEPS) - 1)) * RETRY_INCREMENT


def read_kubeconfig(mkc: dict, secret: dict | None, secret_name_error: str | None = None) -> bytes:
    """``loadClientConfig`` up to the bytes: from the Secret (``locationType: Secret``, the default) or a
    file (``Path``; MultiKueueKubeConfigPathValidation is off in v0.19, so any path is read).

    ``secret`` is the Secret the kubeconfig names, None when it does not exist."""
    source = ((mkc.get("spec") or {}).get("clusterSource")) or {}
    if source.get("clusterProfileRef"):
        raise ConfigError(
            "MultiKueueClusterProfileFeatureDisabled", "MultiKueueClusterProfile feature gate is disabled"
        )
    ref = source.get("kubeConfig")
    if not ref:
        raise ConfigError("BadKubeConfig", "kubeconfig reference is nil")
    location = ref.get("location", "")
    if ref.get("locationType", "Secret") == "Path":
        try:
            return Path(location).read_bytes()
        except OSError as err:
            raise ConfigError("BadKubeConfig", f"open {location}: {err.strerror.lower()}") from err
    if secret is None:
        # Kueue reads Secrets through controller-runtime's cache, whose NotFound names the Kind, not the
        # resource as the API server's does (real Kueue v0.19.2: 'Secret "worker1-secret" not found').
        raise ConfigError("BadKubeConfig", f'Secret "{location}" not found')
    data = (secret.get("data") or {}).get(SECRET_KEY)
    if data is None:
        raise ConfigError("BadKubeConfig", f'key "{SECRET_KEY}" not found in secret "{location}"')
    return base64.b64decode(data)


def server_of(kubeconfig: bytes) -> str:
    """``validateKubeconfig`` then the current context's server URL; ``ConfigError`` InsecureKubeConfig."""
    return endpoint_of(kubeconfig)[0]


def endpoint_of(kubeconfig: bytes) -> tuple[str, str | None]:
    """``validateKubeconfig`` then the current context's (server URL, bearer token); ``ConfigError``
    InsecureKubeConfig.

    >>> server_of(b"clusters: [{name: c, cluster: {server: 'http://127.0.0.1:8'}}]\\n"
    ...           b"contexts: [{name: x, context: {cluster: c}}]\\ncurrent-context: x")
    'http://127.0.0.1:8'
    >>> server_of(b"clusters: [{name: c, cluster: {server: 'https://h', insecure-skip-tls-verify: true}}]")
    Traceback (most recent call last):
    ...
    kubesim.multikueue.connections.ConfigError: insecure TLS verification is not allowed for cluster c
    """
    try:
        config = yaml.safe_load(kubeconfig) or {}
    except yaml.YAMLError as err:
        raise ConfigError("InsecureKubeConfig", f"failed to parse kubeconfig(apiconfig): {err}") from err
    users = {item.get("name"): item.get("user") or {} for item in config.get("users") or []}
    clusters = {item.get("name"): item.get("cluster") or {} for item in config.get("clusters") or []}
    for user in users.values():
        if user.get("tokenFile"):
            raise ConfigError("InsecureKubeConfig", "tokenFile is not allowed")
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify"):
            raise ConfigError(
                "InsecureKubeConfig", f"insecure TLS verification is not allowed for cluster {name}"
            )
        if cluster.get("certificate-authority"):
            raise ConfigError(
                "InsecureKubeConfig",
                "certificate-authority file paths are not allowed, use certificate-authority-data for "
                f"cluster {name}",
            )
        if not cluster.get("server"):
            raise ConfigError("InsecureKubeConfig", f"server URL is required for cluster {name}")
    contexts = {item.get("name"): item.get("context") or {} for item in config.get("contexts") or []}
    context = contexts.get(config.get("current-context")) or {}
    cluster = clusters.get(context.get("cluster"))
    if cluster is None:  # clientcmd: the REST config needs a context naming a cluster
        raise ConfigError("InsecureKubeConfig", "invalid configuration: no configuration has been provided")
    user = users.get(context.get("user")) or {}
    if user.get("username") or user.get("password"):
        raise ConfigError("InsecureKubeConfig", "basic auth is not allowed")
    if user.get("exec"):
        raise ConfigError("InsecureKubeConfig", "exec plugins are not allowed")
    if user.get("auth-provider"):
        raise ConfigError("InsecureKubeConfig", "auth providers are not allowed")
    if not _valid_host(cluster["server"]):
        raise ConfigError("InsecureKubeConfig", "untrusted server endpoint")
    return cluster["server"], user.get("token")


def _valid_host(server: str) -> bool:
    host = urlsplit(server.lower()).hostname or ""
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_DNS1123_SUBDOMAIN.match(host)) and len(host) <= 253


def unreachable_message(server: str) -> str:
    """What the client's first request answers when nothing listens at ``server`` (Go's dial error)."""
    parts = urlsplit(server)
    return (
        f'Get "{server}/apis/kueue.x-k8s.io/v1beta2/workloads?labelSelector=kueue.x-k8s.io%2F'
        f'multikueue-origin&limit=1": dial tcp {parts.netloc}: connect: connection refused'
    )


def check_verdict(check: dict, config: dict | None, clusters: dict[str, dict]) -> tuple[str, str, str]:
    """The ACReconciler's ``Active`` condition (status, reason, message) of a MultiKueue AdmissionCheck.

    ``config`` is the MultiKueueConfig its parameters name (None: missing); ``clusters`` the
    MultiKueueClusters by name.

    >>> ac = {"spec": {"parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "c"}}}
    >>> up = {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
    >>> check_verdict(ac, {"spec": {"clusters": ["a", "b"]}}, {"a": up, "b": {}})
    ('True', 'SomeActiveClusters', 'Inactive clusters: [b]')
    >>> check_verdict(ac, {"spec": {"clusters": ["a"]}}, {})
    ('False', 'NoUsableClusters', 'Missing clusters: [a]')
    """
    ref = (check.get("spec") or {}).get("parameters")
    error = parameters_error(ref)
    if error is None and config is None:
        error = f'multikueueconfigs.kueue.x-k8s.io "{ref["name"]}" not found'
    if error is not None:
        return "False", "BadConfig", f"Cannot load the AdmissionChecks parameters: {error}"
    names = list((config.get("spec") or {}).get("clusters") or [])
    missing = [name for name in names if name not in clusters]
    inactive = [name for name in names if name in clusters and not cluster_active(clusters[name])]
    if not missing and not inactive:
        return "True", "Active", MSG_AC_ACTIVE
    parts = []
    if missing:
        parts.append(f"Missing clusters: [{' '.join(missing)}]")
    if inactive:
        parts.append(f"Inactive clusters: [{' '.join(inactive)}]")
    if len(missing) + len(inactive) < len(names):
        return "True", "SomeActiveClusters", ", ".join(parts)
    return "False", "NoUsableClusters", ", ".join(parts)


def parameters_error(ref: dict | None) -> str | None:
    """``refValidForGK`` for MultiKueueConfig: None when ``ref`` names one."""
    if ref is None:
        return "missing parameters reference"
    if not ref.get("name"):
        return "empty name: bad parameters reference"
    if ref.get("apiGroup") != KUEUE_GROUP:
        return f'wrong group "{ref.get("apiGroup", "")}", expecting "{KUEUE_GROUP}": bad parameters reference'
    if ref.get("kind") != "MultiKueueConfig":
        return f'wrong kind "{ref.get("kind", "")}", expecting "MultiKueueConfig": bad parameters reference'
    return None


def cluster_active(mkc: dict) -> bool:
    return any(
        c.get("type") == "Active" and c.get("status") == "True"
        for c in (mkc.get("status") or {}).get("conditions") or []
    )
