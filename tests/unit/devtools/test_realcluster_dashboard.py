"""The real stack's Ray heads: a dashboard answers the Ray Jobs REST API on its head pod's IP inside the
harness's network namespace while the head lives, the API server's port is relayed out of it, and a finished
submitter pod reports its exit code as a kubelet would.

The namespace tests make a real network namespace (``unshare --net``) and are skipped where that is not
permitted, saying so."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from devtools.realcluster import kuberay_command
from devtools.realcluster_dashboard import HeadDashboards, behaviour
from devtools.realcluster_netns import NetworkNamespace
from devtools.realcluster_pods import finished_status, ray_head

needs_netns = pytest.mark.skipif(
    subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode != 0,
    reason="`unshare --net` is not permitted here (needs root or CAP_SYS_ADMIN)",
)


def test_a_submission_runs_as_its_entrypoint_and_runtime_env_say_never_from_annotations():
    assert behaviour({"entrypoint": "sleep 7; exit 3"}).exit_code == 3
    assert behaviour({"entrypoint": "sleep 7"}).duration == 7
    trains = behaviour(
        {"entrypoint": "python train.py", "runtime_env": {"pip": ["torch"], "env_vars": {"EPOCHS": "2"}}}
    )
    assert (trains.epochs, trains.setup > 0) == (2, True)


def test_a_head_pod_is_known_by_kuberays_labels_and_a_finished_pod_by_its_exit_code():
    head = {"metadata": {"labels": {"ray.io/node-type": "head", "ray.io/cluster": "rc-1"}}}
    worker = {"metadata": {"labels": {"ray.io/node-type": "worker", "ray.io/cluster": "rc-1"}}}
    assert (ray_head(head), ray_head(worker)) == ("rc-1", None)

    pod = {"spec": {"containers": [{"name": "ray-job-submitter"}]}, "status": {"startTime": "t0"}}
    failed = finished_status(pod, 1, "t1")
    assert failed["phase"] == "Failed"
    [container] = failed["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 1 and container["state"]["running"] is None
    assert finished_status(pod, 0, "t1")["phase"] == "Succeeded"


def _inside(netns: NetworkNamespace, script: str) -> str:
    done = subprocess.run(netns.wrap(["python3", "-c", script]), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _listening(netns: NetworkNamespace, ip: str) -> bool:
    """Whether anything accepts connections on ``ip``'s dashboard port inside ``netns``."""
    script = (
        f"import socket\ntry:\n    socket.create_connection(({ip!r}, 8265), timeout=2); print('open')\n"
        "except OSError:\n    print('refused')\n"
    )
    return _inside(netns, script).strip() == "open"


def _request(method: str, url: str, body: dict | None = None) -> str:
    return (
        "import json, urllib.request, urllib.error\n"
        f"req = urllib.request.Request({url!r}, method={method!r}, data={json.dumps(body).encode() if body else None!r},"
        " headers={'Content-Type': 'application/json'})\n"
        "try:\n"
        "    r = urllib.request.urlopen(req, timeout=5); print(r.status); print(r.read().decode())\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code); print(e.read().decode())\n"
    )


@needs_netns
def test_a_heads_dashboard_runs_a_ray_job_on_the_pod_ip_until_the_head_is_gone():
    with NetworkNamespace() as netns:
        heads = HeadDashboards(netns, time_scale=100)
        heads.open("team-a", "rc-1", "10.244.3.7")
        base = "http://10.244.3.7:8265/api/jobs/"

        submitted = _inside(
            netns, _request("POST", base, {"entrypoint": "sleep 50; exit 2", "submission_id": "j1"})
        )
        assert submitted.split("\n")[0] == "200"
        assert json.loads(submitted.split("\n")[1])["submission_id"] == "j1"
        again = _inside(netns, _request("POST", base, {"entrypoint": "sleep 1", "submission_id": "j1"}))
        assert (
            again.startswith("500") and "Please use a different submission_id" in again
        )  # what KubeRay reads

        deadline = time.monotonic() + 20
        while True:
            status, body = _inside(netns, _request("GET", base + "j1")).split("\n", 1)
            info = json.loads(body)
            if info["status"] in ("SUCCEEDED", "FAILED") or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert (status, info["status"]) == ("200", "FAILED")
        assert "exit code 2" in info["message"] and info["end_time"] >= info["start_time"] > 0
        assert _inside(netns, _request("GET", base + "nope")).startswith("404")

        heads.close("team-a", "rc-1", "10.244.3.7")  # the head pod is gone: nothing answers there any more
        assert not _listening(netns, "10.244.3.7")


@needs_netns
def test_a_late_deletion_of_a_clusters_old_head_leaves_the_new_heads_dashboard_up():
    """KubeRay creates a head again for the same cluster (a new pod, a new IP); the pod driver may see the
    new pod start before the old one's deletion."""
    with NetworkNamespace() as netns:
        heads = HeadDashboards(netns, time_scale=100)
        heads.open("team-a", "rc-1", "10.244.3.7")
        heads.open("team-a", "rc-1", "10.244.3.9")
        heads.close("team-a", "rc-1", "10.244.3.7")
        assert _inside(netns, _request("GET", "http://10.244.3.9:8265/api/version")).startswith("200")
        heads.close("team-a", "rc-1", "10.244.3.9")
        assert not _listening(netns, "10.244.3.9")


@needs_netns
def test_kuberay_reaches_a_running_head_at_its_services_name_and_the_machine_is_left_alone(tmp_path):
    """As in a cluster: ``<cluster>-head-svc.<ns>.svc.cluster.local`` resolves (in KubeRay's own mount
    namespace, whose /etc/hosts the dashboards write) to the head pod's IP while the head runs."""
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    name = "rc-1-head-svc.team-a.svc.cluster.local"
    with NetworkNamespace() as netns:
        heads = HeadDashboards(netns, time_scale=100, hosts=hosts)

        def as_kuberay(script: str) -> str:
            argv = netns.wrap(kuberay_command(hosts, ["python3", "-c", script]))
            done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
            return done.stdout

        heads.open("team-a", "rc-1", "10.244.3.7")
        assert as_kuberay(_request("GET", f"http://{name}:8265/api/version")).startswith("200")
        heads.open("team-a", "rc-1", "10.244.3.9")  # a new head pod, a new IP
        assert f"10.244.3.9 {name}" in as_kuberay("print(open('/etc/hosts').read())")
        heads.close("team-a", "rc-1", "10.244.3.9")
        assert name not in as_kuberay("print(open('/etc/hosts').read())")
        assert as_kuberay("print(open('/etc/hosts').read())").startswith("127.0.0.1 localhost")
    assert name not in Path("/etc/hosts").read_text()


@needs_netns
def test_the_relay_gives_the_caller_a_port_of_the_namespace():
    with NetworkNamespace() as netns:
        server = subprocess.Popen(
            netns.wrap(["python3", "-m", "http.server", "--bind", "127.0.0.1", "18080"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port = netns.relay(18080)
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
                        assert response.status == 200
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            server.terminate()
            server.wait()


@needs_netns
def test_a_submitter_runs_the_ray_cli_against_the_head_and_its_log_is_served_as_a_kubelet_would(tmp_path):
    from devtools.realcluster_pki import make_pki

    pki = make_pki(tmp_path / "pki")
    with NetworkNamespace() as netns:
        heads = HeadDashboards(netns, time_scale=100)
        heads.serve_logs("10.0.0.10", str(pki["server.crt"]), str(pki["server.key"]))
        submission = {"entrypoint": "sleep 20", "submission_id": "j2", "runtime_env": {}, "metadata": {}}
        # No head yet: `ray job submit` cannot connect, the container exits 1.
        assert heads.submitter("team-a", "rc-2", submission, ("sub-0", "ray-job-submitter")) == 1
        heads.open("team-a", "rc-2", "10.244.3.8")
        assert heads.submitter("team-a", "rc-2", submission, ("sub-1", "ray-job-submitter")) == 0

        read = (
            "import ssl, urllib.request\n"
            "ctx = ssl._create_unverified_context()\n"
            "url = 'https://10.0.0.10:10250/containerLogs/team-a/{pod}/ray-job-submitter{query}'\n"
            "print(urllib.request.urlopen(url.format(pod={pod!r}, query={query!r}), context=ctx).read().decode())\n"
        )
        first = _inside(netns, read.format(pod="sub-0", query=""))
        assert "ConnectionError" in first
        log = _inside(netns, read.format(pod="sub-1", query=""))
        assert "Job 'j2' submitted successfully" in log and "Job 'j2' succeeded" in log
        tail = _inside(netns, read.format(pod="sub-1", query="?tailLines=1"))
        assert tail.strip() == "Job 'j2' succeeded"
