"""Watch fan-out: the history ring of committed writes and the subscriptions that see them.

The store commits a write, then hands it to ``Watches.publish``; everything a watch needs after that
(replay from a resourceVersion, selector transitions, one shared encoding per write) lives here, so the
store's own code is only about objects.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from kubesim.errors import ApiError, bad_request
from kubesim.jsoncopy import fast_copy
from kubesim.selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector

_encoder = msgspec.json.Encoder()


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

    def __init__(self, type_: str, obj: dict, change: Change) -> None:
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
class Change:
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
    # event to and when it last did (``kubesim.apiserver.watch_stream.FanoutTimes``).
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
class Filter:
    """A watch's selectors. Watches with equal filters share one evaluation per change."""

    labels: LabelSelector
    fields: FieldSelector

    def passes(self, obj: dict) -> bool:
        return self.labels.matches(obj["metadata"].get("labels")) and self.fields.matches(obj)

    def view(self, change: Change) -> Delivery | None:
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


class Fanout:
    """The subscriptions of one kind in one namespace scope, grouped by filter.

    Filters with an equality requirement (``team=a``, ``shard in (1,2)``) are indexed by it, so a write
    evaluates only the filters its labels (before or after) could satisfy: 1,000 informers each
    selecting their own label value cost a write two lookups, not 1,000 selector evaluations.
    """

    def __init__(self) -> None:
        self.by_filter: dict[Filter, set[Subscription]] = {}
        self._unanchored: set[Filter] = set()
        self._anchored: dict[str, dict[str, set[Filter]]] = {}  # label key -> value -> filters

    @staticmethod
    def _anchor(filter_: Filter):
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

    def candidates(self, change: Change):
        """The filters that may see ``change`` (a superset: each still decides with ``view``)."""
        if not self._anchored:
            return self.by_filter
        found = list(self._unanchored)
        seen: set[Filter] = set()
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
        watches: Watches,
        key: str,
        namespace: str | None,
        filter_: Filter,
        deliver: Callable[[Delivery], None],
    ) -> None:
        self._watches = watches
        self.key = key
        self.namespace = namespace
        self.filter = filter_
        self.deliver = deliver
        self.closed = False

    def _offer(self, change: Change) -> None:
        if (delivery := self.filter.view(change)) is not None:
            self.deliver(delivery)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._watches.unregister(self)


class Watcher(Subscription):
    """An async iterator of ``WatchEvent`` for one watch; events wait in its own unbounded queue.

    The store only ever ``put_nowait``s into the queue, so a slow consumer never slows a write.
    """

    def __init__(
        self, watches: Watches, key: str, namespace: str | None, filter_: Filter, copy_objects: bool
    ) -> None:
        self._queue: asyncio.Queue = asyncio.Queue()
        super().__init__(watches, key, namespace, filter_, self._queue.put_nowait)
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
        # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that arrives as
        # the item does, and the watch stream serving this subscription then outlives its client.
        try:
            async with asyncio.timeout(timeout):
                item = await self._queue.get()
        except TimeoutError:
            return None
        return None if item is _CLOSED else self._event(item)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._queue.put_nowait(_CLOSED)  # wake a consumer blocked in get()


S = TypeVar("S", bound=Subscription)


def selector_filter(label_selector: str | None, field_selector: str | None) -> Filter:
    return Filter(parse_label_selector(label_selector), parse_field_selector(field_selector))


class Watches:
    """Every open watch of one store, by kind and namespace scope, and the history they resume from."""

    def __init__(self, history: int) -> None:
        self._history: deque[Change] = deque(maxlen=history)
        self._evicted_rv = 0  # newest resourceVersion that fell out of the history
        # key -> namespace (None: all) -> fan-out: a write touches only its kind's watchers and
        # evaluates each distinct filter it could match once.
        self._watchers: dict[str, dict[str | None, Fanout]] = {}

    def register(self, subscription: S, resource_version: str | None, rv: int, current: Iterable[dict]) -> S:
        """Replay what the watch starts with (``current``, the objects it selects, at version ``rv``, or
        history after a version), then add it to the fan-out: nothing can be written in between, as the
        store never awaits."""
        key, ns = subscription.key, subscription.namespace
        if resource_version in (None, "", "0"):
            for obj in current:
                subscription._offer(Change(rv, key, ns or "", "ADDED", obj, None))
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
        self._watchers.setdefault(key, {}).setdefault(ns, Fanout()).add(subscription)
        return subscription

    def _changes_since(self, since: int) -> list[Change]:
        newer = []
        for change in reversed(self._history):
            if change.rv <= since:
                break
            newer.append(change)
        newer.reverse()
        return newer

    def publish(self, change: Change) -> None:
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

    def unregister(self, subscription: Subscription) -> None:
        fanout = self._watchers.get(subscription.key, {}).get(subscription.namespace)
        if fanout is not None:
            fanout.discard(subscription)
