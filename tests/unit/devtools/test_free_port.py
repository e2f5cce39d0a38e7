"""``devtools.airflow.free_port``: no two callers on the machine get the same port while the first has not
bound it yet (two e2e groups once started a PostgreSQL and an api-server on one port)."""

from __future__ import annotations

import json
import subprocess
import sys

from devtools.airflow import ROOT, free_port


def test_ports_handed_out_are_never_handed_out_again_meanwhile_here_or_in_another_process():
    here = [free_port() for _ in range(150)]
    there = subprocess.run(
        [
            sys.executable,
            "-c",
            "from devtools.airflow import free_port; import json; print(json.dumps([free_port() for _ in range(150)]))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    elsewhere = json.loads(there.stdout)
    assert len(set(here)) == len(here) == 150
    assert len(set(elsewhere)) == 150 and not set(here) & set(elsewhere)
