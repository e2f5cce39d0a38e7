"""`make run`: Airflow (devtools.components, every listener on loopback) with this project's DAGs, against
kubesim by default, with a read-only and a restricted user (devtools.run_access).

Settings, from the environment (README "make run"):

* ``AIRFLOW_PORT`` (8080): the port of Airflow's UI and REST API, on 127.0.0.1.
* ``TIME_SCALE`` (1): kubesim's simulated seconds per real second (10: a 60 s RayJob takes 6 s).
* ``CLUSTER`` (``kubesim``): ``kubesim`` starts the emulated cluster with every queue setup of
  include/manifests/kueue/ side by side, so every shipped DAG's default queue exists and its RayJobs fit;
  ``kubeconfig`` uses the cluster of ``KUBECONFIG`` (default ~/.kube/config) as it is (nothing applied)
  and starts no kubesim; ``real`` starts the real control plane of devtools/realcluster.py (etcd,
  kube-apiserver, Kueue, KubeRay; `make realcluster` builds it) with the same queue setups, so real Kueue
  admits and preempts the DAGs' RayJobs (their Ray jobs run on simulated dashboards, at ``TIME_SCALE``);
  ``multikueue`` starts kubesim as a MultiKueue manager (every queue setup, plus
  include/manifests/kueue/multikueue/manager/) and two worker clusters with one GPU each
  (devtools.multikueue), gives Airflow a ``kueue_worker_<cluster>`` connection per worker and, with the
  DAGs unpaused, triggers three text_classifier_finetune runs on ``multikueue-queue`` once its first
  run has finished: two run at once on different workers, the third waits on the manager.
  An exported ``KUBECONFIG`` alone never selects a real cluster.
* ``UNPAUSE``: whether the DAGs start unpaused. Default 1 on kubesim and on ``CLUSTER=real`` (a throwaway
  cluster of this run's own), 0 on a ``kubeconfig`` cluster, so a cluster of someone's gets scheduled
  runs only when asked for with ``UNPAUSE=1``.

Every start is a fresh one: kubesim's cluster lives in memory, so Airflow's metadata database starts
empty too (Airflow history naming RayJobs of a gone cluster would fail its runs), and the previous
start's logs are moved to ``.run/previous/``. The database is a throwaway PostgreSQL server when the
machine has one (``devtools.postgres``: on SQLite, Airflow fails concurrent writes such as
``airflow backfill create`` with "database is locked"), else SQLite in ``.run/airflow/``.

The start fails within seconds, quoting the failing part's log, when the port is taken or kubesim or an
Airflow component exits, and `make run` stops everything when one of them exits later. Ctrl-C stops
everything.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from devtools.airflow import (
    PASSWORD,
    ROOT,
    USERNAME,
    Airflow,
    AirflowStartError,
    port_user,
    start_airflow,
)
from devtools.kubesim_process import (
    ALL_SETUPS,
    KubesimProcess,
    KubesimStartError,
    local_queues,
    log_tail,
    setup_manifests,
    start_kubesim,
)
from devtools.multikueue import (
    MANAGER_MANIFESTS,
    connect_workers,
    kubesim_options,
    start_showcase,
    worker_connection_id,
)
from devtools.postgres import metadata_database
from devtools.realcluster import RealCluster, RealClusterUnavailable, apply_manifests, run_realcluster
from devtools.run_access import (
    READ_ONLY_USER,
    RESTRICTED_DAGS,
    RESTRICTED_TEAM,
    RESTRICTED_USER,
    TEAMS,
    generated_password,
    multi_team_environment,
    team_bundles,
)

RUN_DIR = ROOT / ".run"
KUEUE_CONFIG = ROOT / "include" / "kueue-config.yaml"
"""Kueue's manager configuration as this project needs it (RayServices admitted through their RayClusters)."""
AIRFLOW_HOME = RUN_DIR / "airflow"
PREVIOUS = RUN_DIR / "previous"
CLI_STATE = RUN_DIR / "airflow-cli.json"
"""What `make airflow` needs to reach this run's Airflow: the environment its components run with."""
LOCK = RUN_DIR / "make-run.lock"
READY_BANNER = "make run: ready"
"""Printed once the UI is healthy (tests wait for it)."""


class RunError(Exception):
    """`make run` cannot start or must stop; the message says why and what to do."""


@dataclass(frozen=True)
class Settings:
    port: int
    time_scale: float
    cluster: str
    kubeconfig: Path | None
    unpause: bool


def settings_from(env: dict[str, str]) -> Settings:
    """Read and check the environment knobs; a bad value is a RunError naming the variable and the fix."""
    port_text = env.get("AIRFLOW_PORT") or "8080"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RunError(f"AIRFLOW_PORT={port_text!r} is not a port; use a number such as 8080 or 8081")
    scale_text = env.get("TIME_SCALE") or "1"
    try:
        time_scale = float(scale_text)
    except ValueError:
        time_scale = 0.0
    if not time_scale > 0:
        raise RunError(f"TIME_SCALE={scale_text!r} is not a positive number; use e.g. 1 (real time) or 10")
    cluster = env.get("CLUSTER") or "kubesim"
    if cluster not in ("kubesim", "kubeconfig", "real", "multikueue"):
        raise RunError(
            f"CLUSTER={cluster!r} is not known; use kubesim (default), multikueue, real or kubeconfig"
        )
    unpause_text = env.get("UNPAUSE") or ("0" if cluster == "kubeconfig" else "1")
    if unpause_text not in ("0", "1"):
        raise RunError(f"UNPAUSE={unpause_text!r} is not 0 or 1")
    kubeconfig = None
    if cluster == "kubeconfig":
        named = env.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        if os.pathsep in named:
            raise RunError(f"KUBECONFIG={named!r} lists several files; point it at the one to use")
        kubeconfig = Path(named).expanduser()
        if not kubeconfig.is_file():
            raise RunError(
                f"CLUSTER=kubeconfig, but the kubeconfig {kubeconfig} does not exist; set KUBECONFIG"
            )
    return Settings(
        port=int(port_text),
        time_scale=time_scale,
        cluster=cluster,
        kubeconfig=kubeconfig,
        unpause=unpause_text == "1",
    )


def describe_kubeconfig(path: Path) -> str:
    """The current context of a kubeconfig, "context X, server Y", for the banner."""
    import yaml

    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return f"unreadable: {exc}"
    context_name = config.get("current-context") or "(none)"
    contexts = {c.get("name"): c.get("context") or {} for c in config.get("contexts") or []}
    clusters = {c.get("name"): c.get("cluster") or {} for c in config.get("clusters") or []}
    cluster = clusters.get(contexts.get(context_name, {}).get("cluster"), {})
    return f"context {context_name}, server {cluster.get('server', '(unknown)')}"


def take_lock() -> int:
    """Hold ``.run/make-run.lock`` for as long as this process lives (the OS drops it when it dies), so a
    second `make run` in this checkout stops at once instead of taking the first one's state away."""
    RUN_DIR.mkdir(exist_ok=True)
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunError(
            f"`make run` is already running in this checkout (pid {holder}); stop it first (Ctrl-C there)"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def keep_previous() -> None:
    """Move the previous start's Airflow home and kubesim log to ``.run/previous/`` (one generation)."""
    leftovers = [AIRFLOW_HOME, RUN_DIR / "kubesim.log", CLI_STATE]
    if not any(path.exists() for path in leftovers):
        return
    shutil.rmtree(PREVIOUS, ignore_errors=True)
    PREVIOUS.mkdir(parents=True)
    for path in leftovers:
        if path.exists():
            shutil.move(str(path), PREVIOUS / path.name)
    for kubeconfig in RUN_DIR.glob("kubesim*.kubeconfig"):  # the manager's and its workers'
        kubeconfig.unlink()


def write_cli_state(airflow: Airflow) -> None:
    """What `make airflow` runs the CLI with: the variables this run set for Airflow's components."""
    changed = {key: value for key, value in airflow.env.items() if os.environ.get(key) != value}
    CLI_STATE.write_text(json.dumps({"pid": os.getpid(), "url": airflow.url, "env": changed}, indent=1))
    CLI_STATE.chmod(0o600)


def check_kubesim(kubesim: KubesimProcess | None) -> None:
    if kubesim is not None and (code := kubesim.exited()) is not None:
        raise RunError(
            f"kubesim exited with code {code}; last lines of {kubesim.log_path}:\n{log_tail(kubesim.log_path)}"
        )


def banner(
    settings: Settings,
    kubesim: KubesimProcess | None,
    airflow: Airflow,
    database_url: str | None,
    real: RealCluster | None = None,
) -> str:
    rel = os.path.relpath
    lines = [""]
    if real is not None:
        lines += [
            f"Cluster: the real control plane at {real.url} (etcd, kube-apiserver, Kueue, KubeRay; "
            f"Ray jobs simulated x{settings.time_scale:g}, TIME_SCALE)",
            f"  LocalQueues: {', '.join(local_queues(setup_manifests(ALL_SETUPS)))}",
            f"  kubectl --kubeconfig {rel(real.kubeconfig)} get rayjobs,workloads -A",
            f"  Its logs: {rel(real.logs)}",
        ]
    elif kubesim is not None:
        applied = [*setup_manifests(ALL_SETUPS), *([MANAGER_MANIFESTS] if kubesim.workers else [])]
        lines += [
            f"Cluster: kubesim at {kubesim.url} (simulated time x{settings.time_scale:g}, TIME_SCALE)",
            f"  LocalQueues: {', '.join(local_queues(applied))}",
            f"  kubectl --kubeconfig {rel(kubesim.kubeconfig)} get rayjobs,workloads -A",
        ]
        if kubesim.workers:
            lines += [
                f"  MultiKueue: this cluster is the manager of {', '.join(kubesim.workers)} (one GPU each); "
                "LocalQueue ray/multikueue-queue dispatches to them",
                *(
                    f"  Worker {name}: Airflow connection {worker_connection_id(name)}, "
                    f"kubectl --kubeconfig {rel(path)} get rayjobs,workloads -A"
                    for name, path in kubesim.workers.items()
                ),
            ]
    else:
        lines.append(
            f"Cluster: REAL, from {settings.kubeconfig} ({describe_kubeconfig(settings.kubeconfig)})"
        )
    paused = "unpaused" if settings.unpause else "paused (UNPAUSE=1 unpauses them)"
    lines += [
        f"Airflow UI: {airflow.url}  login: {USERNAME} / {PASSWORD}  (AIRFLOW_PORT)",
        f"  Read-only user: {READ_ONLY_USER} / {generated_password(airflow.home, READ_ONLY_USER)}  (role viewer: "
        "reads every DAG and the Kueue pages; cannot trigger, clear or mark)",
        f"  Restricted user: {RESTRICTED_USER} / {generated_password(airflow.home, RESTRICTED_USER)}  (role user, "
        f"team {RESTRICTED_TEAM}: reads and runs {', '.join(RESTRICTED_DAGS)} only; the Kueue pages show "
        "other DAGs' workloads as counts)",
        f"  DAGs start {paused}",
        "  Metadata database: "
        + (
            "a throwaway PostgreSQL server" if database_url else f"SQLite, {rel(airflow.home / 'airflow.db')}"
        ),
        '  CLI: make airflow ARGS="dags list"',
        f"  Logs: {rel(airflow.log_path)}, task logs in {rel(airflow.home / 'logs')}"
        + (f", {rel(kubesim.log_path)}" if kubesim else ""),
        f"{READY_BANNER}. Press Ctrl-C to stop.",
    ]
    return "\n".join(lines)


@contextlib.contextmanager
def start_real(time_scale: float):
    """The real control plane in ``.run/realcluster/`` (fresh each start: its etcd lives there) with every
    queue setup of include/manifests/kueue/ created in it."""
    workdir = RUN_DIR / "realcluster"
    shutil.rmtree(workdir, ignore_errors=True)
    print(
        "Starting the real control plane (etcd, kube-apiserver, Kueue, KubeRay; about 30 s) ...", flush=True
    )
    with run_realcluster(workdir, time_scale=time_scale) as real:
        created = apply_manifests(real.kubeconfig, setup_manifests(ALL_SETUPS))
        print(f"Created {len(created)} objects of include/manifests/kueue/ in it.", flush=True)
        yield real


def supervise(kubesim: KubesimProcess | None, airflow: Airflow, interval: float = 1.0) -> None:
    """Return never; raise RunError as soon as kubesim or a part of Airflow has exited."""
    seen = set(airflow.live_components())
    while True:
        check_kubesim(kubesim)
        failure = airflow.failure(seen)
        if failure is not None:
            raise RunError(failure)
        time.sleep(interval)


def run(settings: Settings) -> None:
    taken_by = port_user(settings.port)
    if taken_by is not None:
        raise RunError(
            f"port {settings.port} is already in use ({taken_by}); stop it or choose another port, "
            f"e.g. AIRFLOW_PORT={settings.port + 1} make run"
        )
    keep_previous()
    with metadata_database() as database_url, contextlib.ExitStack() as stack:
        kubesim = None
        real = None
        airflow = None
        worker_connections: dict[str, str] = {}
        try:
            if settings.cluster == "real":
                real = stack.enter_context(start_real(settings.time_scale))
                kubeconfig = Path(real.kubeconfig)
            elif settings.cluster in ("kubesim", "multikueue"):
                if os.environ.get("KUBECONFIG"):
                    print(
                        f"KUBECONFIG={os.environ['KUBECONFIG']} is ignored: make run uses kubesim "
                        "(CLUSTER=kubeconfig make run uses that cluster).",
                        flush=True,
                    )
                multikueue = settings.cluster == "multikueue"
                print(
                    "Starting kubesim with every queue setup of include/manifests/kueue/"
                    + (" as a MultiKueue manager, and its worker clusters" if multikueue else "")
                    + " ...",
                    flush=True,
                )
                kubesim = start_kubesim(
                    RUN_DIR,
                    queues=ALL_SETUPS,
                    time_scale=settings.time_scale,
                    kueue_config=KUEUE_CONFIG,
                    tls=True,
                    **(kubesim_options(RUN_DIR) if multikueue else {}),
                )
                kubeconfig = kubesim.kubeconfig
                if multikueue:
                    worker_connections = connect_workers(kubeconfig, kubesim.workers)
            else:
                kubeconfig = settings.kubeconfig
                print(
                    f"CLUSTER=kubeconfig: Airflow uses the REAL cluster of {kubeconfig} "
                    f"({describe_kubeconfig(kubeconfig)}); kubesim is not started.",
                    flush=True,
                )
            print(f"Starting Airflow on http://127.0.0.1:{settings.port} (about 30 s) ...", flush=True)
            airflow = start_airflow(
                AIRFLOW_HOME,
                kubeconfig=kubeconfig,
                port=settings.port,
                database_url=database_url,
                healthy=True,
                # About 30 s on an idle machine; minutes where other work takes the cores.
                timeout=300,
                while_waiting=lambda: check_kubesim(kubesim),
                extra_env={
                    "KUBECONFIG": str(kubeconfig),  # everything in Airflow agrees on the one cluster
                    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(not settings.unpause),
                    # Teams, so that a user may read some DAGs only (devtools.run_access).
                    **multi_team_environment(team_bundles(ROOT / "dags", AIRFLOW_HOME / "bundles")),
                    **worker_connections,  # CLUSTER=multikueue: kueue_worker_<cluster>
                },
                teams=TEAMS,
            )
            write_cli_state(airflow)
            print(banner(settings, kubesim, airflow, database_url, real), flush=True)
            if worker_connections and settings.unpause:
                start_showcase(airflow.url, airflow.log_path)
            supervise(kubesim, airflow)
        except (KubesimStartError, AirflowStartError, RealClusterUnavailable, TimeoutError) as exc:
            raise RunError(str(exc)) from exc
        finally:
            print("\nStopping...", flush=True)
            if airflow is not None:
                airflow.stop()
            if kubesim is not None:
                kubesim.stop()
            CLI_STATE.unlink(missing_ok=True)


def main() -> int:
    try:
        settings = settings_from(dict(os.environ))
        lock = take_lock()
        try:
            run(settings)
        finally:
            os.close(lock)
    except KeyboardInterrupt:
        return 0
    except RunError as exc:
        print(f"\nmake run failed: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def _interrupt(signum, frame):
    """Ctrl-C or SIGTERM: stop everything, once. `make` passes a SIGTERM on to this process, which thus
    gets it twice; a second interrupt must not cut the cleanup short and orphan Airflow and kubesim."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
