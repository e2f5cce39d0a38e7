"""How a list or watch's "no" is read, and how long to wait before asking again.

``Refused`` is an error status from the API server (an HTTP status, a watch's ERROR event, or a Status
line where an event belongs) with the verb it refused; ``WatchGone`` is the one refusal that only means
"relist" (410). ``Backoff`` paces every retry of the plugin: the watch loops', a trigger's reads through
the hub (``kueue_ray.hub.subscriptions``), and a resumed trigger's (``kueue_ray.trigger_base``).

``explained`` puts a refused read or an API the cluster does not serve in the words a task log needs.

``RefusalWindow`` decides when a row of 401/403 to a read a wait needs has lasted long enough
(``refusal_timeout``) that the wait must end (``RefusedTooLong``); ``ApiNotServed`` ends it at once.

Apart from ``kueue_ray.kube.listwatch`` because these are plain values and arithmetic with no I/O: the code
that retries without running a watch loop imports them without the loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from kueue_ray import options
from kueue_ray.errors import ClusterAccessError
from kueue_ray.kube.errors import (
    api_error,
    may_be_missing_api,
    not_served_message,
    read_of,
    refusal_message,
    retry_after_seconds,
    served,
)


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


DEFAULT_REFUSAL_TIMEOUT = 300.0
"""Seconds of consecutive 401/403 on a read a wait needs before the wait fails (``[kueue_ray]
refusal_timeout``): long enough for a RoleBinding re-applied by a deploy or a token being renewed, short
enough that a revoked grant fails its tasks within minutes instead of leaving them deferred for ever."""
REFUSING_STATUSES = frozenset({401, 403})


@dataclass(frozen=True)
class Denial:
    """One read a wait needs, refused: the ``verb`` on ``resource`` (``plural.group``) in ``namespace``
    (None: cluster-wide), the HTTP ``status`` (401 or 403) and the API server's words."""

    verb: str
    resource: str
    namespace: str | None
    status: int
    message: str

    @classmethod
    def of(cls, verb: str, resource: str, namespace: str | None, exc: Any) -> Denial | None:
        """The denial ``exc`` (an ApiException or a ``Refused``) is, or None when it is no 401/403."""
        if isinstance(exc, Refused):
            status, reason, message = exc.status, exc.reason, exc.message
        else:
            status, reason, message = api_error(exc)
        if status not in REFUSING_STATUSES:
            return None
        said = f"{status} {reason}: {message}" if message else f"{status} {reason}"
        return cls(verb, resource, namespace, status, said)


class RefusalWindow:
    """How long the API server has said no (401/403) to one read in a row. Pure: times are given.

    A read that succeeds clears the window; other failures (5xx, timeouts) neither start nor clear it,
    since they say nothing about the grant. It has ``expired`` once two refusals of the row are ``timeout``
    seconds apart: a refusal is only known to last by asking again, so whoever retries paces its retries
    to ask once more when the window ends (``pace``), and a refusal that clears within the window costs
    nothing.

    >>> window = RefusalWindow(60.0)
    >>> window.refused(Denial("list", "workloads.kueue.x-k8s.io", "ray", 403, "403 Forbidden"), now=100.0)
    True
    >>> window.pace(30.0, now=140.0), window.expired()
    (20.0, False)
    >>> _ = window.refused(window.last, now=160.0); window.expired()
    True
    >>> window.cleared(); window.expired()
    False
    """

    __slots__ = ("timeout", "since", "latest", "last")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.since: float | None = None
        self.latest: float | None = None
        self.last: Denial | None = None

    def refused(self, denial: Denial, now: float) -> bool:
        """Count one refusal at ``now``; True when it starts a new row (the moment to tell the waiters)."""
        started = self.since is None
        if started:
            self.since = now
        self.latest = now
        self.last = denial
        return started

    def cleared(self) -> None:
        self.since = self.latest = None
        self.last = None

    def remaining(self, now: float) -> float | None:
        """Seconds until the window ends; None while nothing is refused."""
        if self.since is None:
            return None
        return max(0.0, self.since + self.timeout - now)

    def pace(self, delay: float, now: float) -> float:
        """The pause before the next attempt: ``delay``, but no later than the window's end, so the answer
        at that moment decides (a backoff of 30 s must not stretch a 20 s window)."""
        remaining = self.remaining(now)
        return min(delay, remaining) if remaining else delay

    def expired(self) -> bool:
        return self.since is not None and self.latest is not None and self.latest - self.since >= self.timeout


class RefusedTooLong(Exception):
    """A read a wait needs was refused (401/403) for the whole refusal window: the wait must end."""

    def __init__(self, denial: Denial, seconds: float, message: str) -> None:
        super().__init__(message)
        self.denial = denial
        self.seconds = seconds
        self.message = message


class ApiNotServed(Exception):
    """The cluster does not serve an API group/version the wait or the submission needs (404 on its
    discovery document): waiting can never succeed."""

    def __init__(self, group: str, version: str, message: str) -> None:
        super().__init__(message)
        self.group = group
        self.version = version
        self.message = message


def refusal_timeout() -> float:
    """``[kueue_ray] refusal_timeout`` (``AIRFLOW__KUEUE_RAY__REFUSAL_TIMEOUT``) in seconds, read where the
    wait runs (triggerer or worker); ``DEFAULT_REFUSAL_TIMEOUT`` when unset."""
    return options.seconds("refusal_timeout", DEFAULT_REFUSAL_TIMEOUT, zero_allowed=False)


def explained(
    custom_api: Any, exc: BaseException, namespace: str | None, identity: Any, conn_id: str | None
) -> BaseException:
    """What a task log needs instead of the client's dump, for an answer that is about access, not about
    the object: a 401/403 named (verb, resource, namespace, identity, ``kubectl auth can-i``), or an API
    group/version the cluster does not serve (discovery asked once). Anything else: ``exc`` itself.
    ``identity`` is called only for a refusal (who the client authenticates as)."""
    read = read_of(exc)
    if read is None:
        return exc
    verb, resource, group, version = read
    if may_be_missing_api(exc) and not served(custom_api, group, version):
        return ClusterAccessError(not_served_message(group, version))
    denial = Denial.of(verb, resource, namespace, exc)
    if denial is None:
        return exc
    return ClusterAccessError(
        refusal_message(
            verb,
            resource,
            namespace,
            status=denial.status,
            said=denial.message,
            identity=identity(),
            conn_id=conn_id,
        )
    )
