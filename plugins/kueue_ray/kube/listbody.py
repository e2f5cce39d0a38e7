"""A LIST answer's JSON, decoded one item at a time (``ListBody``).

A watch cache keeps a trimmed copy of each listed object (``kueue_ray.kube.essential``). Decoding the whole
answer first (what ``json.loads`` and the Kubernetes clients do) holds every full object at once, pod
templates and all, while the trimmed copies are made: thousands of full objects are the process's peak,
and the trimmed copies end up scattered among the freed ones, so the allocator cannot give that memory
back. Decoding one item, trimming it and dropping it before the next keeps one full object alive at a
time and the trimmed copies packed together.

Pure: text in, objects out; the list+watch loop (``kueue_ray.kube.listwatch``) does the request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


class ListBody:
    """The text of a LIST answer (``{"kind": ..., "metadata": {...}, "items": [...]}``, keys in any
    order): ``items()`` yields the items one by one; the other top-level fields are in ``fields`` once
    ``items()`` is exhausted (an API server may write ``metadata`` after ``items``)."""

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self.fields: dict[str, Any] = {}

    @property
    def resource_version(self) -> str | None:
        """The list's resourceVersion (where a watch resumes); read after ``items()``."""
        return (self.fields.get("metadata") or {}).get("resourceVersion")

    def items(self) -> Iterator[dict]:
        """Each item in order, decoded only when asked for; the text is released at the end.

        Malformed JSON (e.g. an answer cut off) raises ``json.JSONDecodeError``, as ``json.loads`` would.
        """
        text = self._text
        if text is None:
            raise RuntimeError("a ListBody's items can be read once")
        self._text = None
        pos = self._expect(text, _skip(text, 0), "{")
        if text.startswith("}", pos):
            pos += 1
        else:
            while True:
                key, pos = _DECODER.raw_decode(text, pos)
                pos = self._expect(text, pos, ":")
                if key == "items" and text.startswith("[", pos):
                    pos = _skip(text, pos + 1)
                    if text.startswith("]", pos):
                        pos += 1
                    else:
                        while True:
                            item, pos = _DECODER.raw_decode(text, pos)
                            yield item
                            del item
                            pos = _skip(text, pos)
                            if text.startswith("]", pos):
                                pos += 1
                                break
                            pos = self._expect(text, pos, ",")
                else:
                    self.fields[key], pos = _DECODER.raw_decode(text, pos)
                pos = _skip(text, pos)
                if text.startswith("}", pos):
                    pos += 1
                    break
                pos = self._expect(text, pos, ",")
        if _skip(text, pos) != len(text):
            raise json.JSONDecodeError("Extra data", text, pos)

    @staticmethod
    def _expect(text: str, pos: int, char: str) -> int:
        """The position after ``char`` (and the whitespace around it) at ``pos``."""
        pos = _skip(text, pos)
        if not text.startswith(char, pos):
            raise json.JSONDecodeError(f"Expecting {char!r}", text, pos)
        return _skip(text, pos + 1)


def _skip(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()
