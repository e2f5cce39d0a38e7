"""``limit`` / ``continue`` on lists, as the kube-apiserver answers them.

* A page holds at most ``limit`` items, and at most the server's own ``max_page_size`` when one is set
  (``POST /kubesim/faults {"max_page_size": 2}``): the API server may return fewer items than asked for,
  so a client must follow ``metadata.continue`` rather than count items.
* Every page of a list shows the objects as they were when its first page was read, and that page's
  ``resourceVersion``: upstream serves all pages from that etcd revision. kubesim keeps the first page's
  sorted list (``Snapshots``; a stored object is never mutated, so the list of references is the
  snapshot) until its tokens expire; a list whose snapshot was dropped to make room continues over the
  current objects, as an inconsistent continuation does upstream.
* A continue token older than ``continue_ttl_s`` (default 300 s: etcd's compaction interval) is answered
  ``410 Gone`` with reason ``Expired`` and upstream's message and inconsistent-continue token, so a client
  that pauses between pages must be able to start its list again.
"""

from __future__ import annotations

import base64
import json
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from kubesim.errors import ApiError

CONTINUE_TTL_S = 300.0
"""etcd's default compaction interval in the kube-apiserver (``--etcd-compaction-interval=5m``)."""
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - "
    "objects that were created, modified, or deleted between the time the first chunk was returned and "
    "now may show up in the list."
)


class ContinueExpired(ApiError):
    """410 Expired, carrying the token with which the rest of the (inconsistent) list can still be read."""

    def __init__(self, inconsistent_continue: str) -> None:
        super().__init__(410, "Expired", EXPIRED_MESSAGE)
        self.inconsistent_continue = inconsistent_continue

    def status(self) -> dict:
        body = super().status()
        body["metadata"] = {"continue": self.inconsistent_continue}
        return body


@dataclass(frozen=True)
class Token:
    after: tuple[str, str]
    """(namespace, name) of the last item served."""
    resource_version: str
    issued: float
    """When the list's first page was read."""
    snapshot: int = 0
    """The ``Snapshots`` entry the list continues over; 0 for the current objects."""

    def encode(self) -> str:
        fields = [*self.after, self.resource_version, self.issued, self.snapshot]
        return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()

    @classmethod
    def decode(cls, token: str) -> Token:
        try:
            namespace, name, resource_version, issued, snapshot = json.loads(
                base64.urlsafe_b64decode(token.encode())
            )
            return cls((str(namespace), str(name)), str(resource_version), float(issued), int(snapshot))
        except (ValueError, TypeError):
            raise ApiError(400, "BadRequest", "continue key is not valid") from None


class Snapshots:
    """The sorted items of each list being paged, by number, for its continue tokens: dropped once their
    tokens expire, and the oldest first beyond ``capacity``."""

    def __init__(self, capacity: int = 64) -> None:
        self._kept: OrderedDict[int, list[dict]] = OrderedDict()
        self._issued: dict[int, float] = {}
        self._next = 1
        self.capacity = capacity

    def keep(self, items: list[dict], issued: float, ttl_s: float) -> int:
        while self._kept and (
            len(self._kept) >= self.capacity or issued - self._issued[next(iter(self._kept))] > ttl_s
        ):
            oldest, _ = self._kept.popitem(last=False)
            del self._issued[oldest]
        number, self._next = self._next, self._next + 1
        self._kept[number], self._issued[number] = items, issued
        return number

    def get(self, number: int) -> list[dict] | None:
        return self._kept.get(number)


def paginate(
    read: Callable[[], tuple[list[dict], str]],
    limit: str | None,
    token: str | None,
    snapshots: Snapshots,
    *,
    max_page_size: int | None = None,
    continue_ttl_s: float = CONTINUE_TTL_S,
    now: float | None = None,
) -> tuple[list[dict], str, str, int | None]:
    """(page, the list's resourceVersion, next token or "", remainingItemCount or None); ``read()`` lists
    the current objects and the store's resourceVersion, called unless the list continues a snapshot.

    Without ``limit`` and ``continue`` the whole list is one answer, as upstream (``max_page_size`` caps
    only paged lists: a client that asks for everything gets everything)."""
    if not token and not limit:
        return (*read(), "", None)
    now = time.time() if now is None else now
    try:
        size = int(limit) if limit else 0
    except ValueError:
        raise ApiError(400, "BadRequest", f"limit: Invalid value: {limit!r}") from None
    if max_page_size and size > 0:  # limit 0 (or none) asks for everything, as upstream
        size = min(size, max_page_size)
    if token:
        at = Token.decode(token)
        if now - at.issued > continue_ttl_s:
            raise ContinueExpired(Token(at.after, at.resource_version, now).encode())
        kept = snapshots.get(at.snapshot) if at.snapshot else None
        items = kept if kept is not None else sorted(read()[0], key=_sort_key)
        resource_version, issued = at.resource_version, at.issued
        snapshot = at.snapshot if kept is not None else 0
        start = bisect_right(items, at.after, key=_sort_key)
    else:
        items, resource_version = read()
        items, issued, snapshot, start = sorted(items, key=_sort_key), now, 0, 0
    end = start + size if size > 0 else len(items)
    if end >= len(items):
        return items[start:], resource_version, "", None
    if not token:
        snapshot = snapshots.keep(items, issued, continue_ttl_s)
    page = items[start:end]
    following = Token(_sort_key(page[-1]), resource_version, issued, snapshot)
    return page, resource_version, following.encode(), len(items) - end


def _sort_key(item: dict) -> tuple[str, str]:
    metadata = item.get("metadata", {})
    return (metadata.get("namespace", ""), metadata.get("name", ""))
