"""What a subscriber's read costs the API server: nothing while the scope's shared list can answer or is
about to, one request per object however many subscribers ask, and no request at all while the scope's
list/watch loop is failing.

An outage, or a slow first list after a triggerer starts, used to cost one request per waiting task per
retry: every trigger whose RayJob was not cached yet read it itself, and retried on its own backoff. Here
the decision is made per resource kind by ``plan_read``, from what the scope's loop knows:

* ``ANSWER``: the cache answers (the object is cached; or the loop has listed, so a Workload missing from
  it does not exist yet and its ADDED event will come).
* ``WAIT``: on the loop's next outcome (``_WatchLoop.outcome``): its first list is in flight (for up to
  ``first_list_budget``, longer than that list's own request timeout), or it is failing (5xx, dropped
  connections, 401/403), so its backoff paces the retries for every subscriber of the scope at once and
  its refusal window decides when waits end (``Subscription.access``).
* ``READ``: one GET (or the Workload lookup) through ``shared_read``, which every subscriber asking for
  the same object meanwhile awaits instead of sending its own.

``plan_read`` is pure; ``shared_read`` is the I/O.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

ANSWER, WAIT, READ = "answer", "wait", "read"
JOB_WORKLOADS = "job-workloads"
"""What a RayService wait reads before the Workload loop has listed: the namespace's job Workloads."""


@dataclass(frozen=True)
class LoopState:
    """What a scope's list/watch loop of one resource knows, as a read sees it.

    ``listed``: its cache holds a complete list; ``failing``: its last request failed and nothing has
    succeeded since; ``waited_s``: how long this read has waited so far."""

    listed: bool
    failing: bool
    waited_s: float


def plan_read(
    loop: LoopState | None, *, cached: bool, reread: bool, absent_is_answer: bool, first_list_budget: float
) -> str:
    """``ANSWER``, ``WAIT`` or ``READ`` for one object of one resource kind.

    ``cached``: the scope's cache holds it; ``reread``: the caller wants what the API server says now (a
    clock ran out on the cache's word); ``absent_is_answer``: once listed, missing from the cache means it
    does not exist (a Workload Kueue has not created yet; not a RayJob, which may be outside the watch's
    selector). ``loop`` None: no loop to share, read.

    >>> listed = LoopState(listed=True, failing=False, waited_s=0.0)
    >>> plan_read(listed, cached=True, reread=False, absent_is_answer=False, first_list_budget=90)
    'answer'
    >>> plan_read(listed, cached=False, reread=False, absent_is_answer=True, first_list_budget=90)
    'answer'
    >>> plan_read(listed, cached=False, reread=False, absent_is_answer=False, first_list_budget=90)
    'read'
    >>> first_list = LoopState(listed=False, failing=False, waited_s=12.0)
    >>> plan_read(first_list, cached=False, reread=False, absent_is_answer=False, first_list_budget=90)
    'wait'
    >>> outage = LoopState(listed=True, failing=True, waited_s=300.0)
    >>> plan_read(outage, cached=True, reread=True, absent_is_answer=False, first_list_budget=90)
    'wait'
    """
    if cached and not reread:
        return ANSWER
    if loop is None:
        return READ
    if loop.failing:
        return WAIT
    if not loop.listed:
        return WAIT if loop.waited_s < first_list_budget else READ
    if absent_is_answer and not reread:
        return ANSWER
    return READ


def wait_for(steps: dict[str, str]) -> str | None:
    """The first kind whose step is ``WAIT`` (reads go out only once nothing is waited for), or None."""
    return next((kind for kind, step in steps.items() if step == WAIT), None)


async def shared_read(
    reads: dict[tuple[str, str], asyncio.Task],
    key: tuple[str, str],
    read: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Run ``read`` for ``key`` (resource kind, object) unless one is in flight, and await it: every caller
    meanwhile shares its one request, its answer and its failure.

    The read runs in a context of its own, not the first caller's (whose task log it is not), and is
    shielded: one caller cancelled (its task ended) does not cancel the others' read."""
    task = reads.get(key)
    if task is None:
        task = asyncio.get_running_loop().create_task(read(), context=contextvars.Context())
        reads[key] = task
        task.add_done_callback(lambda done: _forget(reads, key, done))
    await asyncio.shield(task)


def _forget(reads: dict[tuple[str, str], asyncio.Task], key: tuple[str, str], task: asyncio.Task) -> None:
    if reads.get(key) is task:
        del reads[key]
    if not task.cancelled():
        task.exception()  # every caller got it through the shield; none left: not "never retrieved"
