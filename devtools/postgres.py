"""A throwaway PostgreSQL server on loopback, for an Airflow that must take real concurrency.

Why: Airflow's scheduler, triggerer, api-server and workers all write at once, most of all in the
benchmarks (a 200-run backfill created while the scheduler works through the runs already made), but in
the end-to-end tests and `make demo` too. On SQLite that ends in "database is locked": in WAL mode a
transaction that read before it writes fails at once when another process committed in between, whatever
the busy timeout, and Airflow's backfill creation reads then writes once per run. Airflow itself says
SQLite is for trying it out; PostgreSQL is what its users run, so the benchmarks, tests and demo use it.

The server is the machine's own (``initdb`` / ``pg_ctl`` from the PostgreSQL packages, e.g. Debian's
``postgresql``); nothing is installed here. It runs as the ``postgres`` user when we are root (PostgreSQL
refuses to run as root), keeps its data and socket in a directory of its own under the temp directory,
trusts loopback connections and is removed by ``stop``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devtools.airflow import free_port

USER = "airflow"
DATABASE = "airflow"
SERVICE_ACCOUNT = "postgres"
"""Who runs the server when we are root."""


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL server binaries are not on this machine."""


@dataclass
class Postgres:
    directory: Path
    port: int
    run_as: list[str]
    version: str = ""
    """What ``postgres --version`` printed, for the benchmark's record."""

    @property
    def sqlalchemy_url(self) -> str:
        """The sync URL for ``[database] sql_alchemy_conn``; Airflow derives the asyncpg one from it."""
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            _run([*self.run_as, _binary("pg_ctl"), "-D", str(self.directory / "data"), "-m", "fast", "stop"])
        shutil.rmtree(self.directory, ignore_errors=True)


def _binary(name: str) -> str:
    """``name`` from PATH, else from the newest /usr/lib/postgresql/<version>/bin (Debian keeps it there)."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise PostgresUnavailable(
            f"PostgreSQL's {name} was not found on PATH or in /usr/lib/postgresql/*/bin: install the server "
            "(e.g. `apt-get install postgresql`)"
        )
    return found


def _run(command: list[str], timeout: float = 60) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr[-500:]}")


def start_postgres(timeout: float = 60) -> Postgres:
    """initdb a new cluster, start it on a free loopback port, create the ``airflow`` database."""
    run_as = ["runuser", "-u", SERVICE_ACCOUNT, "--"] if os.geteuid() == 0 else []
    directory = Path(tempfile.mkdtemp(prefix="kueue-ray-postgres-"))
    if run_as:
        shutil.chown(directory, user=SERVICE_ACCOUNT)
    version = subprocess.run([_binary("postgres"), "--version"], capture_output=True, text=True, check=False)
    postgres = Postgres(directory=directory, port=free_port(), run_as=run_as, version=version.stdout.strip())
    data = directory / "data"
    try:
        _run(
            [
                *run_as,
                _binary("initdb"),
                "-D",
                str(data),
                "-U",
                USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        options = f"-p {postgres.port} -k {directory} -c listen_addresses=127.0.0.1"
        _run(
            [*run_as, _binary("pg_ctl"), "-D", str(data), "-l", str(directory / "server.log"), "-o", options]
            + ["-w", "-t", str(int(timeout)), "start"],
            timeout=timeout + 10,
        )
        _create_database(postgres.port, timeout)
    except BaseException:
        postgres.stop()
        raise
    return postgres


def _create_database(port: int, timeout: float) -> None:
    import psycopg2

    deadline = time.monotonic() + timeout
    while True:
        try:
            connection = psycopg2.connect(host="127.0.0.1", port=port, user=USER, dbname="postgres")
            break
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    try:
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {DATABASE}")
    finally:
        connection.close()


@contextlib.contextmanager
def metadata_database() -> Iterator[str | None]:
    """Airflow's metadata database for ``make run``, ``make demo`` and the end-to-end tests: a throwaway
    PostgreSQL when the machine has the server, else ``None`` (``start_airflow``'s SQLite), said on stderr.

    Why not always SQLite: Airflow answers concurrent writes on SQLite with "database is locked" (its own
    backfill API says "not supported on SQLite under concurrent access"), which had made CI fail on
    Airflow's contention rather than on our behaviour, and made the README's `airflow backfill create`
    fail next to `make run`'s busy scheduler."""
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        print(f"[devtools] Airflow on SQLite: {exc}", file=sys.stderr)
        yield None
        return
    try:
        yield server.sqlalchemy_url
    finally:
        server.stop()
