"""Lists in pages (``limit`` / ``continue``), as client-go's reflectors and kubectl read them.

A list without ``limit`` makes the API server read and send every object of the kind at once: after
months, every RayJob and Workload ever run. In pages of ``PAGE_SIZE`` the server's work and each answer
stay bounded. A ``continue`` token outlives only what etcd keeps (compaction, every 5 minutes by
default); an older one is answered ``410 Gone`` (reason ``Expired``), and the list starts again from
the first page.

``list_all`` is the synchronous loop (hooks in a worker, the janitor); the triggerer's list+watch loop
(``kueue_ray.kube.listwatch``) pages its raw answers with the same ``PAGE_SIZE``, ``continue_token`` and
``is_expired``. The API server's ``Date`` of the first answer comes back with the items, the clock that
server timestamps in them are measured against (``server_time``).
"""

from __future__ import annotations

import email.utils
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

PAGE_SIZE = 500
"""Items per page: client-go's reflector and kubectl's default chunk size."""
EXPIRED_RESTARTS = 3
"""How often a list whose continue token expired (410) starts again before the error is raised."""


@dataclass
class Listing:
    """Every item of a paginated list, the list's resourceVersion and the server's time of the first page."""

    items: list[dict] = field(default_factory=list)
    resource_version: str | None = None
    server_time: datetime | None = None
    pages: int = 0


def continue_token(body: Mapping[str, Any]) -> str | None:
    """The token that fetches the next page (``metadata.continue``), None on the last page."""
    return (body.get("metadata") or {}).get("continue") or None


def _page(body: Any) -> tuple[list, str | None, str | None]:
    """(items, resourceVersion, continue token) of one page, a dict or a typed list."""
    if isinstance(body, Mapping):
        return (
            list(body.get("items") or []),
            (body.get("metadata") or {}).get("resourceVersion"),
            continue_token(body),
        )
    metadata = body.metadata
    return list(body.items or []), metadata.resource_version, metadata._continue or None


def is_expired(exc: BaseException) -> bool:
    """A 410 answered to a ``continue`` token: the snapshot it pointed into is compacted away."""
    return getattr(exc, "status", None) == 410


def server_time(headers: Mapping[str, str] | None) -> datetime | None:
    """The API server's clock from an answer's ``Date`` header (RFC 7231), or None without one.

    >>> server_time({"Date": "Fri, 04 Dec 2026 12:00:00 GMT"})
    datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.timezone.utc)
    """
    value = (headers or {}).get("Date") or (headers or {}).get("date")
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).astimezone(UTC)
    except (TypeError, ValueError):
        return None


@dataclass
class Paging:
    """Where one paged list stands (pure): the call for the next page, what an answered page adds, and
    whether a failed call starts the list again. ``list_all`` and ``list_all_async`` only make the calls."""

    kwargs: dict[str, Any]
    limit: int = PAGE_SIZE
    listing: Listing = field(default_factory=Listing)
    token: str | None = None
    done: bool = False
    restarts: int = 0

    def next_call(self) -> dict[str, Any] | None:
        """The list call's arguments for the next page (the first has no token); None once the list is read."""
        if self.done:
            return None
        return dict(self.kwargs, limit=self.limit, **({"_continue": self.token} if self.token else {}))

    def answered(self, body: Any, _status: Any, headers: Any) -> None:
        """Add one answered page (a client's ``(body, status, headers)``)."""
        if self.listing.pages == 0:
            self.listing.server_time = server_time(headers)
        self.listing.pages += 1
        items, self.listing.resource_version, self.token = _page(body)
        self.listing.items.extend(items)
        self.done = self.token is None

    def restarts_after(self, exc: BaseException) -> bool:
        """Whether the list starts again from the first page after ``exc`` (a continue token that expired,
        ``EXPIRED_RESTARTS`` times at most); False: the caller raises it."""
        if self.token is None or not is_expired(exc) or self.restarts == EXPIRED_RESTARTS:
            return False
        self.restarts += 1
        self.listing, self.token = Listing(), None
        return True


def list_all(request: Callable[..., Any], *, limit: int = PAGE_SIZE, **kwargs: Any) -> Listing:
    """Every item of a list, page by page; ``request`` is a client's ``..._with_http_info`` list method
    with its positional arguments bound (it returns ``(body, status, headers)``), ``kwargs`` its other
    arguments (e.g. ``label_selector``). The body may be a dict (CustomObjectsApi) or a typed list
    (``V1PodList``); items come back as they are in it. E.g.::

        call = partial(api.list_namespaced_custom_object_with_http_info, "ray.io", "v1", "ray", "rayjobs")
        rayjobs = list_all(call, label_selector=MANAGED_BY_SELECTOR).items
    """
    paging = Paging(kwargs, limit)
    while (call := paging.next_call()) is not None:
        try:
            paging.answered(*request(**call))
        except Exception as exc:
            if not paging.restarts_after(exc):
                raise
    return paging.listing


async def list_all_async(
    request: Callable[..., Awaitable[Any]], *, limit: int = PAGE_SIZE, **kwargs: Any
) -> Listing:
    """``list_all`` for the ``kubernetes_asyncio`` clients (the triggerer's one-off lists)."""
    paging = Paging(kwargs, limit)
    while (call := paging.next_call()) is not None:
        try:
            paging.answered(*await request(**call))
        except Exception as exc:
            if not paging.restarts_after(exc):
                raise
    return paging.listing
