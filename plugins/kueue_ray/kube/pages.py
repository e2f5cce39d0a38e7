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


def list_all(request: Callable[..., Any], *, limit: int = PAGE_SIZE, **kwargs: Any) -> Listing:
    """Every item of a list, page by page; ``request`` is a client's ``..._with_http_info`` list method
    with its positional arguments bound (it returns ``(body, status, headers)``), ``kwargs`` its other
    arguments (e.g. ``label_selector``). The body may be a dict (CustomObjectsApi) or a typed list
    (``V1PodList``); items come back as they are in it. E.g.::

        call = partial(api.list_namespaced_custom_object_with_http_info, "ray.io", "v1", "ray", "rayjobs")
        rayjobs = list_all(call, label_selector=MANAGED_BY_SELECTOR).items
    """
    for attempt in range(EXPIRED_RESTARTS + 1):
        listing = Listing()
        token: str | None = None
        try:
            while True:
                body, _, headers = request(**_page_request(kwargs, limit, token))
                token = _add_page(listing, body, headers)
                if token is None:
                    return listing
        except Exception as exc:
            if token is None or not is_expired(exc) or attempt == EXPIRED_RESTARTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _page_request(kwargs: dict[str, Any], limit: int, token: str | None) -> dict[str, Any]:
    """The list call's arguments for the page after ``token`` (the first page without one)."""
    return dict(kwargs, limit=limit, **({"_continue": token} if token else {}))


def _add_page(listing: Listing, body: Any, headers: Any) -> str | None:
    """Add one answered page to ``listing``; the continue token of the next page, None after the last."""
    if listing.pages == 0:
        listing.server_time = server_time(headers)
    listing.pages += 1
    items, listing.resource_version, token = _page(body)
    listing.items.extend(items)
    return token


async def list_all_async(
    request: Callable[..., Awaitable[Any]], *, limit: int = PAGE_SIZE, **kwargs: Any
) -> Listing:
    """``list_all`` for the ``kubernetes_asyncio`` clients (the triggerer's one-off lists)."""
    for attempt in range(EXPIRED_RESTARTS + 1):
        listing = Listing()
        token: str | None = None
        try:
            while True:
                body, _, headers = await request(**_page_request(kwargs, limit, token))
                token = _add_page(listing, body, headers)
                if token is None:
                    return listing
        except Exception as exc:
            if token is None or not is_expired(exc) or attempt == EXPIRED_RESTARTS:
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises
