"""What `airflow standalone` does, with every listener on loopback: `python -m devtools.components`.

`make run`, `make demo` and the end-to-end tests start Airflow through this module (devtools.airflow). It
migrates the metadata database, then runs the dag-processor, the triggerer, the api-server and, once the
api-server answers, the scheduler as children, each line of their output prefixed ``<component> | `` as
`airflow standalone` prints it, until it is signalled (SIGTERM or SIGINT stops them all).

Why not `airflow standalone`: in Airflow 3.3.2 the scheduler and the triggerer each start a log server
(``airflow.utils.serve_logs``) that binds every interface (uvicorn ``host=""``), and standalone offers no
way to pass their ``--skip-serve-logs``. Here both get that flag, and one log server of Airflow's own
(``airflow.utils.serve_logs.log_server``, the app `serve_logs` runs) is bound to 127.0.0.1 on the port both
``[logging] worker_log_server_port`` and ``trigger_log_server_port`` name: on one machine the workers and
the triggerer write into the same log folder, so one server serves both. The api-server binds ``[api]
host`` (127.0.0.1, devtools.airflow.airflow_environment); the scheduler and the dag-processor listen on
nothing (their health-check server is off by default).

``--team NAME`` (repeatable, for Airflow's multi-team mode): adds the team after migrating, before the
dag-processor syncs the DAG bundles that name it, and runs one triggerer per team (``airflow triggerer
--team-name NAME``) instead of the global one, since a team's deferred tasks are run only by a triggerer
of that team.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time

from devtools.airflow import component_command

LOOPBACK = "127.0.0.1"


def component_commands(teams: list[str]) -> list[tuple[str, list[str]]]:
    """(name, command) of each child, as `airflow standalone` names them, plus the loopback log server.

    >>> [name for name, _ in component_commands([])]
    ['scheduler', 'dag-processor', 'triggerer', 'api-server', 'serve-logs']
    >>> component_commands(["nlp"])[2][1][1:]
    ['triggerer', '--team-name', 'nlp', '--skip-serve-logs']
    """
    triggerers = [
        ("triggerer", component_command("triggerer", *(["--team-name", team] if team else [])))
        for team in teams or [None]
    ]
    return [
        ("scheduler", component_command("scheduler")),
        ("dag-processor", component_command("dag-processor")),
        *triggerers,
        ("api-server", component_command("api-server")),
        ("serve-logs", [sys.executable, "-m", "devtools.components", "--serve-logs"]),
    ]


def prepare_database(teams: list[str]) -> None:
    """Write Airflow's configuration file if there is none, create or migrate the metadata database (what
    standalone does, in its own process: no CLI process to start), and add the ``teams`` it does not have
    yet.

    The file first, as the `airflow` command does before any subcommand: it holds the generated secrets
    (``[api_auth] jwt_secret``, ``[api] secret_key``) every component must share. Components started
    together on a home without it would each write and use secrets of their own, and the api-server would
    refuse the workers' tokens ("Signature verification failed")."""
    from airflow.configuration import write_default_airflow_configuration_if_needed
    from airflow.models.team import Team
    from airflow.utils import db
    from airflow.utils.session import create_session
    from sqlalchemy import select

    write_default_airflow_configuration_if_needed()
    db.initdb()
    with create_session() as session:
        known = set(session.scalars(select(Team.name)))
        session.add_all(Team(name=team) for team in teams if team not in known)


def serve_logs() -> None:
    """Airflow's log server app, as `airflow.utils.serve_logs.serve_logs` runs it, on loopback only."""
    import uvicorn
    from airflow.configuration import conf
    from setproctitle import setproctitle

    setproctitle("airflow serve-logs")
    worker_port = conf.getint("logging", "worker_log_server_port")
    trigger_port = conf.getint("logging", "trigger_log_server_port")
    if worker_port != trigger_port:
        raise SystemExit(
            f"[logging] worker_log_server_port ({worker_port}) and trigger_log_server_port ({trigger_port}) "
            "must be one port: one log server serves both"
        )
    uvicorn.run(
        "airflow.utils.serve_logs.log_server:get_app",
        factory=True,
        host=LOOPBACK,
        port=worker_port,
        log_level="warning",
        log_config=None,
        access_log=False,
    )


def _wait_listening(api_server: subprocess.Popen, stop: threading.Event, timeout: float = 300) -> None:
    """Until the api-server accepts connections on ``[api] host:port`` (or exits, or we are stopped)."""
    from airflow.configuration import conf

    address = (conf.get("api", "host"), conf.getint("api", "port"))
    deadline = time.monotonic() + timeout
    while api_server.poll() is None and not stop.is_set() and time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(address, timeout=1):
            return
        stop.wait(0.5)


def _pump(name: str, stream, lock: threading.Lock) -> None:
    """Copy a child's output to ours, each line prefixed with its name (standalone's format)."""
    prefix = f"{name:10} | ".encode()
    for line in iter(stream.readline, b""):
        with lock:
            sys.stdout.buffer.write(prefix + line.rstrip(b"\r\n") + b"\n")
            sys.stdout.buffer.flush()


def run(teams: list[str]) -> int:
    stop = threading.Event()

    def _stop(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    lock = threading.Lock()
    prepare_database(teams)
    children: list[subprocess.Popen] = []
    api_server = None
    # All at once, as standalone does, but the scheduler once the api-server answers: a task it starts
    # before the execution API answers fails at once ("Connection refused") and waits out its retry delay.
    commands = component_commands(teams)
    for name, command in sorted(commands, key=lambda named: named[0] == "scheduler"):
        if name == "scheduler" and api_server is not None:
            _wait_listening(api_server, stop)
        if stop.is_set():
            break
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        threading.Thread(target=_pump, args=(name, child.stdout, lock), daemon=True).start()
        children.append(child)
        if name == "api-server":
            api_server = child
    stop.wait()
    # Pass the signal on and exit at once, as standalone does: devtools.airflow signals the whole process
    # group and, once this leader is gone, kills what is left of it (make run stops within seconds).
    for child in children:
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.components", description=__doc__.split("\n")[0])
    parser.add_argument("--team", action="append", default=[], metavar="NAME")
    parser.add_argument("--serve-logs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_logs:
        serve_logs()
        return 0
    return run(args.team)


if __name__ == "__main__":
    sys.exit(main())
