"""Helpers kubesim's unit tests share."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(check: Callable[[], object], what: str) -> object:
    """Poll ``check`` every 2 ms for up to 8 s of real time; its first truthy result."""
    for _ in range(4000):
        result = check()
        if result:
            return result
        await asyncio.sleep(0.002)
    raise AssertionError(f"never: {what}")
