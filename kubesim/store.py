"""The object store: what etcd plus the generic API server registry do for a real cluster.

One global ``resourceVersion`` counter orders every write. Each write is appended to a bounded history
and fanned out to watchers, so a client that lost its watch can resume from the last version it saw,
or gets ``410 Expired`` and relists, exactly the contract Airflow's watch hub is written against.

Performance rests on one invariant: **a stored object is never mutated after it is committed.** Every
write builds a new dict, so the stored dict itself can be shared by the history and by every watcher
without copying on the write path; readers get their private copy when they read (``get``/``list``)
or when they take an event off their watch queue.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from kubesim.clock import Clock
from kubesim.resources import Registry, ResourceType
from kubesim.selectors import (
    DNS1123_SUBDOMAIN_MSG,
    FieldSelector,
    LabelSelector,
    label_value_errors,
    parse_field_selector,
    parse_label_selector,
    qualified_name_errors,
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def fast_copy(value):
    """A deep copy of a JSON-shaped value, ~7x faster than ``copy.deepcopy`` (a C round trip)."""
    return _decoder.decode(_encoder.encode(value))


# --- errors ------------------------------------------------------------------------------------------


class ApiError(Exception):
    """An API failure, carrying what becomes the ``metav1.Status`` body of the HTTP response."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _resource_name(rt: ResourceType) -> str:
    return rt.key  # "pods", "rayjobs.ray.io": how upstream names the resource in messages


def _details(rt: ResourceType, name: str, kind: str | None = None) -> dict:
    details = {"name": name, "kind": kind or rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_resource_name(rt)} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_resource_name(rt)} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    message = f'Operation cannot be fulfilled on {_resource_name(rt)} "{name}": {why}'
    return ApiError(409, "Conflict", message, _details(rt, name))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(rt: ResourceType, name: str, causes: list[dict]) -> ApiError:
    """A 422 worded as upstream: one cause inline, several in brackets."""
    texts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = _details(rt, name, kind=rt.kind) | {"causes": causes}
    return ApiError(422, "Invalid", f'{rt.qualified_kind} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def _check_preconditions(rt: ResourceType, current: dict, preconditions: dict | None) -> None:
    """DeleteOptions.preconditions, worded as the API server's early check (``rest.BeforeDelete``), which
    names the resource by its kind (``RayJob.ray.io``), not its plural."""
    if not preconditions:
        return
    meta = current["metadata"]
    uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid is not None and uid != meta.get("uid"):
        why = (
            f"the UID in the precondition ({uid}) does not match the UID in record ({meta.get('uid')}). "
            "The object might have been deleted and then recreated"
        )
    elif version is not None and version != meta.get("resourceVersion"):
        why = (
            f"the ResourceVersion in the precondition ({version}) does not match the ResourceVersion in "
            f"record ({meta.get('resourceVersion')}). The object might have been modified"
        )
    else:
        return
    message = f'Operation cannot be fulfilled on {rt.qualified_kind} "{meta["name"]}": {why}'
    raise ApiError(409, "Conflict", message, _details(rt, meta["name"], kind=rt.kind))


def _cause(field: str, reason: str, message: str) -> dict:
    return {"reason": reason, "message": message, "field": field}


# --- metadata validation (pure) ----------------------------------------------------------------------

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def _invalid_value(field: str, value: str, detail: str) -> dict:
    return _cause(field, "FieldValueInvalid", f'Invalid value: "{value}": {detail}')


def _name_errors(rt: ResourceType, name: str) -> list[str]:
    """Namespaces are DNS-1123 labels; every other kind we serve is a DNS-1123 subdomain."""
    limit, pattern, message = (
        (63, _DNS1123_LABEL, DNS1123_LABEL_MSG)
        if rt.key == "namespaces"
        else (253, _DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_MSG)
    )
    if len(name) > limit:
        return [f"must be no more than {limit} characters"]
    return [] if pattern.match(name) else [message]


def _string_map_errors(field: str, values, *, labels: bool) -> list[dict]:
    """Label keys and values, or annotation keys (checked case-insensitively, as upstream)."""
    if not isinstance(values, dict):
        return [_cause(field, "FieldValueTypeInvalid", "Invalid value: must be a map of strings")]
    causes = []
    for key, value in values.items():
        checked_key = key if labels else key.lower()
        causes += [_invalid_value(field, key, error) for error in qualified_name_errors(checked_key)]
        if not isinstance(value, str):
            causes.append(
                _cause(f"{field}[{key}]", "FieldValueTypeInvalid", "Invalid value: must be a string")
            )
        elif labels:
            causes += [_invalid_value(field, value, error) for error in label_value_errors(value)]
    return causes


def metadata_errors(rt: ResourceType, meta: dict) -> list[dict]:
    """Name, label and annotation problems, as the API server reports them for every kind."""
    name = meta.get("name") or ""
    causes = [_invalid_value("metadata.name", name, error) for error in _name_errors(rt, name)]
    causes += _string_map_errors("metadata.labels", meta.get("labels") or {}, labels=True)
    causes += _string_map_errors("metadata.annotations", meta.get("annotations") or {}, labels=False)
    return causes


# --- patches (pure) ----------------------------------------------------------------------------------


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch; ``target`` is consumed (mutated) and the result returned."""
    if not isinstance(patch, dict):
        return fast_copy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strip_directives(patch):
    """Drop strategic-merge directives (``$patch``, ``$retainKeys``, ``$setElementOrder/...``).

    We apply strategic merge patches as merge patches: lists are replaced rather than merged by key,
    which is what every patch this project's clients send needs.
    """
    if isinstance(patch, dict):
        return {k: strip_directives(v) for k, v in patch.items() if not k.startswith("$")}
    if isinstance(patch, list):
        return [strip_directives(v) for v in patch]
    return patch


class JsonPatchError(Exception):
    """A JSON patch that is well formed but does not apply (missing path, failed test)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}: must start with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _json_equal(a, b) -> bool:
    """JSON equality: unlike Python's, ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _list_index(container: list, token: str, path: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise JsonPatchError(f"invalid array index {token!r} in {path}")
    index = int(token)
    if index > len(container) or (index == len(container) and not for_add):
        raise JsonPatchError(f"array index {index} out of bounds in {path}")
    return index


def _resolve(doc, tokens: list[str], path: str):
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise JsonPatchError(f"doc is missing path: {path}")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_list_index(doc, token, path, for_add=False)]
        else:
            raise JsonPatchError(f"doc is missing path: {path}")
    return doc


def _add(doc, tokens: list[str], value, path: str):
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_list_index(parent, last, path, for_add=True), value)
    else:
        raise JsonPatchError(f"add operation does not apply: doc is missing path: {path}")
    return doc


def _remove(doc, tokens: list[str], path: str):
    if not tokens:
        raise JsonPatchError("remove operation does not apply: cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"remove operation does not apply: doc is missing path: {path}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_list_index(parent, last, path, for_add=False))
    raise JsonPatchError(f"remove operation does not apply: doc is missing path: {path}")


def json_patch(doc, operations):
    """RFC 6902 JSON patch; ``doc`` is consumed (mutated) and the result returned.

    Raises a 400 for a malformed patch and ``JsonPatchError`` for one that does not apply.
    """
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation {op!r}: 'op' and 'path' are required")
        kind, path = op["op"], op["path"]
        tokens = _pointer(path)
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"invalid json patch operation {op!r}: 'value' is required")
        if kind == "add":
            doc = _add(doc, tokens, fast_copy(op["value"]), path)
        elif kind == "remove":
            _remove(doc, tokens, path)
        elif kind == "replace":
            if not tokens:
                doc = fast_copy(op["value"])
                continue
            _resolve(doc, tokens, path)  # must exist
            _remove(doc, tokens, path)
            doc = _add(doc, tokens, fast_copy(op["value"]), path)
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise bad_request(f"invalid json patch operation {op!r}: 'from' is required")
            source = _pointer(op["from"])
            if kind == "move":
                if tokens[: len(source)] == source and len(tokens) > len(source):
                    raise JsonPatchError(f"move operation cannot move {op['from']} into its own child {path}")
                value = _remove(doc, source, op["from"])
            else:
                value = fast_copy(_resolve(doc, source, op["from"]))
            doc = _add(doc, tokens, value, path)
        elif kind == "test":
            if not _json_equal(_resolve(doc, tokens, path), op["value"]):
                raise JsonPatchError(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"unknown json patch operation {kind!r}")
    return doc


# --- watching ----------------------------------------------------------------------------------------


@dataclass
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK | ERROR
    object: dict


class Delivery:
    """One event as a watch sees it, shared by every watcher that sees the change the same way.

    A write seen by 1,000 HTTP watch streams is serialised once, not 1,000 times: ``line()`` encodes
    lazily and keeps the bytes, and the store hands the same ``Delivery`` to every subscriber.
    ``change`` is the committed write it shows, so a consumer can time its fan-out from ``committed_at``.
    """

    __slots__ = ("type", "object", "change", "_line")

    def __init__(self, type_: str, obj: dict, change: _Change) -> None:
        self.type = type_
        self.object = obj  # frozen: never mutate
        self.change = change
        self._line: bytes | None = None

    def line(self) -> bytes:
        """The newline-terminated JSON ``{"type", "object"}`` watch line, encoded at most once."""
        if self._line is None:
            self._line = _encoder.encode({"type": self.type, "object": self.object}) + b"\n"
        return self._line


@dataclass(slots=True)
class _Change:
    """One committed write, as kept in the history ring and handed to watchers."""

    rv: int
    key: str
    namespace: str
    type: str
    object: dict  # frozen: the committed object
    prev: dict | None  # frozen: the object before a MODIFIED
    views: dict[str, Delivery] | None = None  # deliveries of ``object``, by event type
    # Fan-out timing, on the write itself so that timing allocates nothing per event: ``committed_at`` is
    # stamped as the write is published (time.monotonic); the HTTP layer counts the streams it handed the
    # event to and when it last did (``api_stream.FanoutTimes``).
    committed_at: float = 0.0
    handed: int = 0
    handed_at: float = 0.0

    def delivery(self, type_: str) -> Delivery:
        """The shared delivery of the committed object as ``type_`` (several filters may see it alike)."""
        if self.views is None:
            self.views = {}
        found = self.views.get(type_)
        if found is None:
            found = self.views[type_] = Delivery(type_, self.object, self)
        return found


_CLOSED = object()


@dataclass(frozen=True, slots=True)
class _Filter:
    """A watch's selectors. Watches with equal filters share one evaluation per change."""

    labels: LabelSelector
    fields: FieldSelector

    def passes(self, obj: dict) -> bool:
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)

    def view(self, change: _Change) -> Delivery | None:
        """What a watch with this filter sees of a change: selector transitions of a MODIFIED become
        ADDED / DELETED, as the API server's watch cache reports them."""
        if self.labels.empty and self.fields.empty:
            return change.delivery(change.type)
        now = self.passes(change.object)
        if change.type != "MODIFIED" or change.prev is None:
            return change.delivery(change.type) if now else None
        before = self.passes(change.prev)
        if now:
            return change.delivery("MODIFIED" if before else "ADDED")
        if before:
            # Upstream sends the last matching content stamped with the new resourceVersion.
            prev = change.prev
            stamped = {**prev, "metadata": {**prev["metadata"], "resourceVersion": str(change.rv)}}
            return Delivery("DELETED", stamped, change)
        return None


class _Fanout:
    """The subscriptions of one kind in one namespace scope, grouped by filter.

    Filters with an equality requirement (``team=a``, ``shard in (1,2)``) are indexed by it, so a write
    evaluates only the filters its labels (before or after) could satisfy: 1,000 informers each
    selecting their own label value cost a write two lookups, not 1,000 selector evaluations.
    """

    def __init__(self) -> None:
        self.by_filter: dict[_Filter, set[Subscription]] = {}
        self._unanchored: set[_Filter] = set()
        self._anchored: dict[str, dict[str, set[_Filter]]] = {}  # label key -> value -> filters

    @staticmethod
    def _anchor(filter_: _Filter):
        return next((r for r in filter_.labels.requirements if r.operator in ("=", "in")), None)

    def add(self, subscription: Subscription) -> None:
        filter_ = subscription.filter
        subscriptions = self.by_filter.get(filter_)
        if subscriptions is None:
            subscriptions = self.by_filter[filter_] = set()
            anchor = self._anchor(filter_)
            if anchor is None:
                self._unanchored.add(filter_)
            else:
                by_value = self._anchored.setdefault(anchor.key, {})
                for value in anchor.values:
                    by_value.setdefault(value, set()).add(filter_)
        subscriptions.add(subscription)

    def discard(self, subscription: Subscription) -> None:
        filter_ = subscription.filter
        subscriptions = self.by_filter.get(filter_)
        if subscriptions is None:
            return
        subscriptions.discard(subscription)
        if subscriptions:
            return
        del self.by_filter[filter_]
        anchor = self._anchor(filter_)
        if anchor is None:
            self._unanchored.discard(filter_)
            return
        by_value = self._anchored[anchor.key]
        for value in anchor.values:
            filters = by_value.get(value)
            if filters is not None:
                filters.discard(filter_)
                if not filters:
                    del by_value[value]
        if not by_value:
            del self._anchored[anchor.key]

    def candidates(self, change: _Change):
        """The filters that may see ``change`` (a superset: each still decides with ``view``)."""
        if not self._anchored:
            return self.by_filter
        found = list(self._unanchored)
        seen: set[_Filter] = set()
        for label, by_value in self._anchored.items():
            for obj in (change.object, change.prev):
                value = (obj["metadata"].get("labels") or {}).get(label) if obj is not None else None
                for filter_ in by_value.get(value, ()) if value is not None else ():
                    if filter_ not in seen:
                        seen.add(filter_)
                        found.append(filter_)
        return found


class Subscription:
    """A watch in push form: the store calls ``deliver(delivery)`` synchronously inside every write it
    matches, in resourceVersion order. For consumers that must not wait on a queue per event (the HTTP
    watch streams); ``deliver`` must not block, raise, mutate the delivery, or (un)subscribe.
    """

    def __init__(
        self,
        store: Store,
        key: str,
        namespace: str | None,
        filter_: _Filter,
        deliver: Callable[[Delivery], None],
    ) -> None:
        self._store = store
        self.key = key
        self.namespace = namespace
        self.filter = filter_
        self.deliver = deliver
        self.closed = False

    def _offer(self, change: _Change) -> None:
        if (delivery := self.filter.view(change)) is not None:
            self.deliver(delivery)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._store._unregister(self)


class Watcher(Subscription):
    """An async iterator of ``WatchEvent`` for one watch; events wait in its own unbounded queue.

    The store only ever ``put_nowait``s into the queue, so a slow consumer never slows a write.
    """

    def __init__(
        self, store: Store, key: str, namespace: str | None, filter_: _Filter, copy_objects: bool
    ) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        super().__init__(store, key, namespace, filter_, self._queue.put_nowait)
        self._copy = copy_objects

    def _event(self, delivery: Delivery) -> WatchEvent:
        obj = delivery.object
        return WatchEvent(delivery.type, fast_copy(obj) if self._copy else obj)

    def pending(self) -> int:
        """Events queued and not yet taken (for stats and back-pressure decisions)."""
        return self._queue.qsize()

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> WatchEvent:
        if self.closed:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _CLOSED:
            raise StopAsyncIteration
        return self._event(item)

    async def next(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event, or None when ``timeout`` seconds pass first or the watch is closed."""
        if self.closed:
            return None
        if not self._queue.empty():  # the common case under load: no task, no timer
            item = self._queue.get_nowait()
            return None if item is _CLOSED else self._event(item)
        try:
            item = await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None
        return None if item is _CLOSED else self._event(item)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._queue.put_nowait(_CLOSED)  # wake a consumer blocked in get()


# --- the store ---------------------------------------------------------------------------------------

AdmissionHook = Callable[[str, ResourceType, dict, "dict | None"], None]
S = TypeVar("S", bound=Subscription)

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # upstream's generateName alphabet: no vowels, no words
_PROPAGATION = (None, "Background", "Foreground", "Orphan")
FOREGROUND = "foregroundDeletion"


def _spec_part(obj: dict) -> dict:
    """Everything that counts for ``generation``: the object minus metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _filter(label_selector: str | None, field_selector: str | None) -> _Filter:
    return _Filter(parse_label_selector(label_selector), parse_field_selector(field_selector))


def _owner_uids(obj: dict) -> set[str]:
    return {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("uid")}


class Store:
    """Objects of every served kind, with API-server semantics. Synchronous: every call is atomic."""

    def __init__(self, registry: Registry, clock: Clock, *, history: int = 20000) -> None:
        self.registry = registry
        self.clock = clock
        self._objects: dict[
            str, dict[str, dict[str, dict]]
        ] = {}  # key -> namespace ("" if none) -> name -> obj
        self._rv = 0
        self._history: deque[_Change] = deque(maxlen=history)
        self._evicted_rv = 0  # newest resourceVersion that fell out of the history
        # key -> namespace (None: all) -> fan-out: a write touches only its kind's watchers and
        # evaluates each distinct filter it could match once.
        self._watchers: dict[str, dict[str | None, _Fanout]] = {}
        self._hooks: list[AdmissionHook] = []
        self._by_uid: dict[str, tuple[str, str, str]] = {}  # uid -> (key, namespace, name)
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent uids
        self._emptying: set[str] = set()  # namespaces whose contents _delete_namespace is deleting right now
        for name in ("default", "kube-system", "kube-public"):
            self.create("namespaces", {"metadata": {"name": name}})

    # -- public API --------------------------------------------------------------------------------

    def resource_version(self) -> str:
        return str(self._rv)

    def add_admission_hook(self, hook: AdmissionHook) -> None:
        """Run ``hook(operation, rt, obj, old)`` on every CREATE and UPDATE (not on status writes).

        The hook may mutate ``obj`` (defaulting) or raise ``ApiError`` to deny; it must not mutate ``old``.
        Hooks run in registration order, before schema validation, like mutating webhooks.
        """
        self._hooks.append(hook)

    def counts(self) -> dict[str, int]:
        """Number of stored objects per resource key."""
        return {
            key: sum(len(names) for names in by_ns.values()) for key, by_ns in self._objects.items() if by_ns
        }

    def create(self, key: str, obj: dict, *, namespace: str | None = None, dry_run: bool = False) -> dict:
        rt = self._type(key)
        body = self._own_copy(obj)
        new = {"apiVersion": rt.api_version, "kind": rt.kind}
        new.update((k, v) for k, v in body.items() if k not in new)
        meta = new["metadata"]
        ns = self._create_namespace(rt, meta, namespace)
        if not meta.get("name") and not meta.get("generateName"):
            cause = _cause(
                "metadata.name", "FieldValueRequired", "Required value: name or generateName is required"
            )
            raise invalid(rt, "", [cause])
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.clock.timestamp()
        meta["generation"] = 1
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        generated = not meta.get("name")
        for attempt in range(8):
            if generated:
                meta["name"] = self._generated_name(meta["generateName"])
            if meta["name"] not in self._objects.get(key, {}).get(ns, {}):
                break
            if not generated or attempt == 7:
                raise already_exists(rt, meta["name"])
        self._initial_state(rt, new)
        if ns and self._namespace_terminating(ns):
            message = (
                f'{_resource_name(rt)} "{meta["name"]}" is forbidden: unable to create new content in namespace '
                f"{ns} because it is being terminated"
            )
            raise ApiError(403, "Forbidden", message, _details(rt, meta["name"]))
        for hook in self._hooks:
            hook("CREATE", rt, new, None)
        self._validate(rt, new)
        if meta["name"] in self._objects.get(key, {}).get(ns, {}):  # a hook may have renamed it
            raise already_exists(rt, meta["name"])
        if dry_run:
            return new
        self._commit(rt, ns, new, "ADDED", None)
        self._index_owners(meta["uid"], set(), _owner_uids(new))
        return fast_copy(new)

    def get(self, key: str, name: str, *, namespace: str | None = None) -> dict:
        rt = self._type(key)
        return fast_copy(self._current(rt, name, self._scope(rt, namespace)))

    def list(
        self,
        key: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[dict], str]:
        rt = self._type(key)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector)
        items = [
            fast_copy(obj)
            for obj in self._iter(key, namespace if rt.namespaced else None)
            if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)
        ]
        return items, str(self._rv)

    def update(self, key: str, obj: dict, *, subresource: str | None = None) -> dict:
        rt = self._type(key)
        new = self._own_copy(obj)
        meta = new["metadata"]
        name = meta.get("name")
        if not name:
            raise invalid(
                rt, "", [_cause("metadata.name", "FieldValueRequired", "Required value: name is required")]
            )
        current = self._current(rt, name, self._scope(rt, meta.get("namespace")))
        return self._update(rt, current, new, subresource)

    def patch(
        self,
        key: str,
        name: str,
        patch,
        *,
        patch_type: str = "merge",
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict:
        rt = self._type(key)
        current = self._current(rt, name, self._scope(rt, namespace))
        doc = fast_copy(current)
        if patch_type in ("merge", "strategic"):
            if not isinstance(patch, dict):
                raise bad_request(f"{patch_type} patch must be a JSON object")
            doc = merge_patch(doc, strip_directives(patch) if patch_type == "strategic" else patch)
        elif patch_type == "json":
            try:
                doc = json_patch(doc, patch)
            except JsonPatchError as exc:
                raise ApiError(422, "Invalid", str(exc)) from None
        else:
            raise ApiError(415, "UnsupportedMediaType", f"patch type {patch_type!r} is not supported")
        if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
            raise bad_request("the patched object must be a JSON object with metadata")
        if doc["metadata"].get("name") != name:
            raise bad_request(
                f"the name of the object ({doc['metadata'].get('name')}) does not match the name on the URL ({name})"
            )
        return self._update(rt, current, doc, subresource)

    def delete(
        self,
        key: str,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
        dry_run: bool = False,
    ) -> dict:
        """Delete ``name``; ``preconditions`` (``{"uid", "resourceVersion"}`` of DeleteOptions) must match
        the stored object or the answer is 409 Conflict, checked before anything else as the API server
        does, so a deletion decided on an older version or another object with the same name never happens.
        An object that is already terminating is checked the same way (its deletion bumped its version)."""
        rt = self._type(key)
        if propagation_policy not in _PROPAGATION:
            raise bad_request(f"unsupported propagationPolicy {propagation_policy!r}")
        current = self._current(rt, name, self._scope(rt, namespace))
        _check_preconditions(rt, current, preconditions)
        if dry_run:
            return fast_copy(current)
        if rt.key == "namespaces":
            return fast_copy(self._delete_namespace(current))
        return fast_copy(self._delete(rt, current, propagation_policy))

    def watch(
        self,
        key: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        copy_objects: bool = True,
    ) -> Watcher:
        """Open a watch. ``copy_objects=False`` hands out the shared frozen objects (read-only use only,
        e.g. serialising them onto an HTTP stream), which saves a copy per event per watcher."""
        rt = self._type(key)
        ns = namespace if rt.namespaced and namespace else None
        watcher = Watcher(self, key, ns, _filter(label_selector, field_selector), copy_objects)
        return self._register(watcher, resource_version)

    def subscribe(
        self,
        key: str,
        deliver: Callable[[Delivery], None],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
    ) -> Subscription:
        """A watch whose events are pushed: ``deliver`` is called inside each matching write (and, before
        this returns, for the initial or replayed events). Same semantics and errors as ``watch``;
        deliveries carry the shared frozen objects, so ``deliver`` must treat them as read-only."""
        rt = self._type(key)
        ns = namespace if rt.namespaced and namespace else None
        subscription = Subscription(self, key, ns, _filter(label_selector, field_selector), deliver)
        return self._register(subscription, resource_version)

    def _register(self, subscription: S, resource_version: str | None) -> S:
        """Replay what the watch starts with (the current objects, or history after a version), then
        add it to the fan-out: nothing can be written in between, as the store never awaits."""
        key, ns = subscription.key, subscription.namespace
        if resource_version in (None, "", "0"):
            for obj in self._iter(key, ns):
                subscription._offer(_Change(self._rv, key, ns or "", "ADDED", obj, None))
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise bad_request(f"invalid resourceVersion {resource_version!r}") from None
            if since < self._evicted_rv:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({self._evicted_rv})")
            for change in self._changes_since(since):
                if change.key == key and (ns is None or change.namespace == ns):
                    subscription._offer(change)
        self._watchers.setdefault(key, {}).setdefault(ns, _Fanout()).add(subscription)
        return subscription

    # -- lookups -----------------------------------------------------------------------------------

    def _type(self, key: str) -> ResourceType:
        rt = self.registry.get(key)
        if rt is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({key})")
        return rt

    def _scope(self, rt: ResourceType, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        if not namespace:
            raise bad_request(f"a namespace is required for the namespaced resource {rt.key}")
        return namespace

    def _current(self, rt: ResourceType, name: str, ns: str) -> dict:
        obj = self._objects.get(rt.key, {}).get(ns, {}).get(name)
        if obj is None:
            raise not_found(rt, name)
        return obj

    def _lookup_uid(self, uid: str) -> tuple[ResourceType, dict] | None:
        where = self._by_uid.get(uid)
        if where is None:
            return None
        key, ns, name = where
        return self.registry.get(key), self._objects[key][ns][name]

    def _iter(self, key: str, namespace: str | None):
        by_ns = self._objects.get(key, {})
        spaces = [namespace] if namespace is not None else sorted(by_ns)
        for ns in spaces:
            names = by_ns.get(ns, {})
            for name in sorted(names):
                yield names[name]

    def _changes_since(self, since: int) -> list[_Change]:
        newer = []
        for change in reversed(self._history):
            if change.rv <= since:
                break
            newer.append(change)
        newer.reverse()
        return newer

    def _namespace_terminating(self, ns: str) -> bool:
        namespace = self._objects.get("namespaces", {}).get("", {}).get(ns)
        return namespace is not None and bool(namespace["metadata"].get("deletionTimestamp"))

    # -- write path --------------------------------------------------------------------------------

    def _own_copy(self, obj: dict) -> dict:
        if not isinstance(obj, dict):
            raise bad_request("the object must be a JSON object")
        try:
            new = fast_copy(obj)
        except (TypeError, msgspec.EncodeError) as exc:
            raise bad_request(f"the object is not valid JSON: {exc}") from None
        if not isinstance(new.get("metadata"), dict):
            new["metadata"] = {}
        return new

    def _create_namespace(self, rt: ResourceType, meta: dict, namespace: str | None) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        in_body = meta.get("namespace")
        if namespace and in_body and namespace != in_body:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        ns = namespace or in_body
        if not ns:
            raise bad_request(f"a namespace is required for the namespaced resource {rt.key}")
        if ns not in self._objects.get("namespaces", {}).get("", {}):
            raise ApiError(
                404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"}
            )
        meta["namespace"] = ns
        return ns

    def _initial_state(self, rt: ResourceType, new: dict) -> None:
        """What the API server itself sets on create: status is the server's, not the client's."""
        if rt.key == "namespaces":
            new.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            new["status"] = {"phase": "Active"}
            labels = new["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = new["metadata"].get("name", "")
        elif rt.key == "pods":
            new["status"] = {"phase": "Pending"}
        elif rt.has_status:
            new.pop("status", None)

    @staticmethod
    def _generated_name(base: str) -> str:
        return base[:58] + "".join(random.choices(_NAME_ALPHABET, k=5))

    def _validate(self, rt: ResourceType, obj: dict) -> None:
        causes = []
        if rt.schema is not None:
            from kubesim import schema  # written in parallel; only kinds with a CRD schema need it

            schema.apply_defaults(obj, rt.schema)
            causes += [_cause(e.field, e.reason, e.message) for e in schema.validate(obj, rt.schema)]
        causes += metadata_errors(rt, obj["metadata"])
        if causes:
            raise invalid(rt, obj["metadata"].get("name", ""), causes)

    def _update(
        self, rt: ResourceType, current: dict, new: dict, subresource: str | None, *, hooks: bool = True
    ) -> dict:
        name = current["metadata"]["name"]
        meta = new["metadata"]
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise conflict(rt, name, STALE)
        uid = meta.get("uid")
        if uid and uid != current["metadata"]["uid"]:
            why = f"Precondition failed: UID in precondition: {current['metadata']['uid']}, UID in object meta: {uid}"
            raise conflict(rt, name, why)
        if subresource == "status":
            if not rt.has_status:
                raise ApiError(
                    404, "NotFound", f"the server could not find the requested resource ({rt.key}/status)"
                )
            status = new.get("status")
            new = fast_copy(current)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif subresource is not None:
            raise ApiError(
                405, "MethodNotAllowed", f"the subresource {subresource!r} of {rt.key} cannot be written"
            )
        else:
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            if rt.has_status:
                if "status" in current:
                    new["status"] = fast_copy(current["status"])
                else:
                    new.pop("status", None)
            kept = (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            )
            for field in kept + ("generation",):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
                else:
                    meta.pop(field, None)
            for hook in self._hooks if hooks else ():
                hook("UPDATE", rt, new, current)
        self._validate(rt, new)
        new_meta = new["metadata"]
        if current["metadata"].get("deletionTimestamp"):
            added = [
                f
                for f in new_meta.get("finalizers") or []
                if f not in (current["metadata"].get("finalizers") or [])
            ]
            if added:
                message = (
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
                    + "[]string{"
                    + ", ".join(f'"{f}"' for f in added)
                    + "}"
                )
                raise invalid(rt, name, [_cause("metadata.finalizers", "FieldValueForbidden", message)])
        new_meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return fast_copy(current)  # a no-op write: no new resourceVersion, no event
        if _spec_part(new) != _spec_part(current):
            new_meta["generation"] = current["metadata"].get("generation", 0) + 1
        ns = current["metadata"].get("namespace", "")
        self._index_owners(new_meta["uid"], _owner_uids(current), _owner_uids(new))
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return fast_copy(self._remove(rt, ns, new))  # the last finalizer went: the deletion completes
        self._commit(rt, ns, new, "MODIFIED", current)
        return fast_copy(new)

    def _commit(self, rt: ResourceType, ns: str, obj: dict, type_: str, prev: dict | None) -> None:
        """Store ``obj`` (which is frozen from here on), stamp it with the next version, tell watchers."""
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        self._objects.setdefault(rt.key, {}).setdefault(ns, {})[meta["name"]] = obj
        self._by_uid[meta["uid"]] = (rt.key, ns, meta["name"])
        self._publish(_Change(self._rv, rt.key, ns, type_, obj, prev))

    def _publish(self, change: _Change) -> None:
        change.committed_at = time.monotonic()
        if len(self._history) == self._history.maxlen:
            self._evicted_rv = self._history[0].rv
        self._history.append(change)
        by_ns = self._watchers.get(change.key)
        if not by_ns:
            return
        for scope in (change.namespace, None) if change.namespace else (None,):
            fanout = by_ns.get(scope)
            if fanout is None:
                continue
            for filter_ in fanout.candidates(change):
                delivery = filter_.view(change)
                if delivery is not None:
                    for subscription in fanout.by_filter[filter_]:
                        subscription.deliver(delivery)

    def _unregister(self, subscription: Subscription) -> None:
        fanout = self._watchers.get(subscription.key, {}).get(subscription.namespace)
        if fanout is not None:
            fanout.discard(subscription)

    # -- deletion and garbage collection -----------------------------------------------------------

    def _delete(self, rt: ResourceType, current: dict, policy: str | None) -> dict:
        meta = current["metadata"]
        uid = meta["uid"]
        if policy == "Orphan":
            self._orphan_dependents(uid)
        if meta.get("deletionTimestamp"):
            return current  # already terminating: deleting again changes nothing
        finalizers = list(meta.get("finalizers") or [])
        foreground = policy == "Foreground" and bool(self._dependents.get(uid))
        if foreground and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if not finalizers:
            return self._remove(rt, meta.get("namespace", ""), current)
        new = fast_copy(current)
        new["metadata"].update(
            deletionTimestamp=self.clock.timestamp(),
            deletionGracePeriodSeconds=0,
            finalizers=finalizers,
            generation=meta.get("generation", 0) + 1,
        )
        self._commit(rt, meta.get("namespace", ""), new, "MODIFIED", current)
        if foreground:
            self._collect(uid)
        return self._find(rt, new) or new

    def _find(self, rt: ResourceType, obj: dict) -> dict | None:
        meta = obj["metadata"]
        return self._objects.get(rt.key, {}).get(meta.get("namespace", ""), {}).get(meta["name"])

    def _remove(self, rt: ResourceType, ns: str, obj: dict) -> dict:
        """Take the object out of the store for good, then let the GC and namespace deletion follow."""
        meta = obj["metadata"]
        names = self._objects[rt.key][ns]
        del names[meta["name"]]
        if not names:
            del self._objects[rt.key][ns]
        uid = meta["uid"]
        self._by_uid.pop(uid, None)
        self._rv += 1
        gone = {**obj, "metadata": {**meta, "resourceVersion": str(self._rv)}}
        self._publish(_Change(self._rv, rt.key, ns, "DELETED", gone, None))
        owners = _owner_uids(obj)
        self._index_owners(uid, owners, set())
        self._collect(uid)
        self._release_foreground_owners(owners)
        if ns and ns not in self._emptying and self._namespace_terminating(ns):
            self._finish_namespace(ns)
        return gone

    def _index_owners(self, uid: str, before: set[str], after: set[str]) -> None:
        for owner in before - after:
            dependents = self._dependents.get(owner)
            if dependents is not None:
                dependents.discard(uid)
                if not dependents:
                    del self._dependents[owner]
        for owner in after - before:
            self._dependents.setdefault(owner, set()).add(uid)

    def _collect(self, owner_uid: str) -> None:
        """Garbage-collect the dependents of a removed (or foreground-deleting) owner.

        As upstream's GC: a dependent that still has another live owner only loses the dangling
        reference; one with no live owner left is deleted (honouring its own finalizers).
        """
        owner_gone = owner_uid not in self._by_uid
        for dep_uid in sorted(self._dependents.get(owner_uid, ())):
            found = self._lookup_uid(dep_uid)
            if found is None:
                continue
            rt, dep = found
            refs = dep["metadata"].get("ownerReferences") or []
            alive = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in self._by_uid]
            if alive:
                self._set_owner_refs(rt, dep, [r for r in refs if r.get("uid") != owner_uid])
            else:
                self._delete(rt, dep, None)
        if owner_gone:
            self._dependents.pop(owner_uid, None)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for dep_uid in sorted(self._dependents.get(owner_uid, ())):
            found = self._lookup_uid(dep_uid)
            if found is not None:
                rt, dep = found
                refs = dep["metadata"].get("ownerReferences") or []
                self._set_owner_refs(rt, dep, [r for r in refs if r.get("uid") != owner_uid])

    def _set_owner_refs(self, rt: ResourceType, obj: dict, refs: list[dict]) -> None:
        """The GC's own write: no admission hooks, as it only edits metadata.ownerReferences."""
        new = fast_copy(obj)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._commit(rt, obj["metadata"].get("namespace", ""), new, "MODIFIED", obj)
        self._index_owners(obj["metadata"]["uid"], _owner_uids(obj), _owner_uids(new))

    def _release_foreground_owners(self, owners: set[str]) -> None:
        """A foreground-deleting owner goes once its last dependent is gone (its finalizer is dropped)."""
        for owner_uid in owners:
            found = self._lookup_uid(owner_uid)
            if found is None or self._dependents.get(owner_uid):
                continue
            rt, owner = found
            finalizers = owner["metadata"].get("finalizers") or []
            if owner["metadata"].get("deletionTimestamp") and FOREGROUND in finalizers:
                new = fast_copy(owner)
                new["metadata"]["finalizers"] = [f for f in finalizers if f != FOREGROUND]
                self._update(rt, owner, new, None, hooks=False)  # the GC's write, not a client's

    def _delete_namespace(self, namespace: dict) -> dict:
        """Mark the namespace Terminating, delete its contents, and remove it once it is empty."""
        rt = self._type("namespaces")
        ns = namespace["metadata"]["name"]
        if not namespace["metadata"].get("deletionTimestamp"):
            new = fast_copy(namespace)
            new["metadata"]["deletionTimestamp"] = self.clock.timestamp()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["status"] = {"phase": "Terminating"}
            self._commit(rt, "", new, "MODIFIED", namespace)
            self._emptying.add(ns)
            try:
                for key, by_ns in list(self._objects.items()):
                    for name in sorted(by_ns.get(ns, {})):
                        obj = self._objects[key].get(ns, {}).get(name)
                        if obj is not None:
                            self._delete(self.registry.get(key), obj, None)
            finally:
                self._emptying.discard(ns)
            if gone := self._finish_namespace(ns):
                return gone
        return self._objects["namespaces"][""][ns]

    def _finish_namespace(self, ns: str) -> dict | None:
        """Remove a terminating namespace once nothing is left in it; returns the removed namespace."""
        if any(ns in by_ns for key, by_ns in self._objects.items() if key != "namespaces"):
            return None
        namespace = self._objects.get("namespaces", {}).get("", {}).get(ns)
        if namespace is None:
            return None
        return self._remove(self._type("namespaces"), "", namespace)
