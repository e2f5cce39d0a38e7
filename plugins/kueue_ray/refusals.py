"""How a list or watch's "no" is read, and how long to wait before asking again.

``Refused`` is an error status from the API server (an HTTP status, a watch's ERROR event, or a Status
line where an event belongs) with the verb it refused; ``WatchGone`` is the one refusal that only means
"relist" (410). ``Backoff`` paces every retry of the plugin: the watch loops', a trigger's reads through
the hub (``kueue_ray.hub.subscriptions``), and a resumed trigger's (``kueue_ray.trigger_base``).

Apart from ``kueue_ray.listwatch`` because these are plain values and arithmetic with no I/O: the code
that retries without running a watch loop imports them without the loop.
"""

from __future__ import annotations

import random
from typing import Any

from kueue_ray.api_errors import api_error, retry_after_seconds


class WatchGone(Exception):
    """The watch's resourceVersion is older than the server's history (410): relist."""


class Refused(Exception):
    """The API server answered a list or watch with an error status (HTTP, a watch's ERROR event, or a
    Status line where an event belongs).

    Kept apart from the client's ApiException because a watch's answer is read as a stream, whatever its
    status, and because the loop needs to know which verb was refused to say what to grant.
    """

    def __init__(
        self, verb: str, status: int | None, reason: str, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.verb = verb
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @classmethod
    def from_api_exception(cls, verb: str, exc: Any) -> Refused:
        status, reason, message = api_error(exc)
        return cls(verb, status, reason, message, retry_after_seconds(exc))

    @classmethod
    def from_status(cls, verb: str, status: dict) -> Refused:
        return cls(verb, status.get("code"), status.get("reason") or "", status.get("message") or "")


class Backoff:
    """Exponential backoff with 'equal jitter', so many processes do not reconnect in lockstep."""

    def __init__(self, initial: float, maximum: float) -> None:
        self.initial = initial
        self.maximum = maximum
        self.attempts = 0

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * (2**self.attempts))
        self.attempts += 1
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempts = 0
