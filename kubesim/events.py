"""core/v1 Events, written the way controllers' event recorders write them.

``kubectl describe`` and Airflow's pod/job event logging read these, so they carry the same fields as
client-go's recorder output (``involvedObject``, ``source.component``, ``count``, first/last timestamps).
Like the real recorder, a repeat of the same event on the same object bumps ``count`` instead of
creating a new Event.
"""

from __future__ import annotations

import time
import weakref

from kubesim.errors import ApiError
from kubesim.store import Store

# Per store: (involved uid, type, reason, message, component) -> (namespace, event name) of the Event to bump.
_CACHE_SIZE = 4096  # client-go's event correlator keeps an LRU of this size
_recent: weakref.WeakKeyDictionary[Store, dict[tuple, tuple[str, str]]] = weakref.WeakKeyDictionary()
_last_suffix = 0


def _unique_suffix() -> str:
    """Upstream names events ``<object>.<unix nanos in hex>``; keep it strictly increasing in-process."""
    global _last_suffix
    _last_suffix = max(time.time_ns(), _last_suffix + 1)
    return f"{_last_suffix:x}"


def record_event(
    store: Store, involved: dict, type_: str, reason: str, message: str, component: str
) -> dict | None:
    """Record ``reason``/``message`` against ``involved`` (a full object dict); returns the Event.

    Returns None when the API refuses the Event (its namespace is gone or terminating): a real recorder
    drops such events rather than failing the controller that emits them.
    """
    if type_ not in ("Normal", "Warning"):
        raise ValueError(f"event type must be Normal or Warning, got {type_!r}")
    meta = involved["metadata"]
    # Events about cluster-scoped objects live in "default", as client-go's recorder puts them.
    namespace = meta.get("namespace") or "default"
    now = store.clock.timestamp()
    seen = _recent.setdefault(store, {})
    signature = (meta.get("uid"), type_, reason, message, component)
    if signature in seen:
        ns, name = seen[signature]
        try:
            existing = store.get("events", name, namespace=ns)
        except ApiError as exc:
            if exc.code != 404:
                raise
        else:
            existing["count"] = existing.get("count", 1) + 1
            existing["lastTimestamp"] = now
            seen[signature] = seen.pop(signature)  # most recently used last
            return store.update("events", existing)
    event = {
        "metadata": {"name": f"{meta['name']}.{_unique_suffix()}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion", ""),
            "kind": involved.get("kind", ""),
            "name": meta["name"],
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": component},
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": "",
    }
    try:
        created = store.create("events", event, namespace=namespace)
    except ApiError as exc:
        if exc.code in (403, 404):
            return None
        raise
    if len(seen) >= _CACHE_SIZE:
        del seen[next(iter(seen))]
    seen[signature] = (namespace, created["metadata"]["name"])
    return created
