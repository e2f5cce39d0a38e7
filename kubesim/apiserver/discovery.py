"""Discovery documents: /version, /api, /apis, APIResourceLists and a minimal OpenAPI.

Clients find kinds, scopes, verbs and short names here before their first real call (`kubectl get rj`
resolves `rj` through discovery). Built from the registry plus aggregated APIs; pure functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubesim.resources import ResourceType

if TYPE_CHECKING:
    from kubesim.cluster import AggregatedApi

KUBERNETES_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0+kubesim"}

OBJECT_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "log": ["get"]}


def version_info() -> dict:
    return {
        **KUBERNETES_VERSION,
        "gitCommit": "kubesim",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def core_versions() -> dict:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
    }


def _group_versions(types: list[ResourceType], aggregated: list[AggregatedApi]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for rt in types:
        if rt.group and rt.version not in groups.setdefault(rt.group, []):
            groups[rt.group].append(rt.version)
    for api in aggregated:
        if api.version not in groups.setdefault(api.group, []):
            groups[api.group].append(api.version)
    return groups


def _group_document(name: str, versions: list[str]) -> dict:
    entries = [{"groupVersion": f"{name}/{version}", "version": version} for version in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list(types: list[ResourceType], aggregated: list[AggregatedApi]) -> dict:
    groups = _group_versions(types, aggregated)
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group_document(name, versions) for name, versions in sorted(groups.items())],
    }


def group(name: str, types: list[ResourceType], aggregated: list[AggregatedApi]) -> dict | None:
    versions = _group_versions(types, aggregated).get(name)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_document(name, versions)}


def api_resource(rt: ResourceType) -> dict:
    entry = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": OBJECT_VERBS,
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def subresource_entries(rt: ResourceType) -> list[dict]:
    return [
        {
            "name": f"{rt.plural}/{sub}",
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": SUBRESOURCE_VERBS.get(sub, ["get"]),
        }
        for sub in sorted(rt.subresources)
    ]


def resource_list(
    group_name: str, version: str, types: list[ResourceType], aggregated: list[AggregatedApi]
) -> dict | None:
    served = [rt for rt in types if rt.group == group_name and rt.version == version]
    extra = [api for api in aggregated if api.group == group_name and api.version == version]
    if not served and not extra:
        return None
    resources: list[dict] = []
    for rt in sorted(served, key=lambda t: t.plural):
        resources.append(api_resource(rt))
        resources.extend(subresource_entries(rt))
    for api in extra:
        resources.extend(api.resources)
    group_version = f"{group_name}/{version}" if group_name else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def openapi_v3_root(types: list[ResourceType]) -> dict:
    """The OpenAPI v3 index: one document per served group-version.

    kubectl only reads it to learn that the server validates fields itself (the ``fieldValidation``
    parameter on PATCH); it then skips client-side validation, which would need full schemas.
    """
    paths = {}
    for group_name, version in sorted({(rt.group, rt.version) for rt in types}):
        prefix = _gv_prefix(group_name, version)
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash=kubesim"}
    return {"paths": paths}


def _gv_prefix(group_name: str, version: str) -> str:
    return f"apis/{group_name}/{version}" if group_name else f"api/{version}"


def openapi_v3_group_version(group_name: str, version: str, types: list[ResourceType]) -> dict | None:
    served = [rt for rt in types if rt.group == group_name and rt.version == version]
    if not served:
        return None
    paths = {}
    for rt in served:
        scope = "namespaces/{namespace}/" if rt.namespaced else ""
        path = f"/{_gv_prefix(group_name, version)}/{scope}{rt.plural}/{{name}}"
        paths[path] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {
                    "group": rt.group,
                    "version": rt.version,
                    "kind": rt.kind,
                },
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                    for name in ("dryRun", "fieldManager", "fieldValidation", "force")
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": {}},
    }
