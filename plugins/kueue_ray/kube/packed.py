"""A watch cache's objects kept packed (``PackedObjects``, ``Packer``): what lets a triggerer hold a large
namespace.

A trimmed RayJob with the operator's labels and its Workload (``kueue_ray.kube.essential``) take ~5.4 KiB
as Python dicts and strings, ~1.6 KiB as the JSON they were decoded from, and a few hundred bytes
deflated against the first object of their watch; a triggerer caches every RayJob and Workload of its
namespace and deployment, not only those its own tasks wait on (a task deferred later, or moved to it
when another triggerer stops, must find its objects without a read of its own; ``kueue_ray.hub``). With
three triggerers sharing 30,000 waits, each held 30,000 of each, 541-566 MiB (bench/README.md, run AC).
Packed, an object costs its bytes, and is decoded when read; the waits, too, hold what they acted on
packed between steps (``kueue_ray.wait_step.Held``), so nothing of a namespace stays decoded while it
waits.

Apart from the watch loop because the UI's caches keep plain dicts (they read every object on each page).
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Iterator, MutableMapping
from typing import Any

_RAW = -15
"""zlib's window bits for raw deflate: no header or checksum (6 bytes a value)."""
_CHOOSING = threading.Lock()
"""Held while a ``Packer`` takes its first value as its dictionary."""
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode


class Packer:
    """Packs JSON values as compact JSON deflated against the first value it packed (zlib's preset
    dictionary), and unpacks them as new copies.

    The values one packer sees are alike (the RayJobs of one watch carry the same operator's labels, the
    same queue, Kueue's same messages), so each packed value keeps little more than what is its own
    (names, uids, times): a RayJob with the operator's labels or its Workload, ~800 bytes of JSON, takes
    40-200."""

    __slots__ = ("_dictionary",)

    def __init__(self) -> None:
        self._dictionary: bytes | None = None
        """The first value packed, as JSON: what every value is deflated against."""

    def pack(self, value: Any) -> bytes:
        text = _compact(value).encode()
        dictionary = self._dictionary
        if dictionary is None:
            with _CHOOSING:  # two threads packing their first values must deflate against the same one
                if self._dictionary is None:
                    self._dictionary = text
                dictionary = self._dictionary
        deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, _RAW, zdict=dictionary)
        return deflate.compress(text) + deflate.flush()

    def unpack(self, packed: bytes) -> Any:
        return json.loads(zlib.decompressobj(_RAW, zdict=self._dictionary or b"").decompress(packed))


class PackedObjects(MutableMapping[str, dict]):
    """A ``dict`` of objects by key that stores each one packed (``Packer``).

    Each read unpacks a new copy: a reader may change it without changing the cache. Keys and their order
    are a ``dict``'s; values must be JSON (what the API server sent)."""

    __slots__ = ("_objects", "_packer")

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}
        self._packer = Packer()

    def __getitem__(self, key: str) -> dict:
        return self._packer.unpack(self._objects[key])

    def __setitem__(self, key: str, obj: dict) -> None:
        self._objects[key] = self._packer.pack(obj)

    def __delitem__(self, key: str) -> None:
        del self._objects[key]

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)
