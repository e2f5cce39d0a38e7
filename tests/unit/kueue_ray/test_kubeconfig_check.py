"""The pure kubeconfig preflight airflow-init runs: each way a host kubeconfig fails inside a container is
found, named by field and value, and answered with its fix; a container-ready kubeconfig passes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kueue_ray.kubeconfig_check import FileFacts, check, is_loopback, readable_by, token_warnings
from kueue_ray.tokens import encode

PATH = "/opt/airflow/kube/config"
AIRFLOW_UID = 50000
READABLE = FileFacts(exists=True, uid=AIRFLOW_UID, gid=0, mode=0o600)


def kubeconfig(
    *, server="https://aks-ray.hcp.westeurope.azmk8s.io:443", user=None, cluster_extra=None
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "aks", "cluster": {"server": server, **(cluster_extra or {})}}],
        "users": [{"name": "airflow", "user": user if user is not None else {"token": "abc"}}],
        "contexts": [{"name": "aks", "context": {"cluster": "aks", "user": "airflow", "namespace": "ray"}}],
        "current-context": "aks",
    }


def exec_user(command: str, *args: str) -> dict:
    return {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": command, "args": list(args)}
    }


def run(config, *, facts=READABLE, uid=AIRFLOW_UID, programs=(), files=()):
    return check(
        config,
        path=PATH,
        host_path="~/.kube/config",
        facts=facts,
        uid=uid,
        gid=0,
        has_program=lambda command: command in programs,
        has_file=lambda path: path in files,
    )


def test_a_token_kubeconfig_with_a_reachable_server_passes():
    assert run(kubeconfig()) == []


@pytest.mark.parametrize(
    ("command", "platform"),
    [
        ("kubelogin", "AKS"),
        ("aws", "EKS"),
        ("gke-gcloud-auth-plugin", "GKE"),
        ("/usr/local/bin/kubelogin", "AKS"),
    ],
)
def test_an_exec_plugin_missing_from_the_image_names_the_platform_fix(command, platform):
    (problem,) = run(kubeconfig(user=exec_user(command, "get-token")))
    assert problem.field == "users[airflow].user.exec.command"
    assert problem.value == command
    assert "not in the image" in str(problem)
    assert platform in problem.fix and "include/docker/mint-kubeconfig.sh" in problem.fix


def test_kubelogin_fix_says_how_to_build_it_into_the_image():
    (problem,) = run(kubeconfig(user=exec_user("kubelogin", "get-token", "--login", "spn")))
    assert "KUBELOGIN_VERSION" in problem.fix and "KUBELOGIN_SHA256" in problem.fix


@pytest.mark.parametrize(
    "args", [("get-token",), ("get-token", "--login", "azurecli"), ("get-token", "-l", "devicecode")]
)
def test_kubelogin_in_the_image_still_cannot_log_in_a_person(args):
    (problem,) = run(kubeconfig(user=exec_user("kubelogin", *args)), programs={"kubelogin"})
    assert problem.field == "users[airflow].user.exec.args"
    assert "convert-kubeconfig -l spn" in problem.fix


@pytest.mark.parametrize("mode", ["spn", "msi", "workloadidentity"])
def test_kubelogin_in_the_image_with_a_non_interactive_mode_passes(mode):
    assert (
        run(kubeconfig(user=exec_user("kubelogin", "get-token", "--login=" + mode)), programs={"kubelogin"})
        == []
    )


@pytest.mark.parametrize(
    ("server", "loopback"),
    [
        ("https://127.0.0.1:41234", True),
        ("https://127.0.1.1:6443", True),
        ("https://localhost:6443", True),
        ("https://api.localhost", True),
        ("https://[::1]:6443", True),
        ("https://0.0.0.0:6443", True),
        ("https://host.docker.internal:41234", False),
        ("https://10.0.0.1:443", False),
        ("http://kubesim:6443", False),
        ("https://aks-ray.hcp.westeurope.azmk8s.io:443", False),
    ],
)
def test_loopback_servers(server, loopback):
    assert is_loopback(server) is loopback
    problems = run(kubeconfig(server=server))
    assert bool(problems) is loopback
    if loopback:
        assert problems[0].field == "clusters[aks].cluster.server"
        assert "host.docker.internal" in problems[0].fix and "tls-server-name" in problems[0].fix


@pytest.mark.parametrize(
    ("facts", "uid", "readable"),
    [
        (FileFacts(True, uid=1000, gid=1000, mode=0o600), 1000, True),
        (FileFacts(True, uid=1000, gid=1000, mode=0o600), 50000, False),
        (FileFacts(True, uid=1000, gid=0, mode=0o640), 50000, True),
        (FileFacts(True, uid=1000, gid=1000, mode=0o644), 50000, True),
        (FileFacts(True, uid=1000, gid=1000, mode=0o200), 1000, False),
        (FileFacts(True, uid=1000, gid=1000, mode=0o000), 0, True),
    ],
)
def test_readable_by(facts, uid, readable):
    assert readable_by(facts, uid, 0) is readable


def test_an_unreadable_0600_file_says_which_airflow_uid_reads_it():
    (problem,) = run(kubeconfig(), facts=FileFacts(True, uid=1000, gid=1000, mode=0o600))
    assert "cannot read" in problem.problem and "mode 0600" in problem.problem
    assert problem.value == "AIRFLOW_UID=50000"
    assert "AIRFLOW_UID=1000" in problem.fix


def test_all_three_problems_are_reported_at_once():
    problems = run(
        kubeconfig(server="https://127.0.0.1:6443", user=exec_user("kubelogin", "get-token")),
        facts=FileFacts(True, uid=1000, gid=1000, mode=0o600),
    )
    assert [p.field for p in problems] == [
        f"kubeconfig {PATH} (from ~/.kube/config)",
        "clusters[aks].cluster.server",
        "users[airflow].user.exec.command",
    ]


def test_a_missing_file_and_the_directory_docker_mounts_instead():
    (missing,) = run(None, facts=FileFacts(exists=False))
    assert "KUBECONFIG_FILE" in missing.fix
    (directory,) = run(None, facts=FileFacts(exists=True, is_dir=True))
    assert "directory" in directory.problem and directory.value == "~/.kube/config"


def test_host_paths_in_the_kubeconfig_are_found_relative_to_it():
    config = kubeconfig(
        cluster_extra={"certificate-authority": "ca.crt"},
        user={
            "client-certificate": "/home/me/.minikube/client.crt",
            "client-key": "/home/me/.minikube/client.key",
        },
    )
    problems = run(config, files={"/opt/airflow/kube/ca.crt"})
    assert [(p.field, p.value) for p in problems] == [
        ("users[airflow].user.client-certificate", "/home/me/.minikube/client.crt"),
        ("users[airflow].user.client-key", "/home/me/.minikube/client.key"),
    ]
    assert "--flatten" in problems[0].fix


def test_only_the_context_airflow_uses_is_checked():
    config = kubeconfig()
    config["clusters"].append({"name": "kind", "cluster": {"server": "https://127.0.0.1:41234"}})
    config["users"].append({"name": "dev", "user": exec_user("kubelogin")})
    config["contexts"].append({"name": "kind", "context": {"cluster": "kind", "user": "dev"}})
    assert run(config) == []
    assert len(run({**config, "current-context": "kind"})) == 2


def test_no_current_context():
    (problem,) = run({**kubeconfig(), "current-context": ""})
    assert problem.field == "current-context" and "use-context" in problem.fix


NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def token_expiring_in(delta: timedelta) -> str:
    return encode({"sub": "system:serviceaccount:airflow:airflow", "exp": int((NOW + delta).timestamp())})


def test_an_expired_token_is_refused_with_the_way_to_renew_it():
    config = kubeconfig(user={"token": token_expiring_in(-timedelta(hours=2))})
    problems = check(
        config,
        path=PATH,
        host_path="./airflow.kubeconfig",
        facts=READABLE,
        uid=AIRFLOW_UID,
        gid=0,
        has_program=lambda command: False,
        has_file=lambda path: False,
        now=NOW,
    )

    assert len(problems) == 1
    text = str(problems[0])
    assert "users[airflow].user.token" in text and "expired 2h 0m ago (2026-12-04T10:00:00Z)" in text
    assert "mint-kubeconfig.sh" in text and "--renew-every" in text
    assert "eyJ" not in text, "the token itself never reaches a message"


def test_a_token_expiring_within_a_day_passes_with_a_warning_and_a_longer_one_without():
    soon = kubeconfig(user={"token": token_expiring_in(timedelta(hours=5))})
    later = kubeconfig(user={"token": token_expiring_in(timedelta(days=3))})

    assert (
        check(
            soon,
            path=PATH,
            host_path="x",
            facts=READABLE,
            uid=AIRFLOW_UID,
            gid=0,
            has_program=lambda c: False,
            has_file=lambda p: False,
            now=NOW,
        )
        == []
    )
    [warning] = token_warnings(soon, now=NOW)
    assert "expires in 5h 0m" in warning and "--renew-every" in warning
    assert token_warnings(later, now=NOW) == []


def test_a_token_that_is_no_jwt_is_not_judged():
    assert token_warnings(kubeconfig(user={"token": "abc"}), now=NOW) == []
    assert run(kubeconfig(user={"token": "abc"})) == []
