"""Who is asking, and which DAGs they may read: Airflow's own auth manager, nothing of ours.

Every page, script and API call of the Kueue UI requires an authenticated Airflow user, recognised
exactly as Airflow's REST API recognises one (``get_user``: the ``Authorization: Bearer`` JWT, else the
UI's ``_token`` cookie, which is what the browser sends from inside Airflow's iframe). What a user may see
of a RayJob follows what they may read of its DAG (``GET`` on the DAG in the configured auth manager:
roles and teams in the simple auth manager, DAG-level permissions in FAB, ...).

The set of readable DAGs is one database query per user; it is kept a few seconds per user so that
twenty open tabs refreshing together cost one query, and a revoked permission takes effect within
``READABLE_TTL_SECONDS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

READABLE_TTL_SECONDS = 5.0


@dataclass(frozen=True)
class Access:
    """What one user may read. ``dag_ids`` None means every DAG (never produced by an auth manager
    here; tests and tools use it)."""

    user_name: str
    dag_ids: frozenset[str] | None

    def can_read(self, dag_id: str | None) -> bool:
        if dag_id is None:
            return False
        return self.dag_ids is None or dag_id in self.dag_ids


class ReadableDags:
    """``get_authorized_dag_ids`` of the auth manager, cached briefly per user."""

    def __init__(self, ttl: float = READABLE_TTL_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}

    def for_user(self, user) -> Access:
        """Blocking (a database query): call from a worker thread."""
        from airflow.api_fastapi.app import get_auth_manager

        key = (type(user).__name__, str(user.get_id()))
        now = self.clock()
        cached = self._cache.get(key)
        if cached is None or now - cached[0] >= self.ttl:
            dag_ids = frozenset(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))
            cached = self._cache[key] = (now, dag_ids)
            if len(self._cache) > 1000:
                self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.ttl}
        return Access(user_name=user.get_name(), dag_ids=cached[1])
