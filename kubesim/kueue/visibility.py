"""Kueue's visibility API (``visibility.kueue.x-k8s.io/v1beta2``): pending workloads and their positions.

Upstream serves it from an aggregated API server embedded in the Kueue manager; here it is a handler
registered with the cluster. Positions are computed on demand from the queued Workloads, ordered as the
ClusterQueue's queue orders them (priority desc, then queue timestamp), 0-based; the LocalQueue view
filters the ClusterQueue list and keeps each workload's ClusterQueue position.
"""

from __future__ import annotations

from collections.abc import Callable

from kubesim.errors import ApiError
from kubesim.kueue import scheduler
from kubesim.kueue.convert import model_workload
from kubesim.kueue.queue_status import queued_by_cluster_queue
from kubesim.kueue.world import World

GROUP = "visibility.kueue.x-k8s.io"
VERSION = "v1beta2"
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100000

RESOURCES = [
    {
        "name": "clusterqueues",
        "singularName": "clusterqueue",
        "namespaced": False,
        "kind": "PendingWorkloadsSummary",
        "verbs": [],
    },
    {
        "name": "clusterqueues/pendingworkloads",
        "singularName": "",
        "namespaced": False,
        "kind": "PendingWorkloadsSummary",
        "verbs": ["get"],
    },
    {
        "name": "localqueues",
        "singularName": "localqueue",
        "namespaced": True,
        "kind": "PendingWorkloadsSummary",
        "verbs": [],
    },
    {
        "name": "localqueues/pendingworkloads",
        "singularName": "",
        "namespaced": True,
        "kind": "PendingWorkloadsSummary",
        "verbs": ["get"],
    },
]


def not_found(kind: str, name: str) -> ApiError:
    """Kueue's storage answers with the singular (``clusterqueue``, ``localqueue``), where a forbidden
    request's 403 (the API server's) names the plural resource."""
    return ApiError(
        404,
        "NotFound",
        f'{kind}.{GROUP} "{name}" not found',
        {"name": name, "group": GROUP, "kind": kind},
    )


def pending_items(world: World, cq_name: str, seq: dict[str, int]) -> list[dict]:
    """Every queued workload of ``cq_name`` as a ``PendingWorkload``, in queue order, with positions."""
    queued = {wl["metadata"]["uid"]: wl for wl in queued_by_cluster_queue(world).get(cq_name, [])}
    models = [
        model_workload(wl, cq_name, seq=seq.get(uid, int(wl["metadata"].get("resourceVersion") or 0)))
        for uid, wl in queued.items()
    ]
    items = []
    per_local_queue: dict[tuple[str, str], int] = {}
    for position, item in enumerate(scheduler.ordered(models)):
        wl = queued[item.uid]
        meta = wl["metadata"]
        local = (meta["namespace"], item.local_queue)
        items.append(
            {
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "creationTimestamp": meta.get("creationTimestamp"),
                    "ownerReferences": [
                        {k: ref[k] for k in ("apiVersion", "kind", "name", "uid") if k in ref}
                        for ref in meta.get("ownerReferences") or []
                    ],
                },
                "priority": item.priority,
                "localQueueName": item.local_queue,
                "positionInClusterQueue": position,
                "positionInLocalQueue": per_local_queue.get(local, 0),
            }
        )
        per_local_queue[local] = per_local_queue.get(local, 0) + 1
    return items


def _page(items: list[dict], query: dict) -> list[dict]:
    """``limit``/``offset`` as Kueue reads them: a ``limit`` of 0 (or none) is the default, 1000
    (``SetDefaults_PendingWorkloadOptions``); then both are clamped, never refused (``boundedLimitOffset``:
    a negative limit lists nothing, a negative offset starts at 0, a limit above 100000 is 100000)."""
    try:
        limit = int(query.get("limit", 0)) or DEFAULT_LIMIT
        offset = int(query.get("offset", 0))
    except ValueError as err:
        raise ApiError(400, "BadRequest", f"invalid limit or offset: {err}") from err
    limit = min(max(limit, 0), MAX_LIMIT)
    return items[max(offset, 0) :][:limit]


def summary(items: list[dict]) -> dict:
    return {
        "kind": "PendingWorkloadsSummary",
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {"creationTimestamp": None},
        "items": items,
    }


def make_handler(current_world: Callable[[], World], seq: dict[str, int]):
    """``handler(path, query)`` for ``cluster.register_api``; ``current_world()`` is what the controller
    knows now, ``seq`` its creation order.

    A ClusterQueue's ordered items are kept until the world changes (``current_world`` returns the same
    World until an object does): requests between two writes share one sort, as upstream's visibility
    server answers from its queue manager's in-memory heaps instead of reading the Workloads again."""
    kept: dict = {"world": None, "items": {}}

    def ordered_items(world: World, cq_name: str) -> list[dict]:
        if kept["world"] is not world:
            kept["world"], kept["items"] = world, {}
        if cq_name not in kept["items"]:
            kept["items"][cq_name] = pending_items(world, cq_name, seq)
        return kept["items"][cq_name]

    def handler(path: str, query: dict) -> dict:
        parts = [p for p in path.split("/") if p]
        world = current_world()
        if len(parts) == 3 and parts[0] == "clusterqueues" and parts[2] == "pendingworkloads":
            if parts[1] not in world.cluster_queues:
                raise not_found("clusterqueue", parts[1])
            return summary(_page(ordered_items(world, parts[1]), query))
        if (
            len(parts) == 5
            and parts[0] == "namespaces"
            and parts[2] == "localqueues"
            and parts[4] == "pendingworkloads"
        ):
            namespace, name = parts[1], parts[3]
            lq = world.local_queues.get((namespace, name))
            if lq is None:
                raise not_found("localqueue", name)
            cq_name = (lq.get("spec") or {}).get("clusterQueue", "")
            items = [
                item
                for item in ordered_items(world, cq_name)
                if item["metadata"]["namespace"] == namespace and item["localQueueName"] == name
            ]
            return summary(_page(items, query))
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    return handler
