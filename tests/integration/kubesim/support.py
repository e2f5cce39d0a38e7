"""Helpers the kubesim HTTP tests share."""

from __future__ import annotations

import time


def eventually(check, timeout: float = 20.0, interval: float = 0.05):
    """Poll ``check()`` until it is truthy and return it; AssertionError with its last answer otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition never held; last: {result!r}")
        time.sleep(interval)
