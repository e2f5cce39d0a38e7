"""`make airflow ARGS="..."`: Airflow's own CLI, against the Airflow that `make run` runs in this checkout.

`airflow` alone is not on PATH, and the venv's `airflow` with its default home would start a second,
empty database. This runs the venv's `airflow` with the environment `make run` gave its components
(AIRFLOW_HOME=.run/airflow, its metadata database, the DAGs and plugins folders, the `kubernetes_default`
connection, ...), which `make run` leaves in .run/airflow-cli.json while it runs.

On SQLite (a machine without a PostgreSQL server), a CLI write that meets the scheduler's commit fails at
once with "database is locked" (devtools.postgres explains why). Airflow rolls such a command back (a
backfill cleans up its partial runs so that it can be retried), so it is run again, at most
``LOCK_ATTEMPTS`` times, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

from devtools.run import CLI_STATE

LOCK_ATTEMPTS = 3
LOCK_PAUSE = 1.0
"""Seconds before the second attempt (doubled before the third)."""
SQLITE_LOCKED = "database is locked"


def run_streamed(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``command`` with its output passed through; its exit code and the last lines it printed."""
    tail: deque[str] = deque(maxlen=50)
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as process:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line)
    return process.returncode, "".join(tail)


def main(argv: list[str], airflow: str | None = None) -> int:
    if not CLI_STATE.exists():
        print(
            "make airflow: `make run` is not running in this checkout; start it (in another terminal) first",
            file=sys.stderr,
        )
        return 2
    state = json.loads(CLI_STATE.read_text())
    env = {**os.environ, **state["env"]}
    command = [airflow or str(Path(sys.executable).parent / "airflow"), *argv]
    sqlite = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        code, tail = run_streamed(command, env)
        if code == 0 or not sqlite or SQLITE_LOCKED not in tail or attempt == LOCK_ATTEMPTS:
            return code
        print(
            f"make airflow: Airflow's SQLite database was locked by another writer; running it again "
            f"(attempt {attempt + 1} of {LOCK_ATTEMPTS})",
            file=sys.stderr,
        )
        time.sleep(LOCK_PAUSE * attempt)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
