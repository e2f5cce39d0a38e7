"""What the API server said when it said no, in the words a task log needs.

The hook (sync, worker side) and the watch hub (async, triggerer) meet the same refusals: a ``Status``
body (or plain text from a proxy, or API Priority and Fairness), a ``Retry-After`` header, and a 403 whose
fix is a grant the reader can check with ``kubectl auth can-i``. Pure: it reads attributes that both
clients' ``ApiException`` have (``status``, ``reason``, ``body``, ``headers``) and imports neither.
"""

from __future__ import annotations

import json
from typing import Any


def api_error(exc: Any) -> tuple[int | None, str, str]:
    """(status, reason, message) of an ApiException, from the ``Status`` body the API server sent when there
    is one (a proxy or API Priority and Fairness may send plain text instead)."""
    status, reason, message = getattr(exc, "status", None), getattr(exc, "reason", None) or "", ""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    text = str(body).strip() if body else ""
    if text:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("kind") == "Status":
            reason = parsed.get("reason") or reason
            message = parsed.get("message") or ""
        else:
            message = text.splitlines()[0]
    return status, reason, message


def retry_after_seconds(exc: Any) -> float | None:
    """The ``Retry-After`` of an answer in seconds (the API server sends seconds, never an HTTP date)."""
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def describe_error(exc: BaseException) -> str:
    """One line for a log: ``403 Forbidden: <the API server's message>`` for an API error (not the client's
    multi-line dump of headers and body), the type and first line of anything else."""
    if hasattr(exc, "status") and hasattr(exc, "body"):
        status, reason, message = api_error(exc)
        return f"{status} {reason}: {message}" if message else f"{status} {reason}"
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def can_i(verb: str, resource: str, namespace: str) -> str:
    """The kubectl command that tells whether the connection's user may ``verb`` the resource
    (``plural.group``) in ``namespace``."""
    return f"kubectl auth can-i {verb} {resource} -n {namespace}"
