"""SIGTERM and SIGINT as Ctrl-C for the long-running commands that start servers in process groups of their
own (the real control plane, the benchmarks' kubesim and Airflow).

Python's default SIGTERM ends the process at once, without running ``finally`` blocks or leaving context
managers, so every child started with ``start_new_session`` would be orphaned (a benchmark stopped with
``kill`` left its kubesim using 60% of a core for an hour). A process started in the background also
inherits SIGINT ignored. Raising KeyboardInterrupt on both lets the usual cleanup stop the children.
"""

from __future__ import annotations

import signal


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_signals() -> None:
    """From now on, SIGTERM and SIGINT raise KeyboardInterrupt in the main thread."""
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
