"""A thin aiohttp client for the benchmark's own setup and observation traffic against kubesim.

The code under test talks through the official clients; the harness uses plain HTTP so that its own work
stays cheap and obvious (and never shares connection pools or caches with what it measures).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
RAY = "/apis/ray.io/v1"
MERGE = {"Content-Type": "application/merge-patch+json"}


class Api:
    """Setup and observation requests; ``own`` counts those kubesim's request counter also sees, so
    `foreign_requests` can tell the measured process's requests from the harness's own."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session
        self.own = 0

    def foreign_requests(self, stats: dict) -> int:
        """Requests kubesim counted that this harness did not make."""
        return stats["requests_total"] - stats["own"]

    async def create(self, path: str, body: dict) -> dict:
        self.own += not path.startswith("/kubesim/")
        async with self.session.post(self.url + path, json=body) as response:
            payload = await response.json()
            if response.status >= 300:
                raise RuntimeError(f"POST {path}: {response.status} {payload.get('message')}")
            return payload

    async def get(self, path: str, **params) -> dict:
        self.own += not path.startswith("/kubesim/")
        async with self.session.get(self.url + path, params=params) as response:
            response.raise_for_status()
            return await response.json()

    async def patch(self, path: str, body: dict) -> dict:
        self.own += 1
        async with self.session.patch(self.url + path, data=json.dumps(body), headers=MERGE) as response:
            response.raise_for_status()
            return await response.json()

    async def stats(self) -> dict:
        """kubesim's counters, with ``own``: how many of ``requests_total`` this harness made."""
        stats = await self.get("/kubesim/stats")
        stats["own"] = self.own
        return stats

    async def quiet(self, *, quiet_s: float = 2.0, timeout_s: float = 300.0) -> dict:
        """kubesim's stats once no API request and no object write happened for ``quiet_s`` seconds.

        Writes are seen through the global resourceVersion (a list of an empty selection still returns it).
        """
        last, since = None, time.monotonic()
        deadline = since + timeout_s
        while time.monotonic() < deadline:
            stats = await self.stats()
            listed = await self.get("/api/v1/namespaces", labelSelector="bench.kubesim.dev/none")
            marker = (self.foreign_requests(stats), listed["metadata"]["resourceVersion"])
            if marker != last:
                last, since = marker, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return stats
            await asyncio.sleep(0.25)
        raise TimeoutError(f"kubesim never went quiet within {timeout_s}s")


@asynccontextmanager
async def connect(url: str, *, limit: int = 32) -> AsyncIterator[Api]:
    """An ``Api`` on its own session of at most ``limit`` connections, closed on the way out."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit)) as session:
        yield Api(url, session)
