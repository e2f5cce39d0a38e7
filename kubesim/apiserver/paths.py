"""Kubernetes REST paths, parsed into what a request is about and which RBAC verb it uses.

One parser serves both routing and the request log, so the log names exactly the (verb, group, resource,
subresource) a Role would need to grant. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

# Subresources of a Namespace object; any other third segment after /namespaces/<ns>/ is a resource.
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}


@dataclass(frozen=True)
class Target:
    """A path under /api/v1 or /apis/<group>/<version>.

    ``plural`` is empty for the group-version discovery document itself; ``rest`` is the path after the
    group-version, which aggregated APIs receive verbatim.
    """

    group: str
    version: str
    plural: str = ""
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    legacy_watch: bool = False
    rest: str = ""

    @property
    def key(self) -> str:
        """The store's name for the resource: ``pods``, ``rayjobs.ray.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def parse_target(path: str) -> Target | None:
    """Parse /api/v1/... or /apis/<g>/<v>/...; None for any other path (discovery roots, /version...)."""
    segments = [s for s in path.split("/") if s]
    if len(segments) >= 2 and segments[0] == "api":
        group, version, rest = "", segments[1], segments[2:]
    elif len(segments) >= 3 and segments[0] == "apis":
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    rest_path = "/".join(rest)
    legacy_watch = bool(rest) and rest[0] == "watch"
    if legacy_watch:
        rest = rest[1:]
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in _NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = "/".join(rest[2:])
    return Target(group, version, plural, namespace, name, subresource, legacy_watch, rest_path)


def is_true(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def rbac_verb(method: str, target: Target, query: dict) -> str:
    """The verb RBAC checks for this request (a GET may be get, list or watch)."""
    if method in ("GET", "HEAD"):
        if target.name:
            return "watch" if target.legacy_watch else "get"
        return "watch" if target.legacy_watch or is_true(query.get("watch")) else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    return method.lower()
