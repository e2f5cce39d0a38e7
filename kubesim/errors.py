"""API errors: the exception every layer raises and the HTTP layer turns into a ``metav1.Status`` body.

Separate from the store so that modules which only refuse requests (selectors, webhooks, controllers,
the HTTP layer) need not import the store, and the store can import them.
"""

from __future__ import annotations

from kubesim.resources import ResourceType


class ApiError(Exception):
    """An API failure, carrying what becomes the ``metav1.Status`` body of the HTTP response."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        return status_body(self.code, self.reason, self.message, self.details)

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def status_body(code: int, reason: str, message: str, details: dict | None = None) -> dict:
    """The ``metav1.Status`` body of a failure, as the API server writes it (``details`` only when given).

    >>> status_body(410, "Expired", "too old resource version: 1 (5)")["reason"]
    'Expired'
    """
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def resource_name(rt: ResourceType) -> str:
    return rt.key  # "pods", "rayjobs.ray.io": how upstream names the resource in messages


def object_details(rt: ResourceType, name: str, kind: str | None = None) -> dict:
    details = {"name": name, "kind": kind or rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource_name(rt)} "{name}" not found', object_details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{resource_name(rt)} "{name}" already exists', object_details(rt, name)
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    message = f'Operation cannot be fulfilled on {resource_name(rt)} "{name}": {why}'
    return ApiError(409, "Conflict", message, object_details(rt, name))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(rt: ResourceType, name: str, causes: list[dict]) -> ApiError:
    """A 422 worded as upstream: one cause inline, several in brackets."""
    texts = [f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = object_details(rt, name, kind=rt.kind) | {"causes": causes}
    return ApiError(422, "Invalid", f'{rt.qualified_kind} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def cause(field: str, reason: str, message: str) -> dict:
    return {"reason": reason, "message": message, "field": field}
