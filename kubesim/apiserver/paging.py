"""``limit`` / ``continue`` on lists, as the kube-apiserver answers them.

* A page holds at most ``limit`` items, and at most the server's own ``max_page_size`` when one is set
  (``POST /kubesim/faults {"max_page_size": 2}``): the API server may return fewer items than asked for,
  so a client must follow ``metadata.continue`` rather than count items.
* Every page of a list reports the first page's ``resourceVersion`` (upstream serves all pages from that
  etcd snapshot; kubesim keeps no history, so later pages show the current state, which is what a client
  watching from that resourceVersion catches up with anyway).
* A continue token older than ``continue_ttl_s`` (default 300 s: etcd's compaction interval) is answered
  ``410 Gone`` with reason ``Expired`` and upstream's message and inconsistent-continue token, so a client
  that pauses between pages must be able to start its list again.
"""

from __future__ import annotations

import base64
import json
import time

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


def encode(after: tuple[str, str], resource_version: str, issued: float) -> str:
    return base64.urlsafe_b64encode(json.dumps([*after, resource_version, issued]).encode()).decode()


def decode(token: str) -> tuple[tuple[str, str], str, float]:
    try:
        namespace, name, resource_version, issued = json.loads(base64.urlsafe_b64decode(token.encode()))
        return (str(namespace), str(name)), str(resource_version), float(issued)
    except (ValueError, TypeError):
        raise ApiError(400, "BadRequest", "continue key is not valid") from None


def paginate(
    items: list[dict],
    resource_version: str,
    limit: str | None,
    token: str | None,
    *,
    max_page_size: int | None = None,
    continue_ttl_s: float = CONTINUE_TTL_S,
    now: float | None = None,
) -> tuple[list[dict], str, str, int | None]:
    """(page, the list's resourceVersion, next token or "", remainingItemCount or None).

    Without ``limit`` and ``continue`` the whole list is one answer, as upstream (``max_page_size`` caps
    only paged lists: a client that asks for everything gets everything)."""
    if not token and not limit:
        return items, resource_version, "", None
    now = time.time() if now is None else now
    items = sorted(items, key=_sort_key)
    issued = now
    if token:
        after, resource_version, issued = decode(token)
        items = [item for item in items if _sort_key(item) > after]
        if now - issued > continue_ttl_s:
            raise ContinueExpired(encode(after, resource_version, now))
    try:
        size = int(limit) if limit else 0
    except ValueError:
        raise ApiError(400, "BadRequest", f"limit: Invalid value: {limit!r}") from None
    if max_page_size and size > 0:  # limit 0 (or none) asks for everything, as upstream
        size = min(size, max_page_size)
    if size <= 0 or len(items) <= size:
        return items, resource_version, "", None
    page = items[:size]
    return page, resource_version, encode(_sort_key(page[-1]), resource_version, issued), len(items) - size


def _sort_key(item: dict) -> tuple[str, str]:
    metadata = item.get("metadata", {})
    return (metadata.get("namespace", ""), metadata.get("name", ""))
