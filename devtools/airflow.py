"""Run a real Airflow (scheduler, dag-processor, triggerer, api-server) for `make run`, `make demo` and the
end-to-end tests, and talk to it through its REST API like a user or CI would.

The components run as `airflow standalone` would run them, but through devtools.components, which binds
every listener (the log server included) to loopback. Starting it in its own session and signalling the
whole process group is the reliable way to stop everything: SIGTERM to the parent alone orphans its children
(scheduler, api-server, dag-processor, triggerer), and the triggerer takes ~20 s to exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from devtools.airflow_api import PASSWORD, USERNAME, AirflowApi

ROOT = Path(__file__).resolve().parent.parent


COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
"""What devtools.components runs (as `airflow standalone` would), each as `airflow <component> [options]`, its
output prefixed "<component> | "."""


PORT_RESERVATIONS = Path("/tmp/kueue-ray-ports")
"""One empty file per port ``free_port`` handed out, so that no other process on the machine picks it."""
RESERVED_SECONDS = 600.0
"""How long a handed-out port stays reserved: its server binds it well within that, and from then on the
bind test refuses it."""


def _reserve(port: int) -> bool:
    """Claim ``port`` for this process among every caller of ``free_port`` on the machine (an exclusive
    create); an older claim than ``RESERVED_SECONDS`` has expired."""
    PORT_RESERVATIONS.mkdir(exist_ok=True)
    claim = PORT_RESERVATIONS / str(port)
    with contextlib.suppress(FileNotFoundError):
        if time.time() - claim.stat().st_mtime > RESERVED_SECONDS:
            claim.unlink(missing_ok=True)
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the machine's ephemeral range, that no other ``free_port`` on the
    machine handed out in the last ``RESERVED_SECONDS``. A port the kernel hands out (``bind(0)``) is one
    that outgoing connections also take, so on a busy machine another test's connection can hold it by the
    time the server binds it; below the range only another pick can, and two test processes once picked
    the same port for a PostgreSQL and an api-server between one's pick and its bind (the reservation)."""
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(100):
        port = random.randrange(max(1024, ephemeral_low - 12000), ephemeral_low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        if _reserve(port):
            return port
    raise OSError(f"no free port on 127.0.0.1 below {ephemeral_low} in 100 tries")


def component_of(cmdline: list[str]) -> str | None:
    """Which of ``COMPONENTS`` a process is, from its command line: ``[python, .../airflow, scheduler,
    --skip-serve-logs]``, or the title a component gives itself (``airflow api_server -- host:...``)."""
    for word, following in zip(cmdline[:2], cmdline[1:3], strict=False):
        if Path(word).name == "airflow" and following in COMPONENTS:
            return following
    words = (cmdline[0] if cmdline else "").split(" -- ")[0].split()
    if len(words) == 2 and words[0] == "airflow" and words[1].replace("_", "-") in COMPONENTS:
        return words[1].replace("_", "-")
    return None


def component_command(component: str, *options: str) -> list[str]:
    """`airflow <component> [options]`; a scheduler or triggerer without its log server, which would bind
    every interface (devtools.components serves their logs on loopback)."""
    command = [str(Path(sys.executable).parent / "airflow"), component, *options]
    if component in ("scheduler", "triggerer"):
        command.append("--skip-serve-logs")
    return command


class AirflowStartError(RuntimeError):
    """Airflow cannot start or a component of it exited; the message says why and quotes its log."""


def port_user(port: int, host: str = "127.0.0.1") -> str | None:
    """Who listens on ``host:port`` ("pid 123: airflow api-server"), "another process" when the OS does
    not say; None when the port is free to bind (what the api-server will do)."""
    with socket.socket() as sock:
        # As the api-server (uvicorn) binds: a port left in TIME_WAIT by the previous start is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            pass
        else:
            return None
    import psutil

    with contextlib.suppress(psutil.Error):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                with contextlib.suppress(psutil.Error):
                    return f"pid {conn.pid}: {' '.join(psutil.Process(conn.pid).cmdline())[:200]}"
    return "another process"


def component_log_tail(log_path: Path, component: str | None = None, lines: int = 30) -> str:
    """The last ``lines`` lines Airflow's components wrote to ``log_path`` for ``component`` (every line
    when None), so an error can quote the component that failed rather than the whole interleaved log."""
    try:
        text = log_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    if component is not None:
        prefix = f"{component:10} |"
        text = [line for line in text if line.startswith(prefix)]
    return "\n".join(text[-lines:])


def kubernetes_connection_uri(kubeconfig: str | os.PathLike) -> str:
    """The `kubernetes_default` connection as the cncf provider reads it, pointing at a kubeconfig file."""
    return json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}})


def airflow_environment(
    home: Path,
    *,
    port: int,
    kubeconfig: str | os.PathLike | None,
    database_url: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment for every Airflow component: our dags/ and plugins/, loopback only, fast parsing, and
    ``database_url`` (e.g. devtools.postgres) or, by default, SQLite in ``home`` with a long lock wait."""
    env = dict(os.environ)
    log_port = free_port()
    # Each Airflow is a deployment of its own, identified in its own metadata database unless ``extra``
    # names it (kueue_ray.deployment): never the test process's.
    env.pop("AIRFLOW__KUEUE_RAY__DEPLOYMENT", None)
    # Its triggers hold a worker-resuming event as shipped (kueue_ray.trigger_base), whatever the test
    # process, whose in-process triggers race no scheduler, says.
    env.pop("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", None)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USERNAME}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__CORE__PARALLELISM": "16",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            # The one loopback log server of devtools.components serves the workers' and the triggerer's
            # logs: a port of its own, so two Airflows on one machine (make run next to the e2e tests) do
            # not serve each other's logs.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(log_port),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(log_port),
            "PYTHONUNBUFFERED": "1",  # airflow.log keeps up with its components, for error messages
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        }
    )
    if database_url is not None:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = database_url
    else:  # every component and the CLI share one SQLite file: wait for its lock rather than fail
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] = "devtools.sqlite_connect_args.CONNECT_ARGS"
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC"] = (
            "devtools.sqlite_connect_args.ASYNC_CONNECT_ARGS"
        )
    if kubeconfig is not None:
        env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = kubernetes_connection_uri(kubeconfig)
    env.update(extra or {})
    return env


@dataclass
class Airflow(AirflowApi):
    """A running Airflow (devtools.components) and an authenticated REST client for it (``AirflowApi``)."""

    url: str
    home: Path
    env: dict[str, str]
    process: subprocess.Popen
    log_path: Path
    client: httpx.Client = field(init=False)
    extra_processes: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Longer than a request can wait for the SQLite lock (sqlite_connect_args: 60 s) plus its work,
        # so a busy api-server answers late rather than the client giving up first.
        self.client = httpx.Client(base_url=self.url, timeout=120)

    def failure(self, seen: set[str]) -> str | None:
        """Why this Airflow is broken, quoting the failing part's log; None while it is fine.

        ``seen`` collects the components found alive so far: one seen before and gone now has exited
        (devtools.components, like standalone, neither restarts it nor exits itself)."""
        code = self.process.poll()
        if code is not None:
            return (
                f"Airflow's components (devtools.components) exited with code {code}; last lines of {self.log_path}:\n"
                f"{component_log_tail(self.log_path)}"
            )
        alive = self.live_components()
        seen |= alive
        for component in COMPONENTS:
            if component in seen and component not in alive:
                return (
                    f"airflow {component} exited; its last lines in {self.log_path}:\n"
                    f"{component_log_tail(self.log_path, component)}"
                )
        return None

    def component_processes(self, component: str) -> list:
        """The live processes of one component (``triggerer``, ``scheduler``, ...): every descendant of the
        devtools.components process started as ``airflow <component>`` (the api-server renames
        itself "airflow api_server -- host:..."), plus any we restarted."""
        import psutil

        try:
            children = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        found = []
        for child in children:
            try:
                cmdline = child.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if component_of(cmdline) == component:
                found.append(child)
        found += [p for p in self.extra_processes if p.poll() is None and component in p.args]
        return found

    def live_components(self) -> set[str]:
        """The components (``COMPONENTS``) that have a live process now."""
        return {component for component in COMPONENTS if self.component_processes(component)}

    def kill_triggerer(self) -> int:
        """SIGKILL the triggerer (a crash: no cleanup, no graceful hand-over); returns how many died.

        Nothing restarts a component that dies: call `start_component("triggerer")`."""
        import psutil

        killed = self.component_processes("triggerer")
        for process in killed:
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                process.kill()
        for process in killed:
            with contextlib.suppress(psutil.NoSuchProcess, subprocess.TimeoutExpired, psutil.TimeoutExpired):
                process.wait(timeout=30)
        return len(killed)

    def start_component(self, component: str) -> subprocess.Popen:
        """Start `airflow <component>` (e.g. `triggerer`) with this Airflow's environment, in a session of
        its own (like devtools.components itself) so `stop` can end it and its children together. This is
        what a process supervisor does in production; nothing here restarts a component by itself. A
        scheduler or triggerer serves no logs of its own (devtools.components' loopback server does)."""
        log = (self.home / f"{component}-restarted.log").open("ab")
        process = subprocess.Popen(
            component_command(component),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.home,
        )
        self.extra_processes.append(process)
        return process

    def stop(self) -> None:
        """Stop every component, then SIGKILL whatever of their descendants survived: task workers start
        sessions of their own, so a worker still running at the end (e.g. a submit stuck on a gone
        api-server) is outside the process groups signalled here and would be orphaned. Descendants are
        collected first: once devtools.components is gone, its orphans can no longer be found from it."""
        import psutil

        leaders = [*self.extra_processes, self.process]
        descendants = []
        for leader in leaders:
            with contextlib.suppress(psutil.NoSuchProcess):
                descendants += psutil.Process(leader.pid).children(recursive=True)
        _stop_groups(leaders)
        for process in descendants:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        self.client.close()


def _stop_groups(leaders: Sequence[subprocess.Popen]) -> None:
    """SIGTERM the process groups the leaders lead, all at once so they shut down side by side; after 30 s
    (or once a leader is gone) SIGKILL what is left of its group, so a component still shutting down cannot
    outlive its parent as an orphan."""
    for process in leaders:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    for process in leaders:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def start_airflow(
    home: Path,
    *,
    kubeconfig: str | os.PathLike | None,
    port: int | None = None,
    database_url: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    timeout: float = 180,
    healthy: bool = False,
    while_waiting: Callable[[], None] | None = None,
    teams: Sequence[str] = (),
) -> Airflow:
    """Start Airflow's components (devtools.components) in their own process group and wait until its API answers and we are
    logged in (and, with ``healthy``, until every component reports healthy).

    Fails at once, not at the timeout, when the port is taken, devtools.components exits, or one of its
    components exits while starting; the error quotes that component's last log lines.
    ``while_waiting`` is called on every poll (e.g. to raise if kubesim died meanwhile).
    ``teams`` (multi-team mode): created before the DAG bundles are synced, each with a triggerer of its
    own instead of the global one (devtools.components).
    """
    port = port or free_port()
    taken_by = port_user(port)
    if taken_by is not None:
        raise AirflowStartError(
            f"port {port} is already in use ({taken_by}); stop that process or choose another port"
        )
    home.mkdir(parents=True, exist_ok=True)
    (home / "passwords.json").write_text(json.dumps({USERNAME: PASSWORD}))
    env = airflow_environment(
        home, port=port, kubeconfig=kubeconfig, database_url=database_url, extra=extra_env
    )
    log_path = home / "airflow.log"
    team_options = [option for team in teams for option in ("--team", team)]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "devtools.components", *team_options],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=home,
        )
    airflow = Airflow(url=f"http://127.0.0.1:{port}", home=home, env=env, process=process, log_path=log_path)
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    try:
        while True:
            if while_waiting is not None:
                while_waiting()
            failure = airflow.failure(seen)
            if failure is not None:
                raise AirflowStartError(failure)
            if airflow.ready(healthy=healthy):
                return airflow
            if time.monotonic() > deadline:
                states = airflow.health() or "the api-server does not answer"
                raise AirflowStartError(
                    f"Airflow not ready within {timeout:g}s ({states}); last lines of "
                    f"{log_path}:\n{component_log_tail(log_path)}"
                )
            time.sleep(1)
    except BaseException:
        airflow.stop()
        raise


@contextmanager
def running_airflow(home: Path, **kwargs) -> Iterator[Airflow]:
    airflow = start_airflow(home, **kwargs)
    try:
        yield airflow
    finally:
        airflow.stop()
