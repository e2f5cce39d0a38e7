"""A real control plane in one call: etcd, kube-apiserver (token authentication, RBAC, the aggregation
layer), the project's vendored CRDs, kube-controller-manager (Job controller, garbage collector,
namespaces, service accounts), Kueue's manager with its webhooks registered by URL and its visibility API
registered with the aggregator (devtools/realcluster_kueue.py), the KubeRay operator, the pod-lifecycle stand-in
(devtools/realcluster_pods.py) and the Ray heads' dashboards (devtools/realcluster_dashboard.py).

The servers run in a network namespace of their own (devtools/realcluster_netns.py) where pod IPs are
routable, so that KubeRay reaches a head's dashboard at its Service's name (``kuberay_command``) and the
API server a pod's log at its node, as on a real cluster; the caller gets the API server on its own
127.0.0.1 through a relay. Every server binds to 127.0.0.1 there,
the dashboards to their head pod's IP.

Its certificates and kubeconfig files come from devtools/realcluster_pki.py.

The binaries come from ``realcluster/build.sh`` (``make realcluster``), pinned by realcluster/go.mod.

    with run_realcluster() as real:      # raises RealClusterUnavailable when the binaries are not built
        ...real.kubeconfig...            # a kubeconfig with the admin token and the cluster's CA

    python -m devtools.realcluster       # starts it and prints the kubeconfig's path until Ctrl-C
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from devtools.realcluster_kueue import (
    GO_MODULE,
    KUEUE_FRAMEWORKS,
    kueue_command,
    kueue_module,
    register_visibility,
    register_webhooks,
    wait_for_kueue,
    wait_for_visibility,
    write_kueue_config,
)
from devtools.realcluster_pki import FRONT_PROXY_CLIENT, make_pki, write_kubeconfig
from devtools.signals import stop_on_signals
from kubesim.testing import stop_process

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = GO_MODULE / "build.sh"
CRDS_DIR = ROOT / "kubesim" / "crds"
READY_TIMEOUT_S = 240.0
"""Per component (API server, CRDs, Kueue's webhooks). The stack starts in about 20 s on an idle machine;
Kueue's webhooks once took over 120 s to answer on the 2 shared cores at a load average near 9."""

PORTS = {
    "etcd": 2379,
    "etcd-peer": 2380,
    "kube-apiserver": 6443,
    "kueue-health": 8081,
    "kueue-visibility": 8082,
    "kuberay-health": 8085,
    "kueue-webhook": 9443,
}
"""The servers' ports on the network namespace's own 127.0.0.1, the components' usual ones. Fixed, not
picked: a port found free on the machine's loopback says nothing of the namespace's, where the
components' own connections to each other take ephemeral ports (32768-60999) and once took the KubeRay
operator's health port between its pick and its bind. Below that range nothing else binds them."""


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
def run_realcluster(
    workdir: str | Path | None = None,
    time_scale: float = 1.0,
    kueue_frameworks: tuple[str, ...] = KUEUE_FRAMEWORKS,
) -> Iterator[RealCluster]:
    """``time_scale``: simulated seconds per real second of the Ray jobs and Serve deployments on the heads'
    dashboards (a ``sleep 30`` entrypoint takes 3 s at 10); Kubernetes, Kueue and KubeRay run on the real
    clock. ``kueue_frameworks``: Kueue's ``integrations.frameworks`` (include/kueue-config.yaml's by
    default; ``SHIPPED_FRAMEWORKS`` admits a RayService as one Workload, as Kueue ships)."""
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
        pki = make_pki(work / "pki")
        token = secrets.token_hex(16)
        (work / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
        etcd_port, etcd_peer, api_port = PORTS["etcd"], PORTS["etcd-peer"], PORTS["kube-apiserver"]
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
        write_kubeconfig(inside, url, token, pki["ca.crt"])
        url = f"https://127.0.0.1:{netns.relay(api_port)}"
        kubeconfig = work / "kubeconfig"  # the caller's, through the relay
        write_kubeconfig(kubeconfig, url, token, pki["ca.crt"])
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
        webhook_port, visibility_port = PORTS["kueue-webhook"], PORTS["kueue-visibility"]
        kueue_config = write_kueue_config(
            work, webhook_port, visibility_port, PORTS["kueue-health"], pki, kueue_frameworks
        )
        start(
            "kueue",
            kueue_command(bins / "kueue", kueue_config, pki["webhook"], work, inside),
            inside,
        )
        register_webhooks(api_client, webhook_port, pki["ca.crt"].read_bytes())
        register_visibility(api_client, visibility_port, pki["ca.crt"].read_bytes())
        hosts = work / "hosts"
        hosts.write_text(Path("/etc/hosts").read_text())
        start(
            "kuberay-operator",
            kuberay_command(
                hosts,
                [bins / "kuberay-operator", "--enable-leader-election=false", "--metrics-addr=0",
                 f"--health-probe-bind-address=127.0.0.1:{PORTS['kuberay-health']}"],
            ),
            inside,
        )  # fmt: skip
        heads = HeadDashboards(netns, time_scale, hosts)
        stack.callback(heads.close_all)
        heads.serve_logs(NODE_IP, str(pki["server.crt"]), str(pki["server.key"]))
        _start_pod_driver(stack, api_client, heads)
        wait_for_kueue(api_client, READY_TIMEOUT_S)
        wait_for_visibility(api_client, READY_TIMEOUT_S)
        yield RealCluster(url, str(kubeconfig), token, work / "logs")


def kuberay_command(hosts: Path, argv: list) -> list:
    """KubeRay's operator as it runs in a cluster, reaching each head's dashboard by its Service's name
    (``http://<cluster>-head-svc.<ns>.svc.cluster.local:8265``, a 2 s timeout per request), in a mount
    namespace of its own whose /etc/hosts is ``hosts`` (HeadDashboards writes a line per running head);
    ``GODEBUG=netdns=cgo``: glibc reads the file at every lookup, where Go's own resolver would keep it
    for 5 s and miss a head that just started."""
    script = 'set -e; mount --make-rprivate / && mount --bind "$1" /etc/hosts && shift && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, "kuberay", hosts, "env", "GODEBUG=netdns=cgo", *argv]


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
        self.stack.callback(stop_process, process)
        time.sleep(0.5)
        if process.poll() is not None:
            tail = (self.logs / f"{name}.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{tail}")
        return process


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
    release = {p.name: p for p in (kueue_module() / "config" / "components" / "crd" / "bases").glob("*.yaml")}
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


def _start_pod_driver(stack: contextlib.ExitStack, api_client, heads) -> None:
    from devtools.realcluster_pods import PodDriver

    stop = threading.Event()
    thread = threading.Thread(
        target=PodDriver(api_client, heads).run, args=(stop,), name="pod-driver", daemon=True
    )
    thread.start()
    stack.callback(thread.join, 15)
    stack.callback(stop.set)


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
    stop_on_signals()  # else a SIGTERM would orphan etcd, kube-apiserver and the controllers
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
