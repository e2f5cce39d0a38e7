"""The Kubernetes REST API itself: discovery, CRUD with the status subresource, lists, watches, pod logs.

Maps HTTP onto the cluster's store; the decisions (path parsing, verbs, tables, discovery documents)
live in ``paths``, ``table`` and ``discovery``, the long-lived responses in ``watch_stream``.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from kubesim.apiserver import discovery, watch_stream
from kubesim.apiserver.http import (
    CLUSTER,
    FAULTS,
    SNAPSHOTS,
    STATS,
    STREAMS,
    error_response,
    json_response,
    not_found,
)
from kubesim.apiserver.paging import paginate
from kubesim.apiserver.paths import Target, parse_target, rbac_verb
from kubesim.apiserver.table import build_table, wants_table
from kubesim.cluster import AggregatedApi
from kubesim.errors import ApiError, status_body
from kubesim.jsoncopy import fast_copy
from kubesim.resources import ResourceType

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
JSON = "application/json"
_BUILTIN_GROUPS = {"", "batch", "apps", "policy", "autoscaling"}
CUSTOM_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")
"""What the API server accepts for a custom resource: CRDs have no strategic-merge-patch schema."""


async def dispatch(request: web.Request) -> web.StreamResponse:
    cluster = request.app[CLUSTER]
    path = request.path.rstrip("/") or "/"
    if request.method not in ("GET", "HEAD") and not path.startswith(("/api/", "/apis/")):
        return not_found()
    faults = request.app[FAULTS]
    types = [rt for rt in cluster.registry.all() if faults.serves(rt.group)]
    aggregated = [api for api in cluster.aggregated_apis.values() if faults.serves(api.group)]
    if path == "/api":
        return json_response(discovery.core_versions())
    if path == "/apis":
        return json_response(discovery.group_list(types, aggregated))
    segments = path.strip("/").split("/")
    if len(segments) == 2 and segments[0] == "apis":
        document = discovery.group(segments[1], types, aggregated)
        return json_response(document) if document else not_found()
    target = parse_target(path)
    if target is None:
        return not_found()
    api = cluster.aggregated_apis.get((target.group, target.version))
    if api is not None and target.plural:
        return await _serve_aggregated(request, api, target)
    if not target.plural:
        document = discovery.resource_list(target.group, target.version, types, aggregated)
        return json_response(document) if document else not_found()
    rt = cluster.registry.get(target.key)
    if rt is None or rt.version != target.version:
        return not_found()
    try:
        return await _serve_resource(request, cluster, rt, target)
    except ApiError as error:
        return error_response(error)


async def _serve_aggregated(request: web.Request, api: AggregatedApi, target: Target) -> web.Response:
    if request.method != "GET":
        return json_response(
            status_body(405, "MethodNotAllowed", "the server does not allow this method"), 405
        )
    try:
        result = api.handler(target.rest, dict(request.query))
        if asyncio.iscoroutine(result):
            result = await result
    except ApiError as error:
        return error_response(error)
    return json_response(result)


def _check_scope(rt: ResourceType, target: Target, method: str) -> None:
    if target.namespace and not rt.namespaced:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if rt.namespaced and not target.namespace and (target.name or method == "POST"):
        if method == "POST":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if target.subresource and target.subresource not in rt.subresources:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if target.subresource and not target.name:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    if method in ("PUT", "PATCH") and not target.name:
        raise ApiError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
        )


async def _serve_resource(
    request: web.Request, cluster, rt: ResourceType, target: Target
) -> web.StreamResponse:
    _check_scope(rt, target, request.method)
    query = request.query
    namespace = target.namespace or None
    store = cluster.store
    method = request.method
    if target.subresource == "log":
        if method != "GET":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        pod = store.get(rt.key, target.name, namespace=namespace)
        return await watch_stream.serve_log(request, cluster, pod, query, hub=request.app[STREAMS])
    if method in ("GET", "HEAD"):
        if rbac_verb(method, target, query) == "watch":
            return await watch_stream.serve_watch(
                request,
                cluster,
                rt,
                target,
                query,
                faults=request.app[FAULTS],
                stats=request.app[STATS],
                hub=request.app[STREAMS],
            )
        if target.name:
            obj = store.get(rt.key, target.name, namespace=namespace)
            if wants_table(request.headers.get("Accept", "")):
                return json_response(_table(rt, [obj], store.resource_version(), query))
            return json_response(obj)
        return _list(request, store, rt, namespace, query)
    dry_run = query.get("dryRun") == "All"
    if dry_run and method in ("PUT", "PATCH"):
        raise ApiError(400, "BadRequest", "kubesim supports dryRun=All on create and delete only")
    if method == "POST":
        if target.name:
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        body = await _body(request, rt, target)
        return json_response(store.create(rt.key, body, namespace=namespace, dry_run=dry_run), 201)
    if method == "PUT":
        body = await _body(request, rt, target)
        subresource = target.subresource or None
        return json_response(store.update(rt.key, body, subresource=subresource))
    if method == "PATCH":
        return json_response(await _patch(request, store, rt, target))
    if method == "DELETE":
        if not target.name:
            return await _delete_collection(request, store, rt, namespace, query)
        options = await _delete_options(request)
        policy = options.get("propagationPolicy") or query.get("propagationPolicy")
        deleted = store.delete(
            rt.key,
            target.name,
            namespace=namespace,
            propagation_policy=policy,
            preconditions=_preconditions(options),
            dry_run=dry_run,
        )
        return json_response(deleted) if dry_run else _deleted(rt, deleted)
    raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def _check_type(body: dict, rt: ResourceType) -> None:
    """``apiVersion`` and ``kind`` as a real API server checks them: a built-in kind may leave both out
    (its scheme knows the type from the URL); a custom resource's object is decoded without a scheme, so
    it must name both, and a wrong kind is a field error.

    >>> from kubesim.resources import builtin_types
    >>> rayjob = next(t for t in builtin_types() if t.kind == "RayJob")
    >>> try:
    ...     _check_type({"apiVersion": "ray.io/v1", "metadata": {"name": "x"}}, rayjob)
    ... except ApiError as err:
    ...     print(err.code, err.message[:68])
    400 the object provided is unrecognized (must be of type RayJob): Object
    """
    if rt.custom:
        if "kind" not in body:
            raise ApiError(
                400,
                "BadRequest",
                f"the object provided is unrecognized (must be of type {rt.kind}): Object 'Kind' is missing in "
                f"'{json.dumps(body)[:200]}'",
            )
        if body.get("apiVersion") != rt.api_version:
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion', '')}) does not match the expected API "
                f"version ({rt.api_version})",
            )
        if body["kind"] != rt.kind:
            name = (body.get("metadata") or {}).get("name", "")
            message = f'Invalid value: "{body["kind"]}": must be {rt.kind}'
            details = {"name": name, "group": rt.group, "kind": body["kind"]}
            details["causes"] = [{"reason": "FieldValueInvalid", "message": message, "field": "kind"}]
            raise ApiError(
                422, "Invalid", f'{body["kind"]}.{rt.group} "{name}" is invalid: kind: {message}', details
            )
        return
    body.setdefault("apiVersion", rt.api_version)
    body.setdefault("kind", rt.kind)
    if body["apiVersion"] != rt.api_version or body["kind"] != rt.kind:
        raise ApiError(
            400,
            "BadRequest",
            f'{body["kind"]} in version "{body["apiVersion"].rpartition("/")[2]}" cannot be handled as a '
            f"{rt.kind}",
        )


async def _body(request: web.Request, rt: ResourceType, target: Target) -> dict:
    """The request object, checked against the URL the way the API server does before storing."""
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
    _check_type(body, rt)
    metadata = body.setdefault("metadata", {})
    if target.namespace:
        if metadata.get("namespace", target.namespace) != target.namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        metadata["namespace"] = target.namespace
    if target.name:
        if metadata.get("name", target.name) != target.name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({metadata['name']}) does not match the name on the URL ({target.name})",
            )
        metadata["name"] = target.name
    return body


async def _patch(request: web.Request, store, rt: ResourceType, target: Target) -> dict:
    content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
    accepted = CUSTOM_PATCH_TYPES if _is_custom(rt) else tuple(PATCH_TYPES)
    patch_type = PATCH_TYPES.get(content_type) if content_type in accepted else None
    if patch_type is None:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{', '.join(accepted)}",
        )
    try:
        patch = json.loads(await request.read())
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {exc}") from None
    return store.patch(
        rt.key,
        target.name,
        patch,
        patch_type=patch_type,
        namespace=target.namespace or None,
        subresource=target.subresource or None,
    )


async def _delete_options(request: web.Request) -> dict:
    raw = await request.read() if request.can_read_body else b""
    if not raw.strip():
        return {}
    try:
        options = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {exc}") from None
    return options if isinstance(options, dict) else {}


def _preconditions(options: dict) -> dict | None:
    """DeleteOptions.preconditions: ``uid`` and ``resourceVersion``, each a string when given."""
    preconditions = options.get("preconditions")
    if preconditions is None:
        return None
    if not isinstance(preconditions, dict) or not all(
        isinstance(preconditions.get(key), str | None) for key in ("uid", "resourceVersion")
    ):
        raise ApiError(
            400, "BadRequest", "preconditions must be an object with string uid and resourceVersion"
        )
    return preconditions


def _is_custom(rt: ResourceType) -> bool:
    builtin = rt.group in _BUILTIN_GROUPS or (
        rt.group.endswith(".k8s.io") and not rt.group.endswith("x-k8s.io")
    )
    return not builtin


def _deleted(rt: ResourceType, obj: dict) -> web.Response:
    """Upstream answers with the object when it lingers (finalizers) or for pods, namespaces and custom
    resources; other kinds get a Status Success naming what was deleted."""
    lingering = bool(obj.get("metadata", {}).get("deletionTimestamp"))
    if lingering or _is_custom(rt) or rt.key in ("pods", "namespaces"):
        return json_response(obj)
    metadata = obj.get("metadata", {})
    return json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": metadata.get("name"),
                "group": rt.group,
                "kind": rt.plural,
                "uid": metadata.get("uid"),
            },
        }
    )


async def _delete_collection(
    request: web.Request, store, rt: ResourceType, namespace: str | None, query
) -> web.Response:
    options = await _delete_options(request)
    policy = options.get("propagationPolicy") or query.get("propagationPolicy")
    items, resource_version = store.list(
        rt.key,
        namespace=namespace,
        label_selector=query.get("labelSelector") or None,
        field_selector=query.get("fieldSelector") or None,
    )
    if query.get("dryRun") != "All":
        for item in items:
            metadata = item["metadata"]
            try:
                store.delete(
                    rt.key, metadata["name"], namespace=metadata.get("namespace"), propagation_policy=policy
                )
            except ApiError as error:
                if error.code != 404:
                    raise
    return json_response(_list_body(rt, items, resource_version))


def _list_body(
    rt: ResourceType, items: list[dict], resource_version: str, cont: str = "", remaining=None
) -> dict:
    metadata: dict = {"resourceVersion": resource_version}
    if cont:
        metadata["continue"] = cont
        if remaining is not None:
            metadata["remainingItemCount"] = remaining
    return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata, "items": items}


def _list(request: web.Request, store, rt: ResourceType, namespace: str | None, query) -> web.Response:
    paged = bool(query.get("limit") or query.get("continue"))

    def read() -> tuple[list[dict], str]:
        return store.list(
            rt.key,
            namespace=namespace,
            label_selector=query.get("labelSelector") or None,
            field_selector=query.get("fieldSelector") or None,
            copies=not paged,  # a page is cut from the stored objects, then copied
        )

    faults = request.app[FAULTS]
    items, resource_version, cont, remaining = paginate(
        read,
        query.get("limit"),
        query.get("continue"),
        request.app[SNAPSHOTS],
        max_page_size=faults.max_page_size,
        continue_ttl_s=faults.continue_ttl_s,
    )
    if paged:
        items = [fast_copy(item) for item in items]
    if wants_table(request.headers.get("Accept", "")):
        table = _table(rt, items, resource_version, query)
        if cont:
            table["metadata"]["continue"] = cont
        return json_response(table)
    return json_response(_list_body(rt, items, resource_version, cont, remaining))


def _table(rt: ResourceType, objects: list[dict], resource_version: str, query) -> dict:
    return build_table(
        rt.key,
        rt.printer_columns,
        objects,
        resource_version=resource_version,
        include_object=query.get("includeObject", "Metadata"),
    )
