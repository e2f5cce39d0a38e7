"""``SharedApiClient``: one ApiClient per connection, lent to every watch loop and read that shares it,
and ``provider_connection``, the factory that opens it from the Airflow ``kubernetes`` connection.

Apart from ``kueue_ray.kube.listwatch`` because its users are wider than one loop: the hub lends a scope's
client to its watch loops and to every subscriber's one-off read (``kueue_ray.hub``), and the UI cache
to its loops and its visibility reads (``kueue_ray.ui.cache``). It imports no Kubernetes client at
module level: the ``factory`` opens the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class _OpenClient:
    client: Any
    exit_stack: contextlib.AsyncExitStack
    users: int = 0
    retired: bool = False


class SharedApiClient:
    """One ApiClient of a connection, owned here and only lent out.

    Every loop and one-off read that shares it ``lease``\\ s it, so there is one connection pool and no TLS
    setup per request. It is closed only when it is retired (credentials refused, or its user stopped)
    *and* its last lease is returned: closing a client under a running request is what turned a reconnect
    into "Session is closed" for the readers sharing it. A lease taken after retirement opens a fresh client.
    """

    def __init__(self, factory: Callable[[str], contextlib.AbstractAsyncContextManager[Any]], conn_id: str):
        self._factory = factory
        self._conn_id = conn_id
        self._current: _OpenClient | None = None
        self._opening = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Any]:
        opened = await self._open()
        opened.users += 1
        try:
            yield opened.client
        finally:
            opened.users -= 1
            if opened.retired and opened.users == 0:
                await opened.exit_stack.aclose()

    async def _open(self) -> _OpenClient:
        async with self._opening:
            if self._current is None:
                exit_stack = contextlib.AsyncExitStack()
                client = await exit_stack.enter_async_context(self._factory(self._conn_id))
                self._current = _OpenClient(client, exit_stack)
            return self._current

    def identity(self) -> str | None:
        """Who the open client authenticates as, when its token says (``kueue_ray.tokens.identity_of``)."""
        from kueue_ray.tokens import identity_of

        opened = self._current
        return identity_of(getattr(opened.client, "configuration", None)) if opened is not None else None

    async def retire(self, client: Any = None) -> None:
        """Stop lending ``client`` (the current one when None): the next lease opens a new client, and this
        one closes as soon as its last user returns it."""
        opened = self._current
        if opened is None or (client is not None and opened.client is not client):
            return
        self._current = None
        opened.retired = True
        if opened.users == 0:
            await opened.exit_stack.aclose()


@contextlib.asynccontextmanager
async def provider_connection(conn_id: str) -> AsyncIterator[Any]:
    """An ApiClient configured from the Airflow ``kubernetes`` connection, exactly as the cncf provider's
    AsyncKubernetesHook configures it (kubeconfig path/content, in-cluster, context)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

    async with AsyncKubernetesHook(conn_id=conn_id).get_conn() as api_client:
        yield api_client
