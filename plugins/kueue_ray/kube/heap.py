"""Giving back to the system the memory a list freed (``trim_soon``).

A list of thousands of objects decodes each one, keeps a trimmed copy (``kueue_ray.kube.essential``) and
frees the rest: tens of MiB freed in pieces between the kept copies. glibc's allocator keeps freed memory
for the process unless it is at the top of its heap, so after listing 30,000 RayJobs and their Workloads a
triggerer's RSS stayed ~40 MiB above what it still used (bench/README.md, run AF). ``malloc_trim(0)`` hands
every free page back (a few milliseconds). It runs once a moment after a list, not at its end: the lists
of a process's resources and namespaces come together, and what the waits do with a list's objects frees
more. Where the C library has no ``malloc_trim`` (musl, macOS), nothing happens.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import weakref
from collections.abc import Callable

_pending: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.TimerHandle] = (
    weakref.WeakKeyDictionary()
)
"""The trim scheduled on each event loop (one at a time)."""


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none. Looked up among the process's own
    symbols (the C library's among them), not with ``ctypes.util.find_library``, which runs ``ldconfig``
    in a subprocess, from the event loop."""
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


def trim() -> bool:
    """Return the allocator's free pages to the system now; False where it cannot."""
    malloc_trim = _malloc_trim()
    if malloc_trim is None:
        return False
    malloc_trim(0)
    return True


def trim_soon(delay: float | None, release: Callable[[], object] | None = None) -> None:
    """``release`` (``trim`` when None) ``delay`` seconds from now on the running loop, unless one is
    already due there (so at most one per ``delay``, however many lists end meanwhile); None: never."""
    if delay is None:
        return
    loop = asyncio.get_running_loop()
    handle = _pending.get(loop)
    if handle is not None and not handle.cancelled() and loop.time() < handle.when():
        return

    def run() -> None:
        _pending.pop(loop, None)
        (release or trim)()

    _pending[loop] = loop.call_later(delay, run)
