"""Will this kubeconfig work for Airflow inside a container? The preflight docker-compose's airflow-init runs.

A kubeconfig that works on the host often fails in the Airflow containers, and only once the first task talks
to the cluster, with an error that does not say why:

* it calls an exec credential plugin (``kubelogin`` for Entra-ID AKS, ``aws`` for EKS,
  ``gke-gcloud-auth-plugin`` for GKE) that is a host program, not in the image;
* its server is a loopback address (kind, minikube, k3d, ``kubectl port-forward``), which inside a container
  is the container itself;
* it is bind-mounted with the host's owner and mode, so a 0600 file is readable only by a container user
  whose uid is its owner (``AIRFLOW_UID``);
* it names files (certificate-authority, client-certificate, client-key, tokenFile) by host paths the
  container does not have; or the file was never there and Docker mounted an empty directory instead;
* its bearer token (a ServiceAccount token is a JWT with an expiry) has expired: every request would be
  refused with 401. One that expires within a day is a warning (``token_warnings``): renew it.

:func:`check` is pure: it takes the parsed kubeconfig and what the container knows about the file and its
programs, and returns every problem at once (one run tells the user everything to fix), each a
:class:`KubeconfigError` naming the field, the value found and the fix. :func:`main` gathers those facts and
is the command airflow-init runs::

    python -m kueue_ray.kubeconfig_check --uid "$AIRFLOW_UID" --gid 0 /opt/airflow/kube/config

It only imports the standard library and PyYAML, so it runs before Airflow is configured.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import posixpath
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from kueue_ray.errors import KueueRayError
from kueue_ray.tokens import lifetime_problem

MINT = "include/docker/mint-kubeconfig.sh"
"""The repository's script that writes a ServiceAccount-token kubeconfig: no exec plugin, embedded CA."""

RENEW_FIX = (
    f"mint a new token: `{MINT} airflow.kubeconfig` on the host (running compose stacks see it at once); "
    f"`{MINT} --renew-every 12h airflow.kubeconfig` keeps renewing it (README: docker compose against a cluster)"
)

MINT_FIX = (
    f"mint a ServiceAccount-token kubeconfig on the host, which needs no plugin: `{MINT} airflow.kubeconfig` "
    "(README: docker compose against a cluster), then KUBECONFIG_FILE=./airflow.kubeconfig in .env"
)

EXEC_PLUGIN_FIXES = {
    "kubelogin": (
        "AKS with Entra ID: build the image with kubelogin "
        "(`docker compose build --build-arg KUBELOGIN_VERSION=<v> --build-arg KUBELOGIN_SHA256=<sha256>`) and "
        "use a non-interactive login mode, or "
    ),
    "aws": "EKS: `aws eks get-token` needs the AWS CLI and your AWS credentials inside the container; instead, ",
    "aws-iam-authenticator": "EKS: aws-iam-authenticator and your AWS credentials are host-only; instead, ",
    "gke-gcloud-auth-plugin": (
        "GKE: gke-gcloud-auth-plugin needs the gcloud SDK and your gcloud login inside the container; instead, "
    ),
}

KUBELOGIN_HUMAN_MODES = {"devicecode", "interactive", "azurecli", "azd"}
"""kubelogin login modes that need a person or the host's Azure CLI login (devicecode is the default)."""

REFERENCED_FILES = (
    ("cluster", "certificate-authority"),
    ("user", "client-certificate"),
    ("user", "client-key"),
    ("user", "tokenFile"),
)


class KubeconfigError(KueueRayError):
    """The mounted kubeconfig will not work for the Airflow containers; found before any task runs."""


@dataclass(frozen=True)
class FileFacts:
    """What ``stat`` says about the kubeconfig inside the container (``exists`` False: nothing there)."""

    exists: bool
    is_dir: bool = False
    uid: int = 0
    gid: int = 0
    mode: int = 0o600

    @classmethod
    def of(cls, path: str) -> FileFacts:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return cls(exists=False)
        return cls(True, stat.S_ISDIR(st.st_mode), st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))


def readable_by(facts: FileFacts, uid: int, gid: int) -> bool:
    """Whether a process running as ``uid``:``gid`` can read the file (root reads everything)."""
    if uid == 0:
        return True
    if facts.uid == uid:
        return bool(facts.mode & stat.S_IRUSR)
    if facts.gid == gid:
        return bool(facts.mode & stat.S_IRGRP)
    return bool(facts.mode & stat.S_IROTH)


def is_loopback(server: str) -> bool:
    """True for a server URL whose host is this machine: 127.0.0.0/8, ::1, 0.0.0.0, localhost."""
    host = (urlsplit(server).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _named(entries: object, name: str) -> dict | None:
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    return None


def _kubelogin_mode(args: list) -> str:
    for index, arg in enumerate(args):
        if arg in ("--login", "-l") and index + 1 < len(args):
            return str(args[index + 1])
        if isinstance(arg, str) and arg.startswith("--login="):
            return arg.split("=", 1)[1]
    return "devicecode"


def check(
    config: dict | None,
    *,
    path: str,
    host_path: str,
    facts: FileFacts,
    uid: int,
    gid: int,
    has_program: Callable[[str], bool],
    has_file: Callable[[str], bool],
    context: str | None = None,
    now: datetime | None = None,
) -> list[KubeconfigError]:
    """Every reason the kubeconfig at ``path`` (mounted from ``host_path``) fails for a container user
    ``uid``:``gid``; empty when it will work. ``config`` is the parsed file (None when it could not be read);
    ``has_program`` and ``has_file`` answer for the container's PATH and filesystem; ``now`` judges the
    token's expiry (default: the current time)."""
    where = f"kubeconfig {path} (from {host_path})"
    if not facts.exists:
        return [
            KubeconfigError(
                "no kubeconfig is mounted",
                field=where,
                value=path,
                fix="set KUBECONFIG_FILE in .env to your kubeconfig, or to one minted with " + MINT,
            )
        ]
    if facts.is_dir:
        return [
            KubeconfigError(
                "is a directory: Docker creates one when the host file does not exist",
                field=where,
                value=host_path,
                fix=f"set KUBECONFIG_FILE in .env to a kubeconfig that exists on the host ({MINT} writes one)",
            )
        ]
    problems = []
    if not readable_by(facts, uid, gid):
        problems.append(
            KubeconfigError(
                f"the Airflow containers run as uid {uid}, gid {gid} and cannot read this file "
                f"(owner uid {facts.uid}, gid {facts.gid}, mode {facts.mode:04o})",
                field=where,
                value=f"AIRFLOW_UID={uid}",
                fix=(
                    f"run the containers as the file's owner: AIRFLOW_UID={facts.uid} in .env "
                    "(`echo AIRFLOW_UID=$(id -u) > .env` as the owner), then `docker compose up airflow-init`; "
                    "do not make a credentials file readable by everyone"
                ),
            )
        )
    if config is None:
        return problems
    if not isinstance(config, dict):
        return [
            *problems,
            KubeconfigError("is not a kubeconfig", field=where, value=type(config).__name__, fix=MINT_FIX),
        ]
    problems += _check_content(config, path=path, context=context, has_program=has_program, has_file=has_file)
    token, user_name = _token(config, context)
    lifetime = lifetime_problem(token, now or datetime.now(UTC))
    if lifetime is not None and lifetime[0] == "expired":
        problems.append(
            KubeconfigError(
                f"the bearer token {lifetime[1]}: the API server refuses it (401)",
                field=f"users[{user_name}].user.token",
                value="<token>",
                fix=RENEW_FIX,
            )
        )
    return problems


def _token(config: dict, context: str | None) -> tuple[str | None, str]:
    """The bearer token of the context Airflow uses, and its user's name."""
    entry = _named(config.get("contexts"), context or config.get("current-context") or "") or {}
    user_name = (entry.get("context") or {}).get("user", "")
    user = (_named(config.get("users"), user_name) or {}).get("user") or {}
    token = user.get("token")
    return (token if isinstance(token, str) else None), user_name


def token_warnings(config: object, *, context: str | None = None, now: datetime) -> list[str]:
    """What works today but will not for long: a bearer token that expires within a day."""
    if not isinstance(config, dict):
        return []
    token, user_name = _token(config, context)
    lifetime = lifetime_problem(token, now)
    if lifetime is None or lifetime[0] != "expiring":
        return []
    return [
        f"users[{user_name}].user.token: the bearer token {lifetime[1]}; after that every task is refused "
        f"(401). Fix: {RENEW_FIX}"
    ]


def _check_content(
    config: dict,
    *,
    path: str,
    context: str | None,
    has_program: Callable[[str], bool],
    has_file: Callable[[str], bool],
) -> list[KubeconfigError]:
    """The problems of the context Airflow uses: its cluster's address, its user's credentials, the files
    both name."""
    context_name = context or config.get("current-context") or ""
    entry = _named(config.get("contexts"), context_name)
    if not context_name or entry is None:
        return [
            KubeconfigError(
                "names no context Airflow can use",
                field="current-context",
                value=context_name,
                fix="`kubectl config use-context <name>` on the host before mounting it, or " + MINT_FIX,
            )
        ]
    spec = entry.get("context") or {}
    cluster_name, user_name = spec.get("cluster", ""), spec.get("user", "")
    cluster = (_named(config.get("clusters"), cluster_name) or {}).get("cluster") or {}
    user = (_named(config.get("users"), user_name) or {}).get("user") or {}
    problems = []

    server = str(cluster.get("server") or "")
    if is_loopback(server):
        problems.append(
            KubeconfigError(
                "is a loopback address: inside a container it is the container itself",
                field=f"clusters[{cluster_name}].cluster.server",
                value=server,
                fix=(
                    "give the containers an address they can reach: the compose file maps host.docker.internal "
                    f"to the host, so `{MINT} --server https://host.docker.internal:<port> airflow.kubeconfig` "
                    "(it keeps TLS valid with tls-server-name) when the API server listens beyond loopback "
                    "(kind: networking.apiServerAddress 0.0.0.0), or the cluster's address on its Docker network "
                    "(`kind get kubeconfig --internal`, with the containers attached to the `kind` network)"
                ),
            )
        )

    exec_spec = user.get("exec")
    if isinstance(exec_spec, dict):
        command = str(exec_spec.get("command") or "")
        program = posixpath.basename(command)
        field = f"users[{user_name}].user.exec.command"
        if not has_program(command):
            problems.append(
                KubeconfigError(
                    "is an exec credential plugin that is not in the image",
                    field=field,
                    value=command,
                    fix=EXEC_PLUGIN_FIXES.get(
                        program, "install it in the image (include/docker/Dockerfile), or "
                    )
                    + MINT_FIX,
                )
            )
        elif program == "kubelogin":
            mode = _kubelogin_mode(list(exec_spec.get("args") or []))
            if mode in KUBELOGIN_HUMAN_MODES:
                problems.append(
                    KubeconfigError(
                        f"kubelogin login mode {mode} needs a person or the host's Azure CLI login",
                        field=f"users[{user_name}].user.exec.args",
                        value=mode,
                        fix=(
                            "convert it to a mode a container can use: `kubelogin convert-kubeconfig -l spn` "
                            "(AAD_SERVICE_PRINCIPAL_CLIENT_ID and _SECRET in .env), `-l msi` or "
                            "`-l workloadidentity`; or " + MINT_FIX
                        ),
                    )
                )

    base = posixpath.dirname(path)
    for section, key in REFERENCED_FILES:
        owner, name = (cluster, cluster_name) if section == "cluster" else (user, user_name)
        value = owner.get(key)
        if not value:
            continue
        resolved = value if posixpath.isabs(value) else posixpath.join(base, value)
        if not has_file(resolved):
            problems.append(
                KubeconfigError(
                    "is a host path the container does not have",
                    field=f"{section}s[{name}].{section}.{key}",
                    value=value,
                    fix=(
                        "embed the data: `kubectl config view --raw --minify --flatten > airflow.kubeconfig` "
                        "on the host and set KUBECONFIG_FILE=./airflow.kubeconfig in .env, or " + MINT_FIX
                    ),
                )
            )
    return problems


def _has_program(command: str) -> bool:
    if os.sep in command:
        return os.path.isfile(command) and os.access(command, os.X_OK)
    return shutil.which(command) is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kueue_ray.kubeconfig_check",
        description="Check that a kubeconfig works for Airflow inside a container; print the fix for each problem.",
    )
    parser.add_argument("path", help="the kubeconfig as the containers see it")
    parser.add_argument("--uid", type=int, default=os.getuid(), help="uid the Airflow containers run as")
    parser.add_argument("--gid", type=int, default=os.getgid(), help="gid the Airflow containers run as")
    parser.add_argument("--host-path", help="where the file comes from on the host, for the messages")
    parser.add_argument("--context", help="the context Airflow uses (default: current-context)")
    args = parser.parse_args(argv)

    import yaml

    facts = FileFacts.of(args.path)
    config = None
    readable_here = facts.exists and not facts.is_dir and os.access(args.path, os.R_OK)
    if readable_here:
        try:
            with open(args.path, encoding="utf-8") as handle:
                config = yaml.safe_load(handle)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            print(f"{args.path}: cannot parse the kubeconfig: {exc}", file=sys.stderr)
            return 1
    problems = check(
        config,
        path=args.path,
        host_path=args.host_path or args.path,
        facts=facts,
        uid=args.uid,
        gid=args.gid,
        has_program=_has_program,
        has_file=os.path.isfile,
        context=args.context,
    )
    if not problems and facts.exists and not facts.is_dir and not readable_here:
        print(
            f"{args.path}: cannot read it as uid {os.getuid()} to check its content; run the check as root "
            "(as airflow-init does) or as the file's owner",
            file=sys.stderr,
        )
        return 1
    if not problems:
        for warning in token_warnings(config, context=args.context, now=datetime.now(UTC)):
            print(f"{args.path}: warning: {warning}", file=sys.stderr)
        print(f"{args.path}: usable by the Airflow containers (uid {args.uid}, gid {args.gid})")
        return 0
    print(f"{args.path}: {len(problems)} problem(s) stop Airflow from reaching the cluster:", file=sys.stderr)
    for number, problem in enumerate(problems, 1):
        print(f"{number}. {problem}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
