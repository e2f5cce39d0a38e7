"""Fault injection and request accounting for the HTTP layer.

Tests and benchmarks need to see how clients behave when the API server misbehaves (500s, slowness,
dropped or expired watches) and how many calls they make. Both live here, apart from routing, so the rules
are plain data the `/kubesim/faults`, `/kubesim/stats` and `/kubesim/requests` endpoints read and write.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

REQUEST_LOG_LIMIT = 20_000
"""Oldest request-log entries are dropped beyond this, so a long benchmark cannot exhaust memory."""


class FaultSettingsError(ValueError):
    """A POST /kubesim/faults body that names an unknown setting or an out-of-range value."""


@dataclass
class Faults:
    """The active faults. All default to "no fault"."""

    error_rate: float = 0.0
    latency_ms: float = 0.0
    watch_drop_after_s: float | None = None
    expire_watches: int | bool = 0
    seed: int | None = None
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def update(self, settings: dict) -> None:
        """Apply a JSON body; an empty body resets everything (as DELETE does)."""
        if not settings:
            self.reset()
            return
        unknown = set(settings) - {"error_rate", "latency_ms", "watch_drop_after_s", "expire_watches", "seed"}
        if unknown:
            raise FaultSettingsError(f"unknown fault settings: {sorted(unknown)}")
        if "error_rate" in settings:
            rate = float(settings["error_rate"])
            if not 0.0 <= rate <= 1.0:
                raise FaultSettingsError("error_rate must be between 0 and 1")
            self.error_rate = rate
        if "latency_ms" in settings:
            self.latency_ms = max(0.0, float(settings["latency_ms"]))
        if "watch_drop_after_s" in settings:
            drop = settings["watch_drop_after_s"]
            self.watch_drop_after_s = None if drop is None else max(0.0, float(drop))
        if "expire_watches" in settings:
            expire = settings["expire_watches"]
            if not isinstance(expire, bool | int):
                raise FaultSettingsError("expire_watches must be an integer or a boolean")
            self.expire_watches = expire
        if "seed" in settings:
            self.seed = settings["seed"]
            self._random.seed(self.seed)

    def reset(self) -> None:
        self.error_rate = 0.0
        self.latency_ms = 0.0
        self.watch_drop_after_s = None
        self.expire_watches = 0
        self.seed = None
        self._random = random.Random()

    def as_dict(self) -> dict:
        return {
            "error_rate": self.error_rate,
            "latency_ms": self.latency_ms,
            "watch_drop_after_s": self.watch_drop_after_s,
            "expire_watches": self.expire_watches,
        }

    def should_fail(self) -> bool:
        return self.error_rate > 0 and self._random.random() < self.error_rate

    def take_watch_expiry(self) -> bool:
        """Whether this watch (one that carries a resourceVersion) must get 410; consumes one of N."""
        if self.expire_watches is True:
            return True
        if self.expire_watches is False or self.expire_watches <= 0:
            return False
        self.expire_watches -= 1
        return True


@dataclass(frozen=True)
class RequestRecord:
    """One API request as RBAC sees it: verb, API group, resource, subresource, namespace, name."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    path: str

    def as_dict(self) -> dict:
        return {
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
            "subresource": self.subresource,
            "namespace": self.namespace,
            "name": self.name,
            "code": self.code,
            "path": self.path,
        }

    @property
    def counter_key(self) -> str:
        """`<verb> <resource>` with the resource spelt as the store names it (plural[.group][/sub])."""
        if not self.resource:
            return f"{self.verb} {self.path}"
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        if self.subresource:
            resource = f"{resource}/{self.subresource}"
        return f"{self.verb} {resource}"


class Stats:
    """Counters and the request log, reset independently of the cluster's objects."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.requests_total = 0
        self.watches_open = 0
        self.watches_opened_total = 0
        self.open_watches: Counter[tuple[str, str, str]] = Counter()
        """(client address "host:port", resource, namespace) of every open watch stream: which client
        holds which watches, as a server-side count a client cannot misreport."""
        self.log: deque[RequestRecord] = deque(maxlen=REQUEST_LOG_LIMIT)

    def record(self, record: RequestRecord) -> None:
        self.requests[record.counter_key] += 1
        self.requests_total += 1
        self.log.append(record)

    def watch_opened(self, peer: str = "", resource: str = "", namespace: str = "") -> None:
        self.watches_open += 1
        self.watches_opened_total += 1
        self.open_watches[(peer, resource, namespace)] += 1

    def watch_closed(self, peer: str = "", resource: str = "", namespace: str = "") -> None:
        self.watches_open -= 1
        self.open_watches[(peer, resource, namespace)] -= 1
        if not self.open_watches[(peer, resource, namespace)]:
            del self.open_watches[(peer, resource, namespace)]

    def clear_log(self) -> None:
        self.log.clear()

    def as_dict(self, objects: dict[str, int]) -> dict:
        return {
            "requests": dict(self.requests),
            "requests_total": self.requests_total,
            "watches_open": self.watches_open,
            "watches_opened_total": self.watches_opened_total,
            "open_watches": [
                {"peer": peer, "resource": resource, "namespace": namespace, "count": count}
                for (peer, resource, namespace), count in sorted(self.open_watches.items())
            ],
            "objects": objects,
        }
