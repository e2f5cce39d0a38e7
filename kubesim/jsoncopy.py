"""A deep copy of JSON-shaped values, shared by the store, its patches and its watches.

A stored object is never mutated after it is committed, so every reader that may change what it reads
needs its own copy; this is the one way kubesim makes it.
"""

from __future__ import annotations

import msgspec

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def fast_copy(value):
    """A deep copy of a JSON-shaped value, ~7x faster than ``copy.deepcopy`` (a C round trip)."""
    return _decoder.decode(_encoder.encode(value))
