"""What a bearer token says about itself: whose it is and until when it is valid.

A ServiceAccount token (``kubectl create token``, a projected token in a pod) is a JWT whose ``sub`` is the
user the API server authorizes (``system:serviceaccount:<namespace>:<name>``) and whose ``exp`` is when it
stops working. The payload is read without checking the signature: it only names the identity in an error
message and warns before the token expires; the API server alone decides whether it is valid.

Pure and standard-library only, so the kubeconfig check (run before Airflow is configured) and the watch
hub share it.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

EXPIRY_WARNING = timedelta(days=1)
"""A token that expires sooner than this is worth a warning: the tasks of tomorrow will be refused."""


def claims(token: str | None) -> dict[str, Any] | None:
    """The JWT payload of ``token`` (with or without a ``Bearer`` prefix); None for a token that is no JWT.

    >>> claims(encode({"sub": "system:serviceaccount:ray:airflow"}))["sub"]
    'system:serviceaccount:ray:airflow'
    >>> claims("a3f9c0d1") is None
    True
    """
    if not token:
        return None
    parts = token.removeprefix("Bearer ").strip().split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def subject(token: str | None) -> str | None:
    """Who the API server sees behind ``token`` (its ``sub``); None when the token does not say."""
    sub = (claims(token) or {}).get("sub")
    return sub if isinstance(sub, str) and sub else None


def expiry(token: str | None) -> datetime | None:
    """When ``token`` stops working (its ``exp``); None for a token without one."""
    exp = (claims(token) or {}).get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return datetime.fromtimestamp(exp, UTC)


def lifetime_problem(token: str | None, now: datetime) -> tuple[str, str] | None:
    """("expired" | "expiring", words) when ``token`` has expired or expires within ``EXPIRY_WARNING``;
    None when it is valid longer, or does not say until when.

    >>> now = datetime(2026, 12, 4, tzinfo=UTC)
    >>> lifetime_problem(encode({"exp": now.timestamp() - 60}), now)[0]
    'expired'
    >>> lifetime_problem(encode({"exp": now.timestamp() + 3600}), now)
    ('expiring', 'expires in 1h 0m (2026-12-04T01:00:00Z)')
    >>> lifetime_problem(encode({"exp": now.timestamp() + 3 * 86400}), now) is None
    True
    """
    until = expiry(token)
    if until is None:
        return None
    stamp = until.strftime("%Y-%m-%dT%H:%M:%SZ")
    left = until - now
    if left <= timedelta(0):
        return "expired", f"expired {_duration(-left)} ago ({stamp})"
    if left < EXPIRY_WARNING:
        return "expiring", f"expires in {_duration(left)} ({stamp})"
    return None


def _duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}h {minutes % 60}m" if minutes >= 60 else f"{minutes}m"


def encode(payload: dict[str, Any]) -> str:
    """An unsigned JWT carrying ``payload`` (for tests and kubesim's tokens: the signature is never read
    here)."""

    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(payload)}.sig"


def identity_of(configuration: Any) -> str | None:
    """The user an ApiClient's ``configuration`` authenticates as, when its bearer token names it (the
    ``sub`` of a ServiceAccount token); None otherwise (client certificates, opaque tokens)."""
    keys = getattr(configuration, "api_key", None) or {}
    for key in ("BearerToken", "authorization"):
        found = subject(keys.get(key))
        if found:
            return found
    return None
