"""Kueue's manager in the real control plane (devtools/realcluster.py): its configuration, its command
(in a mount namespace of its own), its webhooks registered by URL, its visibility API registered with the
aggregator, and the waits until both answer. What it installs comes from Kueue's release in Go's
checksummed module cache (``KUEUE_MODULE``, pinned by realcluster/go.mod)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import yaml

GO_MODULE = Path(__file__).resolve().parent.parent / "realcluster"
"""The Go module that pins the real stack's versions (go.mod) and builds it (build.sh)."""
KUEUE_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster")
"""include/kueue-config.yaml's frameworks without the pod-based ones (pod, deployment, statefulset): the
project creates none of those, and their webhooks would intercept every pod the harness's driver sees."""
SHIPPED_FRAMEWORKS = (*KUEUE_FRAMEWORKS, "ray.io/rayservice")
"""Kueue's shipped frameworks as far as the project goes: a RayService is admitted as one Workload (kubesim's
default, ``kubesim.kueue.config.SHIPPED_FRAMEWORKS``)."""
KUEUE_WEBHOOK_GROUPS = {"batch", "ray.io", "kueue.x-k8s.io"}
KUEUE_MODULE = "sigs.k8s.io/kueue@v0.19.2"


def write_kueue_config(
    work: Path,
    webhook_port: int,
    visibility_port: int,
    health_port: int,
    pki: dict[str, Path],
    frameworks: tuple[str, ...] = KUEUE_FRAMEWORKS,
) -> Path:
    """Kueue's manager configuration: its webhooks, visibility server and health probe on loopback, the
    harness's certificates, no leader election, and ``frameworks`` (those the project uses)."""
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(pki["webhook"])},
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": visibility_port},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(frameworks)},
    }
    path = work / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


KUEUE_METRICS_CERTS = "/etc/kueue/metrics/certs"
"""Where Kueue's manager reads its metrics server's certificate when it does not manage certificates
itself: a fixed path (cmd/kueue/main.go), and a missing file stops it even with metrics disabled."""
KUEUE_VISIBILITY_CERTS = "/visibility"
"""Where Kueue's visibility server reads ``tls.crt`` and ``tls.key`` (pkg/visibility/server.go, a fixed
path at the root of the file system; in a real install, the mounted secret)."""
VISIBILITY_SERVICE = "visibility-server"
"""The Service the release's APIServices name (config/components/visibility/), in kueue-system."""


def kueue_command(kueue: Path, config: Path, certs: Path, work: Path, kubeconfig: Path) -> list:
    """Kueue's manager in a mount namespace of its own, where it finds its certificates at the fixed
    paths it reads them from, and the machine's file system is left as it is:

    - ``KUEUE_METRICS_CERTS``: /etc there is an overlay of the machine's /etc holding that path;
    - ``KUEUE_VISIBILITY_CERTS``: at the root, where nothing can be added without changing the machine,
      so Kueue runs chrooted in a root of its own (a tmpfs holding every top-level folder of the machine's
      root, bound recursively, and ``/visibility``).

    ``--kubeconfig`` is given as a flag: the visibility server reads the flag (not $KUBECONFIG) for its
    delegated authentication and authorization (TokenReview, SubjectAccessReview)."""
    for name in ("etc-upper", "etc-work", "root"):
        (work / name).mkdir(exist_ok=True)
    script = (
        "set -e; mount --make-rprivate /"
        ' && mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc'
        f' && mkdir -p {Path(KUEUE_METRICS_CERTS).parent} && ln -s "$3" {KUEUE_METRICS_CERTS}'
        ' && root=$4 && mount -t tmpfs kueue-root "$root"'
        " && for entry in /*; do"
        ' if [ -L "$entry" ]; then cp -P "$entry" "$root$entry";'
        ' elif [ -d "$entry" ]; then mkdir "$root$entry" && mount --rbind "$entry" "$root$entry"; fi;'
        " done"
        f' && mkdir "$root{KUEUE_VISIBILITY_CERTS}" && mount --bind "$3" "$root{KUEUE_VISIBILITY_CERTS}"'
        ' && shift 4 && exec chroot "$root" "$@"'
    )
    return ["unshare", "--mount", "sh", "-c", script, "kueue", work / "etc-upper", work / "etc-work", certs,
            work / "root", kueue, f"--config={config}", f"--kubeconfig={kubeconfig}"]  # fmt: skip


def kueue_webhooks(manifests: list[dict], port: int, ca_bundle: bytes) -> list[dict]:
    """Kueue's webhook configurations (its release's config/components/webhook/manifests.yaml) reduced to
    the API groups whose CRDs are installed, each webhook called by URL at 127.0.0.1:``port``."""
    import base64

    result = []
    for doc in manifests:
        hooks = []
        for hook in doc["webhooks"]:
            if not {g for rule in hook["rules"] for g in rule["apiGroups"]} <= KUEUE_WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hooks.append(
                {
                    **hook,
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}{path}",
                        "caBundle": base64.b64encode(ca_bundle).decode(),
                    },
                }
            )
        result.append({**doc, "metadata": {"name": f"kueue-{doc['metadata']['name']}"}, "webhooks": hooks})
    return result


def register_webhooks(api_client, port: int, ca_bundle: bytes) -> None:
    from kubernetes import client

    manifests = kueue_module() / "config" / "components" / "webhook" / "manifests.yaml"
    docs = [d for d in yaml.safe_load_all(manifests.read_text()) if d]
    admission = client.AdmissionregistrationV1Api(api_client)
    for doc in kueue_webhooks(docs, port, ca_bundle):
        if doc["kind"] == "MutatingWebhookConfiguration":
            admission.create_mutating_webhook_configuration(doc)
        else:
            admission.create_validating_webhook_configuration(doc)


def visibility_objects(port: int, ca_bundle: bytes) -> list[dict]:
    """The release's Service and APIServices of Kueue's visibility API (config/components/visibility/),
    pointed at the manager's visibility server on 127.0.0.1:``port``.

    The aggregator dials an APIService's Service by its ClusterIP, or with ``--enable-aggregator-routing``
    by an endpoint, and the API server refuses loopback endpoints; a Service of type ExternalName
    ``localhost`` is dialled by that name and the APIService's port (k8s.io/apiserver's
    ``proxy.ResolveCluster``). The release skips TLS verification (``insecureSkipTLSVerify``); here the
    APIServices carry the harness's CA and the server's certificate names the Service."""
    import base64

    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": VISIBILITY_SERVICE, "namespace": "kueue-system"},
        "spec": {"type": "ExternalName", "externalName": "localhost"},
    }
    apiservices = [
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
            "spec": {
                "group": "visibility.kueue.x-k8s.io",
                "version": version,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "caBundle": base64.b64encode(ca_bundle).decode(),
                "service": {"name": VISIBILITY_SERVICE, "namespace": "kueue-system", "port": port},
            },
        }
        for version in ("v1beta2", "v1beta1")
    ]
    return [service, *apiservices]


def register_visibility(api_client, port: int, ca_bundle: bytes) -> None:
    from kubernetes import client

    service, *apiservices = visibility_objects(port, ca_bundle)
    client.CoreV1Api(api_client).create_namespaced_service("kueue-system", service)
    registration = client.ApiregistrationV1Api(api_client)
    for apiservice in apiservices:
        registration.create_api_service(apiservice)


def wait_for_visibility(api_client, timeout_s: float) -> None:
    """Until the aggregator has found Kueue's visibility server (the APIService's Available condition)."""
    from kubernetes import client

    registration = client.ApiregistrationV1Api(api_client)
    deadline = time.monotonic() + timeout_s
    while True:
        status = registration.read_api_service("v1beta2.visibility.kueue.x-k8s.io").status
        available = [c for c in (status.conditions or []) if c.type == "Available"]
        if available and available[0].status == "True":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kueue's visibility API is not available: {available}")
        time.sleep(0.5)


def kueue_module() -> Path:
    """Kueue's module in Go's module cache (downloaded by the build), read for its webhook manifests."""
    env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/local/go/bin"}
    done = subprocess.run(
        ["go", "mod", "download", "-json", KUEUE_MODULE],
        cwd=GO_MODULE, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(json.loads(done.stdout)["Dir"])


def wait_for_kueue(api_client, timeout_s: float) -> None:
    """Until Kueue's webhooks answer: a dry-run ResourceFlavor create goes through its mutating webhook."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + timeout_s
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "probe"}}
    while True:
        try:
            custom.create_cluster_custom_object(
                "kueue.x-k8s.io", "v1beta2", "resourceflavors", body, dry_run="All"
            )
            return
        except client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
