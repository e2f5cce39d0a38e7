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
from dataclasses import MISSING, asdict, dataclass, field, fields

from kubesim.apiserver.paging import CONTINUE_TTL_S
from kubesim.errors import status_body

REQUEST_LOG_LIMIT = 20_000
"""Oldest request-log entries are dropped beyond this, so a long benchmark cannot exhaust memory."""
RULE_CODES = (401, 403, 410, 429, 500, 503, 504)
"""The statuses a rule may answer with: refused credentials, RBAC, expired resourceVersion, API Priority
and Fairness, and a control plane in trouble."""
DEFAULT_USER = "system:serviceaccount:ray:airflow"
"""Who a 403 says was refused: the ServiceAccount the project's RBAC (include/manifests/rbac/rbac.yaml)
grants to, as a cluster would name the user behind the kubeconfig's token."""


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
    until: float | None = field(default=None, metadata={"state": True})
    """When a rule set for ``seconds`` ends (``time.monotonic``): the rule's own, never a setting."""
    seconds: float | None = None
    retry_after_s: int | None = None
    user: str = DEFAULT_USER
    message: str | None = None
    served: bool = False
    watch_event: bool = True
    subjects: frozenset[str] = frozenset()
    delay_s: float = 0.0
    hits: int = field(default=0, metadata={"state": True})
    """How many requests the rule answered: reported, never set."""

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
        verbs = _names("names")("rule verbs", spec.get("verbs") or [])
        resources = _names("names")("rule resources", spec.get("resources") or [])
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
        subjects = _names("user names")("rule subjects", spec.get("subjects") or [])
        for flag in ("served", "watch_event"):
            if not isinstance(spec.get(flag, False), bool):
                raise FaultSettingsError(f"rule {flag} must be true or false, got {spec[flag]!r}")
        return cls(
            code=code,
            verbs=verbs,
            resources=resources,
            namespace=spec.get("namespace") or None,
            count=count,
            seconds=None if seconds is None else float(seconds),
            until=None if seconds is None else time.monotonic() + float(seconds),
            retry_after_s=retry_after,
            user=spec.get("user") or DEFAULT_USER,
            message=spec.get("message") or None,
            served=spec.get("served", False),
            watch_event=spec.get("watch_event", True),
            subjects=subjects,
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
        """Every field but ``until``, sets as sorted lists: what ``GET /kubesim/faults`` lists per rule."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self) if f.name != "until"}


RULE_FIELDS = frozenset(f.name for f in fields(FaultRule) if not f.metadata.get("state"))
"""What a rule in a POST /kubesim/faults body may name: every field of ``FaultRule`` but its own state."""


def _jsonable(value: object) -> object:
    return sorted(value) if isinstance(value, frozenset) else value


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
        return Refusal(403, status_body(403, "Forbidden", message or text, details or None), headers)
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


def _rate(name: str, value: object) -> float:
    rate = float(value)
    if not 0.0 <= rate <= 1.0:
        raise FaultSettingsError(f"{name} must be between 0 and 1")
    return rate


def _non_negative(name: str, value: object) -> float:
    return max(0.0, float(value))


def _count_or_flag(name: str, value: object) -> int | bool:
    if not isinstance(value, bool | int):
        raise FaultSettingsError(f"{name} must be an integer or a boolean")
    return value


def _rules(name: str, value: object) -> list[FaultRule]:
    if not isinstance(value, list):
        raise FaultSettingsError(f"{name} must be a list of rule objects")
    return [FaultRule.parse(rule) for rule in value]


def _names(what: str):
    def parse(name: str, value: object) -> frozenset[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise FaultSettingsError(f"{name} must be a list of {what}, got {value!r}")
        return frozenset(value)

    return parse


def _page_size(name: str, value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise FaultSettingsError(f"{name} must be a positive integer or null")
    return value


def _setting(default: object = None, parse=lambda name, value: value, *, listed: bool = True, factory=None):
    """A field of ``Faults`` a POST /kubesim/faults body may set: ``parse(name, value)`` checks and converts
    the body's value; ``listed`` False leaves it out of ``as_dict``."""
    metadata = {"parse": parse, "listed": listed}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class Faults:
    """The active faults. All default to "no fault".

    Every setting is a field made by ``_setting``: ``update`` checks a body's values with its parser,
    ``reset`` restores the defaults, ``as_dict`` lists them, all read from the fields.
    """

    error_rate: float = _setting(0.0, _rate)
    latency_ms: float = _setting(0.0, _non_negative)
    watch_drop_after_s: float | None = _setting(None, lambda n, v: None if v is None else _non_negative(n, v))
    expire_watches: int | bool = _setting(0, _count_or_flag)
    rules: list[FaultRule] = _setting(parse=_rules, factory=list)
    unserved_groups: frozenset[str] = _setting(frozenset(), _names("API group names"))
    """API groups the cluster does not serve, as one where that operator (Kueue, KubeRay) was never
    installed: discovery leaves them out and every path under ``/apis/<group>`` answers a plain-text 404,
    as the API server's not-found handler does. A group's subgroups go with it (``visibility.kueue.x-k8s.io``
    with ``kueue.x-k8s.io``)."""
    seed: int | None = _setting(None, listed=False)
    max_page_size: int | None = _setting(None, _page_size)
    """At most this many items per page of a list that asks for pages (``limit``), whatever the limit."""
    continue_ttl_s: float = _setting(CONTINUE_TTL_S, _non_negative)
    """Age at which a continue token is answered 410 Expired (etcd's compaction interval upstream)."""
    clock_offset_s: float = _setting(0.0, lambda name, value: float(value))
    """The cluster's clock minus the real one: timestamps in objects and the ``Date`` header (``Clock``)."""
    unpullable_images: frozenset[str] = _setting(frozenset(), _names("image references"))
    """Image references the registry does not have: pods using them wait in ``ErrImagePull`` /
    ``ImagePullBackOff`` (``kubesim.images``) until cleared."""
    _random: random.Random = field(default_factory=random.Random, repr=False)

    def update(self, settings: dict) -> None:
        """Apply a JSON body; an empty body resets everything (as DELETE does). ``rules`` replaces the
        rule list (``[]`` clears it); the other settings keep what the body does not name."""
        if not settings:
            self.reset()
            return
        known = [f for f in fields(self) if "parse" in f.metadata]
        unknown = set(settings) - {f.name for f in known}
        if unknown:
            raise FaultSettingsError(f"unknown fault settings: {sorted(unknown)}")
        for f in known:
            if f.name in settings:
                setattr(self, f.name, f.metadata["parse"](f.name, settings[f.name]))
                if f.name == "seed":
                    self._random.seed(self.seed)

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, f.default if f.default_factory is MISSING else f.default_factory())

    def as_dict(self) -> dict:
        self._drop_expired()
        listed = {f.name: _jsonable(getattr(self, f.name)) for f in fields(self) if f.metadata.get("listed")}
        listed["rules"] = [rule.as_dict() for rule in self.rules]
        return listed

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
        return {**asdict(self), "at": round(self.at, 3)}

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
