"""The pods of a Ray cluster that is starting, read on demand for the Kueue tab and shared by its viewers.

The cache watches no pods: a namespace's pods are many and change often, while the tab needs them only
for a RayJob between Kueue's admission and its Ray job running, the moment KubeRay and Kueue say no more
than "starting" and the pods say why (``kueue_ray.pod_states``). So the tab's API asks here for the pods of
that one RayCluster (KubeRay's ``ray.io/cluster`` label), through the cache's shared client; a read is
reused for ``min_interval`` seconds by every viewer, so open tabs cost at most one list per starting
cluster per interval. The tab shows them as of its last full answer (at least every 30 s; sooner when
the RayJob or its Workload changes). A failed read keeps the last answer; none is None (nothing shown).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

from kueue_ray.pod_states import CLUSTER_LABEL
from kueue_ray.ui.cache import ClusterCache

MAX_CLUSTERS = 200
"""Starting clusters whose last read is kept, oldest dropped first."""


class PodReads:
    def __init__(self, cache: ClusterCache, min_interval: float = 2.0) -> None:
        self.cache = cache
        self.min_interval = min_interval
        self._reads: OrderedDict[tuple[str, str], tuple[float, list[dict] | None]] = OrderedDict()
        self._in_flight: dict[tuple[str, str], asyncio.Future] = {}

    async def pods(self, namespace: str, ray_cluster: str) -> list[dict] | None:
        key = (namespace, ray_cluster)
        read_at, pods = self._reads.get(key, (0.0, None))
        if time.monotonic() - read_at < self.min_interval:
            return pods
        if key not in self._in_flight:
            self._in_flight[key] = asyncio.ensure_future(self._read(key, pods))
        return await asyncio.shield(self._in_flight[key])

    async def _read(self, key: tuple[str, str], last: list[dict] | None) -> list[dict] | None:
        namespace, ray_cluster = key
        try:
            async with self.cache.client.lease() as api_client:
                listing = await api_client.call_api(
                    f"/api/v1/namespaces/{namespace}/pods",
                    "GET",
                    query_params=[("labelSelector", f"{CLUSTER_LABEL}={ray_cluster}")],
                    response_types_map={200: "object"},
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _request_timeout=30,
                )
            pods = list((listing or {}).get("items") or ())
        except Exception:  # noqa: BLE001 - the tab keeps what it last knew
            pods = last
        finally:
            self._in_flight.pop(key, None)
        self._reads[key] = (time.monotonic(), pods)
        self._reads.move_to_end(key)
        while len(self._reads) > MAX_CLUSTERS:
            self._reads.popitem(last=False)
        return pods
