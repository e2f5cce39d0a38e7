"""A real control plane in one call: etcd, kube-apiserver (token authentication, RBAC, the aggregation
layer), the project's vendored CRDs, kube-controller-manager (Job controller, garbage collector,
namespaces, service accounts), Kueue's manager with its webhooks registered by URL and its visibility API
registered with the aggregator, the KubeRay operator, the pod-lifecycle stand-in
(devtools/realcluster_pods.py) and the Ray heads' dashboards (devtools/realcluster_dashboard.py).

The servers run in a network namespace of their own (devtools/realcluster_netns.py) where pod IPs are
routable, so that the API server's service proxy reaches a head's dashboard as on a real cluster; the
caller gets the API server on its own 127.0.0.1 through a relay. Every server binds to 127.0.0.1 there,
the dashboards to their head pod's IP.

The binaries come from ``realcluster/build.sh`` (``make realcluster``), pinned by realcluster/go.mod.

    with run_realcluster() as real:      # raises RealClusterUnavailable when the binaries are not built
        ...real.kubeconfig...            # a kubeconfig with the admin token and the cluster's CA

    python -m devtools.realcluster       # starts it and prints the kubeconfig's path until Ctrl-C
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "realcluster" / "build.sh"
CRDS_DIR = ROOT / "kubesim" / "crds"
READY_TIMEOUT_S = 240.0
"""Per component (API server, CRDs, Kueue's webhooks). The stack starts in about 20 s on an idle machine;
Kueue's webhooks once took over 120 s to answer on the 2 shared cores at a load average near 9."""
KUEUE_FRAMEWORKS = ("batch/job", "ray.io/rayjob", "ray.io/raycluster")
"""include/kueue-config.yaml's frameworks without the pod-based ones (pod, deployment, statefulset): the
project creates none of those, and their webhooks would intercept every pod the harness's driver sees."""
KUEUE_WEBHOOK_GROUPS = {"batch", "ray.io", "kueue.x-k8s.io"}
KUEUE_MODULE = "sigs.k8s.io/kueue@v0.19.2"


UNSHARE_NEEDED = {
    "--mount": "Kueue's manager reads its metrics certificate from /etc/kueue/metrics/certs and the harness "
    "mounts it there privately",
    "--net": "the stack runs in a network namespace of its own, where pod IPs reach the Ray heads' dashboards",
}


class RealClusterUnavailable(RuntimeError):
    """The binaries are not built (or the Go toolchain is missing): the message says how to build them."""


@dataclass
class RealCluster:
    url: str
    kubeconfig: str
    token: str
    logs: Path


def binaries_dir(build: bool = False) -> Path:
    """The folder of the built binaries for the current go.sum; ``build`` builds them if missing."""
    env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/local/go/bin"}
    command = [str(BUILD_SCRIPT)] if build else ["sh", "-c", f'REALCLUSTER_DRY=1 "{BUILD_SCRIPT}"']
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    out = Path(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    if done.returncode != 0 or out is None or not (out / ".complete").exists():
        raise RealClusterUnavailable(
            "the real-stack binaries are not built: run `make realcluster` (needs Go >= 1.26 and the module "
            f"proxy); {done.stderr.strip()[-400:]}"
        )
    return out


@contextlib.contextmanager
def run_realcluster(workdir: str | Path | None = None, time_scale: float = 1.0) -> Iterator[RealCluster]:
    """``time_scale``: simulated seconds per real second of the Ray jobs on the heads' dashboards (a
    ``sleep 30`` entrypoint takes 3 s at 10); Kubernetes, Kueue and KubeRay run on the real clock."""
    from kubernetes import client

    from devtools.realcluster_dashboard import HeadDashboards
    from devtools.realcluster_netns import NODE_IP, NetworkNamespace

    bins = binaries_dir()
    for flag, why in UNSHARE_NEEDED.items():
        if subprocess.run(["unshare", flag, "true"], capture_output=True).returncode != 0:
            raise RealClusterUnavailable(
                f"`unshare {flag}` is not permitted here (it needs root or CAP_SYS_ADMIN): {why}"
            )
    with contextlib.ExitStack() as stack:
        netns = stack.enter_context(NetworkNamespace())
        if workdir is None:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="realcluster-"))
        work = Path(workdir)
        (work / "logs").mkdir(parents=True, exist_ok=True)
        pki = _make_pki(work / "pki")
        token = secrets.token_hex(16)
        (work / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
        etcd_port, etcd_peer, api_port = _free_port(), _free_port(), _free_port()
        start = _Starter(stack, work / "logs", netns.wrap)
        start(
            "etcd",
            [bins / "etcd", "--data-dir", work / "etcd", "--name", "default", "--unsafe-no-fsync",
             "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
             "--initial-cluster", f"default=http://127.0.0.1:{etcd_peer}"],
        )  # fmt: skip
        url = f"https://127.0.0.1:{api_port}"
        start(
            "kube-apiserver",
            [bins / "kube-apiserver", f"--etcd-servers=http://127.0.0.1:{etcd_port}",
             "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
             f"--tls-cert-file={pki['server.crt']}", f"--tls-private-key-file={pki['server.key']}",
             f"--client-ca-file={pki['ca.crt']}",
             f"--token-auth-file={work / 'tokens.csv'}", "--authorization-mode=RBAC",
             "--service-account-issuer=https://kubernetes.default.svc",
             f"--service-account-key-file={pki['sa.pub']}",
             f"--service-account-signing-key-file={pki['sa.key']}",
             "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
             # The aggregation layer, for Kueue's visibility API: the front proxy's CA and client.
             f"--requestheader-client-ca-file={pki['front-proxy-ca.crt']}",
             f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
             "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
             "--requestheader-uid-headers=X-Remote-Uid", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
             f"--proxy-client-cert-file={pki['front-proxy-client.crt']}",
             f"--proxy-client-key-file={pki['front-proxy-client.key']}"],
        )  # fmt: skip
        inside = work / "kubeconfig-inside"  # the controllers', in the namespace
        _write_kubeconfig(inside, url, token, pki["ca.crt"])
        url = f"https://127.0.0.1:{netns.relay(api_port)}"
        kubeconfig = work / "kubeconfig"  # the caller's, through the relay
        _write_kubeconfig(kubeconfig, url, token, pki["ca.crt"])
        api_client = _wait_for_api(str(kubeconfig))
        stack.callback(api_client.close)
        start(
            "kube-controller-manager",
            [bins / "kube-controller-manager", f"--kubeconfig={inside}", "--leader-elect=false",
             "--controllers=job,garbage-collector-controller,namespace-controller,serviceaccount-controller,"
             "serviceaccount-token-controller,endpointslice-controller,root-ca-certificate-publisher-controller,"
             "endpoints-controller",
             f"--service-account-private-key-file={pki['sa.key']}", f"--root-ca-file={pki['ca.crt']}",
             "--secure-port=0", "--use-service-account-credentials=false"],
        )  # fmt: skip
        _apply_crds(api_client)
        client.CoreV1Api(api_client).create_namespace({"metadata": {"name": "kueue-system"}})
        webhook_port, visibility_port = _free_port(), _free_port()
        kueue_config = _write_kueue_config(work, webhook_port, visibility_port, pki)
        start(
            "kueue",
            _kueue_command(bins / "kueue", kueue_config, pki["webhook"], work, inside),
            inside,
        )
        _register_webhooks(api_client, webhook_port, pki["ca.crt"].read_bytes())
        _register_visibility(api_client, visibility_port, pki["ca.crt"].read_bytes())
        start(
            "kuberay-operator",
            [bins / "kuberay-operator", "--enable-leader-election=false", "--metrics-addr=0",
             f"--health-probe-bind-address=127.0.0.1:{_free_port()}", "--use-kubernetes-proxy"],
            inside,
        )  # fmt: skip
        heads = HeadDashboards(netns, time_scale)
        stack.callback(heads.close_all)
        heads.serve_logs(NODE_IP, str(pki["server.crt"]), str(pki["server.key"]))
        _start_pod_driver(stack, api_client, heads)
        _wait_for_kueue(api_client)
        _wait_for_visibility(api_client)
        yield RealCluster(url, str(kubeconfig), token, work / "logs")


class _Starter:
    """Starts a process with its output in ``logs/<name>.log`` and stops it (SIGTERM, then SIGKILL) when
    the stack closes; a process that exits early fails the start with the end of its log."""

    def __init__(self, stack: contextlib.ExitStack, logs: Path, wrap=lambda argv: argv):
        self.stack, self.logs, self.wrap = stack, logs, wrap

    def __call__(self, name: str, argv: list, kubeconfig: Path | None = None) -> subprocess.Popen:
        env = {**os.environ, **({"KUBECONFIG": str(kubeconfig)} if kubeconfig else {})}
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed by the stack
        self.stack.callback(log.close)
        process = subprocess.Popen(
            [str(a) for a in self.wrap(argv)], stdout=log, stderr=subprocess.STDOUT, env=env
        )
        self.stack.callback(_stop, process)
        time.sleep(0.5)
        if process.poll() is not None:
            tail = (self.logs / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")
        return process


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1/localhost (the API server and Kueue's webhooks share it)
    and the service-account signing key pair the API server requires."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def key():
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def name(cn: str):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def certificate(subject: str, issuer, signing_key, public_key, extension, critical: bool):
        return (
            x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(extension, critical=critical)
            .sign(signing_key, hashes.SHA256())
        )  # fmt: skip

    ca_key, server_key, sa_key, proxy_ca_key, proxy_key = key(), key(), key(), key(), key()
    is_ca = x509.BasicConstraints(ca=True, path_length=None)
    ca = certificate("realcluster-ca", name("realcluster-ca"), ca_key, ca_key.public_key(), is_ca, True)
    # The aggregator checks an APIService's server against the name <service>.<namespace>.svc.
    sans = [x509.DNSName("localhost"), x509.DNSName(f"{VISIBILITY_SERVICE}.kueue-system.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]  # fmt: skip
    server = certificate(
        "realcluster", ca.subject, ca_key, server_key.public_key(), x509.SubjectAlternativeName(sans), False
    )
    # The front proxy: kube-apiserver's aggregator authenticates to extension API servers (Kueue's
    # visibility server) with this client certificate and passes the user in X-Remote-* headers; they
    # trust those headers only from a certificate of this CA (kubeadm's front-proxy-ca, a CA of its own).
    proxy_ca = certificate(
        "realcluster-front-proxy-ca", name("realcluster-front-proxy-ca"), proxy_ca_key,
        proxy_ca_key.public_key(), is_ca, True,
    )  # fmt: skip
    proxy_client = certificate(
        FRONT_PROXY_CLIENT, proxy_ca.subject, proxy_ca_key, proxy_key.public_key(),
        x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), False,
    )  # fmt: skip

    def pem_key(k) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    files = {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "server.crt": server.public_bytes(serialization.Encoding.PEM),
        "server.key": pem_key(server_key),
        "sa.key": pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        "front-proxy-ca.crt": proxy_ca.public_bytes(serialization.Encoding.PEM),
        "front-proxy-client.crt": proxy_client.public_bytes(serialization.Encoding.PEM),
        "front-proxy-client.key": pem_key(proxy_key),
    }
    paths = {}
    for filename, data in files.items():
        (directory / filename).write_bytes(data)
        paths[filename] = directory / filename
    webhook = directory / "webhook"  # controller-runtime's certDir names
    webhook.mkdir(exist_ok=True)
    (webhook / "tls.crt").write_bytes(files["server.crt"])
    (webhook / "tls.key").write_bytes(files["server.key"])
    paths["webhook"] = webhook
    return paths


def _write_kubeconfig(path: Path, url: str, token: str, ca: Path) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "real", "cluster": {"server": url, "certificate-authority": str(ca)}}],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": "real", "context": {"cluster": "real", "user": "admin"}}],
                "current-context": "real",
            }
        )
    )


def _wait_for_api(kubeconfig: str):
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=kubeconfig)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            if api_client.call_api("/readyz", "GET", _preload_content=False).status == 200:
                return api_client
        except Exception:  # noqa: BLE001 - not listening yet
            if time.monotonic() > deadline:
                raise
        time.sleep(0.3)


def _apply_crds(api_client) -> None:
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api_client)
    names = []
    vendored = {p.name: p for p in CRDS_DIR.glob("*.yaml")}
    # Kueue's manager also watches the kinds the project does not vendor (MultiKueue, admission checks,
    # topologies...): those come from the release itself, in Go's checksummed module cache.
    release = {
        p.name: p for p in (_kueue_module() / "config" / "components" / "crd" / "bases").glob("*.yaml")
    }
    for path in sorted({**release, **vendored}.values()):
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        ext.create_custom_resource_definition(crd)
    deadline = time.monotonic() + READY_TIMEOUT_S
    for crd_name in names:
        while not any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(crd_name).status.conditions or []
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {crd_name} not Established")
            time.sleep(0.2)


def _write_kueue_config(work: Path, webhook_port: int, visibility_port: int, pki: dict[str, Path]) -> Path:
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{_free_port()}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(pki["webhook"])},
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": visibility_port},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
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
FRONT_PROXY_CLIENT = "front-proxy-client"


def _kueue_command(kueue: Path, config: Path, certs: Path, work: Path, kubeconfig: Path) -> list:
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


def _register_webhooks(api_client, port: int, ca_bundle: bytes) -> None:
    from kubernetes import client

    manifests = _kueue_module() / "config" / "components" / "webhook" / "manifests.yaml"
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


def _register_visibility(api_client, port: int, ca_bundle: bytes) -> None:
    from kubernetes import client

    service, *apiservices = visibility_objects(port, ca_bundle)
    client.CoreV1Api(api_client).create_namespaced_service("kueue-system", service)
    registration = client.ApiregistrationV1Api(api_client)
    for apiservice in apiservices:
        registration.create_api_service(apiservice)


def _wait_for_visibility(api_client) -> None:
    """Until the aggregator has found Kueue's visibility server (the APIService's Available condition)."""
    from kubernetes import client

    registration = client.ApiregistrationV1Api(api_client)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        status = registration.read_api_service("v1beta2.visibility.kueue.x-k8s.io").status
        available = [c for c in (status.conditions or []) if c.type == "Available"]
        if available and available[0].status == "True":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kueue's visibility API is not available: {available}")
        time.sleep(0.5)


def _kueue_module() -> Path:
    """Kueue's module in Go's module cache (downloaded by the build), read for its webhook manifests."""
    env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/local/go/bin"}
    done = subprocess.run(
        ["go", "mod", "download", "-json", KUEUE_MODULE],
        cwd=BUILD_SCRIPT.parent, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Path(json.loads(done.stdout)["Dir"])


def _start_pod_driver(stack: contextlib.ExitStack, api_client, heads) -> None:
    from devtools.realcluster_pods import PodDriver

    stop = threading.Event()
    thread = threading.Thread(
        target=PodDriver(api_client, heads).run, args=(stop,), name="pod-driver", daemon=True
    )
    thread.start()
    stack.callback(thread.join, 15)
    stack.callback(stop.set)


def _wait_for_kueue(api_client) -> None:
    """Until Kueue's webhooks answer: a dry-run ResourceFlavor create goes through its mutating webhook."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + READY_TIMEOUT_S
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


def apply_manifests(kubeconfig: str, paths: list[Path]) -> list[str]:
    """Create every object of the YAML files (and folders of them) in ``paths``, in order, as ``kubectl
    create -f`` would; returns ``kind/name`` of each. A document without a namespace goes into ``default``
    when its kind is namespaced."""
    from kubernetes import config, dynamic

    api_client = config.new_client_from_config(config_file=kubeconfig)
    created = []
    try:
        resources = dynamic.DynamicClient(api_client).resources
        for path in paths:
            for file in sorted(path.glob("*.yaml")) if path.is_dir() else [path]:
                for doc in yaml.safe_load_all(file.read_text()):
                    if not isinstance(doc, dict):
                        continue
                    resource = resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                    namespace = (
                        (doc["metadata"].get("namespace") or "default") if resource.namespaced else None
                    )
                    resource.create(body=doc, namespace=namespace)
                    created.append(f"{doc['kind']}/{doc['metadata']['name']}")
    finally:
        api_client.close()
    return created


def main() -> None:
    with run_realcluster() as real:
        print(
            f"real control plane at {real.url}; KUBECONFIG={real.kubeconfig}; logs in {real.logs}", flush=True
        )
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
