"""A watch cache's objects kept packed (``PackedObjects``, ``Packer``): what lets a triggerer hold a large
namespace.

A trimmed RayJob with the operator's labels and its Workload (``kueue_ray.kube.essential``) take ~5.4 KiB
as Python dicts and strings, ~1.6 KiB as the JSON they were decoded from, and 40-200 bytes deflated
against the first object of their watch; a triggerer caches every RayJob and Workload of its
namespace and deployment, not only those its own tasks wait on (a task deferred later, or moved to it
when another triggerer stops, must find its objects without a read of its own; ``kueue_ray.hub``). With
three triggerers sharing 30,000 waits, each held 30,000 of each, 541-566 MiB (bench/README.md, run AC).
Packed, an object costs its bytes, and is decoded when read; the objects this process's own tasks wait
on stay decoded, since each wait holds its RayJob and Workload anyway (a decoded copy per read would double
them). Packing those too, with each wait keeping its last read packed, took ~40 MiB less at 10,000 waits
but ~50 µs more CPU per step of every wait (bench/README.md, run AF): not kept.

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
    """A ``dict`` of objects by key that stores each one packed (``Packer``), but those ``keep_decoded``
    names (what this process's tasks wait on: read on every step of their waits, and held by them anyway).

    A packed object is unpacked on each read into a new copy: a reader may change it without changing the
    cache. A decoded one is the same ``dict`` on every read, as in a plain ``dict`` cache. Keys and their
    order are a ``dict``'s; values must be JSON (what the API server sent)."""

    __slots__ = ("_objects", "_decoded", "_packer")

    def __init__(self) -> None:
        self._objects: dict[str, bytes | dict] = {}
        self._decoded: set[str] = set()
        self._packer = Packer()

    def keep_decoded(self, key: str) -> None:
        """Keep ``key``'s object (now and later versions) decoded until ``pack``."""
        self._decoded.add(key)
        packed = self._objects.get(key)
        if isinstance(packed, bytes):
            self._objects[key] = self._packer.unpack(packed)

    def pack(self, key: str) -> None:
        """Pack ``key``'s object again (nobody here waits on it any more)."""
        self._decoded.discard(key)
        obj = self._objects.get(key)
        if isinstance(obj, dict):
            self._objects[key] = self._packer.pack(obj)

    def __getitem__(self, key: str) -> dict:
        obj = self._objects[key]
        return self._packer.unpack(obj) if isinstance(obj, bytes) else obj

    def __setitem__(self, key: str, obj: dict) -> None:
        self._objects[key] = obj if key in self._decoded else self._packer.pack(obj)

    def __delitem__(self, key: str) -> None:
        del self._objects[key]

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __iter__(self) -> Iterator[str]:
        return iter(self._objects)

    def __len__(self) -> int:
        return len(self._objects)
