"""A worker's peak RSS is its own, not its parent's: ``ru_maxrss`` carries the RSS a child had at fork
across ``execve`` on Linux, so the benchmark's second side once reported 1,061.5 MiB for every triggerer
(bench/README.md, run AG)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_a_child_of_a_large_parent_reports_its_own_peak():
    held = bytearray(400 * 1024 * 1024)  # zero pages: touch each one so that they count in the RSS
    for offset in range(0, len(held), 4096):
        held[offset] = 1
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from bench.harness.protocol import usage; print(json.dumps(usage()))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    usage = json.loads(child.stdout)
    assert 0 < usage["rss_mib"] <= usage["peak_rss_mib"] < 200, usage
    del held
