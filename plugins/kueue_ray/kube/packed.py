"""A watch cache's objects kept as compact JSON (``PackedObjects``): what lets a triggerer hold a large
namespace.

A trimmed RayJob with the operator's labels and its Workload (``kueue_ray.kube.essential``) take ~5.4 KiB
as Python dicts and strings, and ~1.6 KiB as the JSON they were decoded from; a triggerer caches every
RayJob and Workload of its namespace and deployment, not only those its own tasks wait on (a task
deferred later, or moved to it when another triggerer stops, must find its objects without a read of its
own; ``kueue_ray.hub``). With three triggerers sharing 30,000 waits, each held 30,000 of each, 541-566 MiB
(bench/README.md, run AC). Packed, an object costs its bytes, and is decoded when read; the waits, too,
hold what they acted on packed between steps (``kueue_ray.wait_step.Held``), so nothing of a namespace
stays decoded while it waits.

Apart from the watch loop because the UI's caches keep plain dicts (they read every object on each page).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


class PackedObjects(MutableMapping[str, dict]):
    """A ``dict`` of objects by key that stores each one as compact JSON bytes.

    Each read decodes a new copy: a reader may change it without changing the cache. Keys and their order
    are a ``dict``'s; values must be JSON (what the API server sent)."""

    __slots__ = ("_objects",)

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}

    def __getitem__(self, key: str) -> dict:
        return json.loads(self._objects[key])

    def __setitem__(self, key: str, obj: dict) -> None:
        self._objects[key] = _compact(obj).encode()

    def __delitem__(self, key: str) -> None:
        del self._objects[key]

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)
