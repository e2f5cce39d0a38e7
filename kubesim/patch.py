"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902), as the API server applies them (pure).

Both consume the document they are given; the store hands them its own copy of the stored object.
"""

from __future__ import annotations

from kubesim.errors import bad_request
from kubesim.jsoncopy import fast_copy


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch; ``target`` is consumed (mutated) and the result returned."""
    if not isinstance(patch, dict):
        return fast_copy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strip_directives(patch):
    """Drop strategic-merge directives (``$patch``, ``$retainKeys``, ``$setElementOrder/...``).

    We apply strategic merge patches as merge patches: lists are replaced rather than merged by key,
    which is what every patch this project's clients send needs.
    """
    if isinstance(patch, dict):
        return {k: strip_directives(v) for k, v in patch.items() if not k.startswith("$")}
    if isinstance(patch, list):
        return [strip_directives(v) for v in patch]
    return patch


class JsonPatchError(Exception):
    """A JSON patch that is well formed but does not apply (missing path, failed test)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}: must start with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _json_equal(a, b) -> bool:
    """JSON equality: unlike Python's, ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _list_index(container: list, token: str, path: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise JsonPatchError(f"invalid array index {token!r} in {path}")
    index = int(token)
    if index > len(container) or (index == len(container) and not for_add):
        raise JsonPatchError(f"array index {index} out of bounds in {path}")
    return index


def _resolve(doc, tokens: list[str], path: str):
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise JsonPatchError(f"doc is missing path: {path}")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_list_index(doc, token, path, for_add=False)]
        else:
            raise JsonPatchError(f"doc is missing path: {path}")
    return doc


def _add(doc, tokens: list[str], value, path: str):
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_list_index(parent, last, path, for_add=True), value)
    else:
        raise JsonPatchError(f"add operation does not apply: doc is missing path: {path}")
    return doc


def _remove(doc, tokens: list[str], path: str):
    if not tokens:
        raise JsonPatchError("remove operation does not apply: cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1], path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"remove operation does not apply: doc is missing path: {path}")
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_list_index(parent, last, path, for_add=False))
    raise JsonPatchError(f"remove operation does not apply: doc is missing path: {path}")


def json_patch(doc, operations):
    """RFC 6902 JSON patch; ``doc`` is consumed (mutated) and the result returned.

    Raises a 400 for a malformed patch and ``JsonPatchError`` for one that does not apply.
    """
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise bad_request(f"invalid json patch operation {op!r}: 'op' and 'path' are required")
        kind, path = op["op"], op["path"]
        tokens = _pointer(path)
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"invalid json patch operation {op!r}: 'value' is required")
        if kind == "add":
            doc = _add(doc, tokens, fast_copy(op["value"]), path)
        elif kind == "remove":
            _remove(doc, tokens, path)
        elif kind == "replace":
            if not tokens:
                doc = fast_copy(op["value"])
                continue
            _resolve(doc, tokens, path)  # must exist
            _remove(doc, tokens, path)
            doc = _add(doc, tokens, fast_copy(op["value"]), path)
        elif kind in ("move", "copy"):
            if "from" not in op:
                raise bad_request(f"invalid json patch operation {op!r}: 'from' is required")
            source = _pointer(op["from"])
            if kind == "move":
                if tokens[: len(source)] == source and len(tokens) > len(source):
                    raise JsonPatchError(f"move operation cannot move {op['from']} into its own child {path}")
                value = _remove(doc, source, op["from"])
            else:
                value = fast_copy(_resolve(doc, source, op["from"]))
            doc = _add(doc, tokens, value, path)
        elif kind == "test":
            if not _json_equal(_resolve(doc, tokens, path), op["value"]):
                raise JsonPatchError(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"unknown json patch operation {kind!r}")
    return doc
