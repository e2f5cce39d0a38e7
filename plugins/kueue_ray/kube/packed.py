"""A watch cache's objects kept as compact JSON (``PackedObjects``): what lets a triggerer hold a large
namespace.

A trimmed RayJob and its Workload (``kueue_ray.kube.essential``) take about 9 KiB as Python dicts and
strings, and 1.5 KiB as the JSON they were decoded from; a triggerer caches every RayJob and Workload of
its namespace and deployment, not only those its own tasks wait on (a task deferred later, or moved to it
when another triggerer stops, must find its objects without a read of its own; ``kueue_ray.hub``). With
three triggerers sharing 30,000 waits, each held 30,000 of each, 541-566 MiB (bench/README.md, run AC).
Packed, an object costs its bytes, and is decoded when read (once per watch event, the version it
replaces); the objects this process's own tasks wait on stay decoded, since each wait holds its RayJob and
Workload anyway (a decoded copy per read would double them).

Apart from the watch loop because the UI's caches keep plain dicts (they read every object on each page).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, MutableMapping

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


class PackedObjects(MutableMapping[str, dict]):
    """A ``dict`` of objects by key that stores each one as compact JSON bytes, but those ``keep_decoded``
    names (what this process's tasks wait on: read on every step of their waits, and held by them anyway).

    A packed object is decoded on each read into a new copy: a reader may change it without changing the
    cache. A decoded one is the same ``dict`` on every read, as in a plain ``dict`` cache. Keys and their
    order are a ``dict``'s; values must be JSON (what the API server sent)."""

    __slots__ = ("_objects", "_decoded")

    def __init__(self) -> None:
        self._objects: dict[str, bytes | dict] = {}
        self._decoded: set[str] = set()

    def keep_decoded(self, key: str) -> None:
        """Keep ``key``'s object (now and later versions) decoded until ``pack``."""
        self._decoded.add(key)
        packed = self._objects.get(key)
        if isinstance(packed, bytes):
            self._objects[key] = json.loads(packed)

    def pack(self, key: str) -> None:
        """Pack ``key``'s object again (nobody here waits on it any more)."""
        self._decoded.discard(key)
        obj = self._objects.get(key)
        if isinstance(obj, dict):
            self._objects[key] = _compact(obj).encode()

    def __getitem__(self, key: str) -> dict:
        obj = self._objects[key]
        return json.loads(obj) if isinstance(obj, bytes) else obj

    def __setitem__(self, key: str, obj: dict) -> None:
        self._objects[key] = obj if key in self._decoded else _compact(obj).encode()

    def __delitem__(self, key: str) -> None:
        del self._objects[key]

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)
