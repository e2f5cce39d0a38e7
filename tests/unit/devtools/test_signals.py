"""A command stopped with `kill` (SIGTERM), or with SIGINT while it runs in the background, still runs its
cleanup, so the servers it started in process groups of their own do not outlive it."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

COMMAND = textwrap.dedent(
    """
    import sys, time
    from devtools.signals import stop_on_signals
    stop_on_signals()
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        open(sys.argv[1], "w").write("cleaned up")
    """
)


def ignore_sigint() -> None:
    """As a shell starts a background job."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_command_runs_its_cleanup(tmp_path, signum):
    marker = tmp_path / "marker"
    process = subprocess.Popen(
        [sys.executable, "-c", COMMAND, str(marker)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=ignore_sigint,
    )
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signum)
    process.wait(timeout=30)
    assert marker.read_text() == "cleaned up"


def test_every_benchmark_command_stops_its_children_on_signals():
    """Each `python -m bench.<name>` that starts kubesim or Airflow installs ``stop_on_signals`` in its
    ``__main__`` block (the workers it starts are killed by the harness, and start nothing)."""
    workers = {"polling_worker.py", "trigger_worker.py"}
    missing = []
    for path in sorted((ROOT / "bench").glob("*.py")):
        if path.name in workers:
            continue
        missing += [
            path.name
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.If)
            and "__main__" in ast.unparse(node.test)
            and "stop_on_signals()" not in ast.unparse(node)
        ]
    assert missing == []
