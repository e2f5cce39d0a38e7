"""`make airflow ARGS="..."`: Airflow's own CLI, against the Airflow that `make run` runs in this checkout.

`airflow` alone is not on PATH, and the venv's `airflow` with its default home would start a second,
empty database. This runs the venv's `airflow` with the environment `make run` gave its components
(AIRFLOW_HOME=.run/airflow, the DAGs and plugins folders, the `kubernetes_default` connection, ...), which
`make run` leaves in .run/airflow-cli.json while it runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from devtools.run import CLI_STATE


def main(argv: list[str]) -> int:
    if not CLI_STATE.exists():
        print(
            "make airflow: `make run` is not running in this checkout; start it (in another terminal) first",
            file=sys.stderr,
        )
        return 2
    state = json.loads(CLI_STATE.read_text())
    airflow = str(Path(sys.executable).parent / "airflow")
    os.execve(airflow, [airflow, *argv], {**os.environ, **state["env"]})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
