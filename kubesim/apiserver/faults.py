"""Fault injection, authentication and request accounting for the HTTP layer.

Tests and benchmarks need to see how clients behave when the API server misbehaves (500s, slowness,
dropped or expired watches) or says no (401, 403, 429 with Retry-After, 503, 410), and how many calls they
make. All of it lives here, apart from routing, so the rules are plain data the `/kubesim/faults`,
`/kubesim/auth`, `/kubesim/stats` and `/kubesim/requests` endpoints read and write.

A refusal is answered with the ``metav1.Status`` body and headers the real kube-apiserver writes for it
(``refusal``), so a client cannot tell kubesim's 403 from an RBAC denial, nor its 429 from API Priority and
Fairness shedding load.
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field

from kubesim.apiserver.paging import CONTINUE_TTL_S

REQUEST_LOG_LIMIT = 20_000
"""Oldest request-log entries are dropped beyond this, so a long benchmark cannot exhaust memory."""
RULE_CODES = (401, 403, 410, 429, 500, 503, 504)
"""The statuses a rule may answer with: refused credentials, RBAC, expired resourceVersion, API Priority
and Fairness, and a control plane in trouble."""
DEFAULT_USER = "system:serviceaccount:ray:airflow"
"""Who a 403 says was refused: the ServiceAccount the project's RBAC (include/manifests/rbac/rbac.yaml)
grants to, as a cluster would name the user behind the kubeconfig's token."""
RULE_FIELDS = {
    "code",
    "verbs",
    "resources",
    "namespace",
    "count",
    "seconds",
    "retry_after_s",
    "user",
    "message",
    "served",
    "watch_event",
    "subjects",
    "delay_s",
}


class FaultSettingsError(ValueError):
    """A POST /kubesim/faults body that names an unknown setting or an out-of-range value."""


@dataclass
class FaultRule:
    """Answer matching requests with ``code`` instead of serving them.

    A request matches when its RBAC verb is in ``verbs`` and its resource in ``resources`` (each empty:
    any), spelt as the request log's counter does (``rayjobs.ray.io``, ``pods/log``,
    ``localqueues.visibility.kueue.x-k8s.io/pendingworkloads``), and, if ``namespace`` is set, it is in
    that namespace. The rule then holds for its next ``count`` matches, or for ``seconds`` after it was set,
    or (neither) until the faults are cleared.

    ``subjects``, when set, limits the rule to requests authenticated as one of these users (``Auth``):
    one ServiceAccount's grant revoked while the others keep theirs.

    ``delay_s`` holds each matching request that long before it is answered: with ``code``, refused late (a
    proxy's timeout); without, served late (a slow API server: a list of a large namespace, or one throttled
    by API Priority and Fairness, e.g. the first list of a triggerer that just started).

    ``served`` serves the request first and replaces only its answer: the answer was lost on its way back
    (a proxy timed out, the connection dropped) after the server acted, so a client that retries finds
    its own work done. ``watch_event`` False sends a 410 to a watch as an HTTP 410 (a server or proxy that
    refuses the watch request itself) instead of the API server's ERROR event.
    """

    code: int | None
    """None: serve the request (after ``delay_s``)."""
    verbs: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    namespace: str | None = None
    count: int | None = None
    until: float | None = None
    seconds: float | None = None
    retry_after_s: int | None = None
    user: str = DEFAULT_USER
    message: str | None = None
    served: bool = False
    watch_event: bool = True
    subjects: frozenset[str] = frozenset()
    delay_s: float = 0.0
    hits: int = 0

    @classmethod
    def parse(cls, spec: object) -> FaultRule:
        if not isinstance(spec, dict):
            raise FaultSettingsError("each rule must be a JSON object")
        unknown = set(spec) - RULE_FIELDS
        if unknown:
            raise FaultSettingsError(f"unknown rule fields: {sorted(unknown)}; known: {sorted(RULE_FIELDS)}")
        code, delay = spec.get("code"), spec.get("delay_s", 0)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            raise FaultSettingsError(f"rule delay_s must be a number of seconds >= 0, got {delay!r}")
        if code not in RULE_CODES and not (code is None and delay > 0):
            raise FaultSettingsError(
                f"rule code must be one of {list(RULE_CODES)} (or left out with a delay_s > 0: a slow answer), "
                f"got {code!r}"
            )
        verbs, resources = spec.get("verbs") or [], spec.get("resources") or []
        for name, values in (("verbs", verbs), ("resources", resources)):
            if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
                raise FaultSettingsError(f"rule {name} must be a list of names, got {values!r}")
        count, seconds = spec.get("count"), spec.get("seconds")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise FaultSettingsError(
                f"rule count must be a positive integer (the next N matches), got {count!r}"
            )
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int | float)):
            raise FaultSettingsError(f"rule seconds must be a number, got {seconds!r}")
        retry_after = spec.get("retry_after_s")
        if retry_after is not None and (
            isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 1
        ):
            raise FaultSettingsError(f"rule retry_after_s must be a positive integer, got {retry_after!r}")
        if retry_after is None and code == 429:
            retry_after = 1  # what API Priority and Fairness sends
        subjects = spec.get("subjects") or []
        if not isinstance(subjects, list) or not all(isinstance(v, str) and v for v in subjects):
            raise FaultSettingsError(f"rule subjects must be a list of user names, got {subjects!r}")
        for flag in ("served", "watch_event"):
            if not isinstance(spec.get(flag, False), bool):
                raise FaultSettingsError(f"rule {flag} must be true or false, got {spec[flag]!r}")
        return cls(
            code=code,
            verbs=frozenset(verbs),
            resources=frozenset(resources),
            namespace=spec.get("namespace") or None,
            count=count,
            seconds=None if seconds is None else float(seconds),
            until=None if seconds is None else time.monotonic() + float(seconds),
            retry_after_s=retry_after,
            user=spec.get("user") or DEFAULT_USER,
            message=spec.get("message") or None,
            served=spec.get("served", False),
            watch_event=spec.get("watch_event", True),
            subjects=frozenset(subjects),
            delay_s=float(delay),
        )

    def matches(self, record: RequestRecord) -> bool:
        if self.subjects and record.user not in self.subjects:
            return False
        if self.verbs and record.verb not in self.verbs:
            return False
        if self.resources and record.resource_key not in self.resources:
            return False
        return self.namespace is None or record.namespace == self.namespace

    def expired(self, now: float) -> bool:
        return (self.count is not None and self.count <= 0) or (self.until is not None and now >= self.until)

    def as_dict(self) -> dict:
        return {
            "code": self.code,
            "verbs": sorted(self.verbs),
            "resources": sorted(self.resources),
            "namespace": self.namespace,
            "count": self.count,
            "seconds": self.seconds,
            "retry_after_s": self.retry_after_s,
            "user": self.user,
            "message": self.message,
            "served": self.served,
            "watch_event": self.watch_event,
            "subjects": sorted(self.subjects),
            "delay_s": self.delay_s,
            "hits": self.hits,
        }


@dataclass(frozen=True)
class Refusal:
    """What kubesim answers instead of serving a request: the HTTP status, its Status body and headers.

    ``as_watch_error`` marks a 410 on a watch: the API server sends that as HTTP 200 with one ERROR event
    carrying the Status, not as an HTTP error.
    """

    code: int
    body: dict
    headers: dict[str, str]
    as_watch_error: bool = False


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def forbidden_message(user: str, record: RequestRecord) -> tuple[str, dict]:
    """The RBAC denial as the API server words it (``authorization.ForbiddenStatusError``), and its details."""
    if not record.resource:
        return f'forbidden: User "{user}" cannot {record.verb} path "{record.path}"', {}
    resource = f"{record.resource}/{record.subresource}" if record.subresource else record.resource
    scope = f'in the namespace "{record.namespace}"' if record.namespace else "at the cluster scope"
    why = f'User "{user}" cannot {record.verb} resource "{resource}" in API group "{record.group}" {scope}'
    qualified = f"{record.resource}.{record.group}" if record.group else record.resource
    details = {"group": record.group, "kind": record.resource}
    if record.name:
        details["name"] = record.name
        return f'{qualified} "{record.name}" is forbidden: {why}', details
    return f"{qualified} is forbidden: {why}", details


def unauthorized() -> Refusal:
    """No or a wrong bearer token: the authentication filter's answer, before anything else is looked at."""
    return Refusal(401, status_body(401, "Unauthorized", "Unauthorized"), {})


def refusal(
    rule: FaultRule, record: RequestRecord, *, resource_version: str, current_version: str
) -> Refusal:
    """The answer a real API server gives for ``rule.code`` to this request (Status bodies as
    ``k8s.io/apimachinery/pkg/api/errors`` builds them; Retry-After where the server sets it)."""
    code, message = rule.code, rule.message
    headers: dict[str, str] = {}
    if rule.retry_after_s is not None:
        headers["Retry-After"] = str(rule.retry_after_s)
    if code == 401:
        return Refusal(401, status_body(401, "Unauthorized", message or "Unauthorized"), headers)
    if code == 403:
        # The user it names: the rule's, else the one the request authenticated as.
        user = rule.user if rule.user != DEFAULT_USER or not record.user else record.user
        text, details = forbidden_message(user, record)
        return Refusal(403, status_body(403, "Forbidden", message or text, details), headers)
    if code == 410:
        text = message or f"too old resource version: {resource_version or 0} ({current_version})"
        as_event = record.verb == "watch" and rule.watch_event
        return Refusal(410, status_body(410, "Expired", text), headers, as_watch_error=as_event)
    if code == 429:
        details = {"retryAfterSeconds": rule.retry_after_s}
        text = message or "Too many requests, please try again later."
        return Refusal(429, status_body(429, "TooManyRequests", text, details), headers)
    if code == 500:
        cause = message or "kubesim injected fault"
        details = {"causes": [{"message": cause}]}
        return Refusal(
            500, status_body(500, "InternalError", f"Internal error occurred: {cause}", details), headers
        )
    if code == 503:
        text = message or "service unavailable"  # kube-aggregator's words for an API server it cannot reach
        details = {"retryAfterSeconds": rule.retry_after_s} if rule.retry_after_s else None
        return Refusal(503, status_body(503, "ServiceUnavailable", text, details), headers)
    text = f"Timeout: {message or 'request did not complete within requested timeout - context deadline exceeded'}"
    details = {"retryAfterSeconds": rule.retry_after_s} if rule.retry_after_s else None
    return Refusal(504, status_body(504, "Timeout", text, details), headers)


@dataclass
class Faults:
    """The active faults. All default to "no fault"."""

    error_rate: float = 0.0
    latency_ms: float = 0.0
    watch_drop_after_s: float | None = None
    expire_watches: int | bool = 0
    rules: list[FaultRule] = field(default_factory=list)
    unserved_groups: frozenset[str] = frozenset()
    """API groups the cluster does not serve, as one where that operator (Kueue, KubeRay) was never
    installed: discovery leaves them out and every path under ``/apis/<group>`` answers a plain-text 404,
    as the API server's not-found handler does. A group's subgroups go with it (``visibility.kueue.x-k8s.io``
    with ``kueue.x-k8s.io``)."""
    seed: int | None = None
    max_page_size: int | None = None
    """At most this many items per page of a list that asks for pages (``limit``), whatever the limit."""
    continue_ttl_s: float = CONTINUE_TTL_S
    """Age at which a continue token is answered 410 Expired (etcd's compaction interval upstream)."""
    clock_offset_s: float = 0.0
    """The cluster's clock minus the real one: timestamps in objects and the ``Date`` header (``Clock``)."""
    unpullable_images: frozenset[str] = frozenset()
    """Image references the registry does not have: pods using them wait in ``ErrImagePull`` /
    ``ImagePullBackOff`` (``kubesim.images``) until cleared."""
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def update(self, settings: dict) -> None:
        """Apply a JSON body; an empty body resets everything (as DELETE does). ``rules`` replaces the
        rule list (``[]`` clears it); the other settings keep what the body does not name."""
        if not settings:
            self.reset()
            return
        known = {"error_rate", "latency_ms", "watch_drop_after_s", "expire_watches", "rules", "unserved_groups",
                 "seed", "max_page_size", "continue_ttl_s", "clock_offset_s", "unpullable_images"}  # fmt: skip
        unknown = set(settings) - known
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
        if "rules" in settings:
            rules = settings["rules"]
            if not isinstance(rules, list):
                raise FaultSettingsError("rules must be a list of rule objects")
            self.rules = [FaultRule.parse(rule) for rule in rules]
        if "unserved_groups" in settings:
            groups = settings["unserved_groups"]
            if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
                raise FaultSettingsError(f"unserved_groups must be a list of API group names, got {groups!r}")
            self.unserved_groups = frozenset(groups)
        if "seed" in settings:
            self.seed = settings["seed"]
            self._random.seed(self.seed)
        if "max_page_size" in settings:
            size = settings["max_page_size"]
            if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
                raise FaultSettingsError("max_page_size must be a positive integer or null")
            self.max_page_size = size
        if "continue_ttl_s" in settings:
            self.continue_ttl_s = max(0.0, float(settings["continue_ttl_s"]))
        if "clock_offset_s" in settings:
            self.clock_offset_s = float(settings["clock_offset_s"])
        if "unpullable_images" in settings:
            images = settings["unpullable_images"]
            if not isinstance(images, list) or not all(isinstance(i, str) and i for i in images):
                raise FaultSettingsError(
                    f"unpullable_images must be a list of image references, got {images!r}"
                )
            self.unpullable_images = frozenset(images)

    def reset(self) -> None:
        self.error_rate = 0.0
        self.latency_ms = 0.0
        self.watch_drop_after_s = None
        self.expire_watches = 0
        self.rules = []
        self.unserved_groups = frozenset()
        self.seed = None
        self._random = random.Random()
        self.max_page_size = None
        self.continue_ttl_s = CONTINUE_TTL_S
        self.clock_offset_s = 0.0
        self.unpullable_images = frozenset()

    def as_dict(self) -> dict:
        self._drop_expired()
        return {
            "error_rate": self.error_rate,
            "latency_ms": self.latency_ms,
            "watch_drop_after_s": self.watch_drop_after_s,
            "expire_watches": self.expire_watches,
            "rules": [rule.as_dict() for rule in self.rules],
            "unserved_groups": sorted(self.unserved_groups),
            "max_page_size": self.max_page_size,
            "continue_ttl_s": self.continue_ttl_s,
            "clock_offset_s": self.clock_offset_s,
            "unpullable_images": sorted(self.unpullable_images),
        }

    def serves(self, group: str) -> bool:
        """Whether API group ``group`` is served (not ``unserved_groups``, nor a subgroup of one)."""
        return not any(group == g or group.endswith(f".{g}") for g in self.unserved_groups)

    def unserved_path(self, path: str) -> bool:
        """Whether ``path`` is under an unserved group (``/apis/<group>[/...]``)."""
        parts = path.strip("/").split("/")
        return len(parts) >= 2 and parts[0] == "apis" and not self.serves(parts[1])

    def take_rule(self, record: RequestRecord) -> FaultRule | None:
        """The first live rule this request matches, counting the match (one of its N); None to serve it."""
        if not self.rules:
            return None
        self._drop_expired()
        for rule in self.rules:
            if rule.matches(record):
                rule.hits += 1
                if rule.count is not None:
                    rule.count -= 1
                return rule
        return None

    def _drop_expired(self) -> None:
        now = time.monotonic()
        self.rules = [rule for rule in self.rules if not rule.expired(now)]

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


@dataclass
class Auth:
    """Bearer-token authentication: one static token, plus named users (ServiceAccount tokens).

    ``token`` None accepts every request (the default). Otherwise an API request without
    ``Authorization: Bearer <token>`` (or a named user's token) is answered 401, as by a server that allows
    anonymous requests only to its health probes (``/healthz``, ``/readyz``, ``/livez``); ``/kubesim/*`` is
    the test harness's own and never asks. Changing ``token`` is a credential rotation: clients holding the
    old one get 401 until they load the new one.

    ``accounts`` maps a token to the user it authenticates as (``system:serviceaccount:<ns>:<name>``), as a
    cluster's token authenticator does; the request log names that user, as a cluster's audit log does, so
    a test can tell which component's credentials made each call.
    """

    token: str | None = None
    accounts: dict[str, str] = field(default_factory=dict)
    """Further identities: bearer token -> the user it authenticates as (``DEFAULT_USER`` is ``token``'s),
    e.g. a triggerer's ServiceAccount beside the workers', so a fault rule's ``subjects`` can revoke one."""

    def allows(self, path: str, authorization: str | None) -> bool:
        if self.token is None or path in ("/healthz", "/readyz", "/livez"):
            return True
        return (
            authorization == f"Bearer {self.token}"
            or (authorization or "").removeprefix("Bearer ") in self.accounts
        )

    def user_of(self, authorization: str | None) -> str:
        """Who a request's ``Authorization`` header authenticates as: an account's user, ``DEFAULT_USER``
        for the static token (or anyone while no token is required), "" for a credential refused."""
        token = (authorization or "").removeprefix("Bearer ")
        if token in self.accounts:
            return self.accounts[token]
        if self.token is None or authorization == f"Bearer {self.token}":
            return DEFAULT_USER
        return ""


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
    at: float = 0.0
    """Wall-clock time the request arrived (``time.time()``), so a test can tell how long a client waited."""
    user: str = ""
    """Who the request authenticated as (``Auth.user_of``)."""

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
            "at": round(self.at, 3),
            "user": self.user,
        }

    @property
    def resource_key(self) -> str:
        """The resource as the store names it, with its subresource: plural[.group][/sub]; "" for a path
        that names no resource (discovery, /version)."""
        if not self.resource:
            return ""
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{resource}/{self.subresource}" if self.subresource else resource

    @property
    def counter_key(self) -> str:
        """`<verb> <resource>` (``resource_key``), or `<verb> <path>` for a path that names no resource."""
        return f"{self.verb} {self.resource_key or self.path}"


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
