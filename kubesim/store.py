"""The object store: what etcd plus the generic API server registry do for a real cluster.

One global ``resourceVersion`` counter orders every write. Each write is appended to a bounded history
and fanned out to watchers, so a client that lost its watch can resume from the last version it saw,
or gets ``410 Expired`` and relists, exactly the contract Airflow's watch hub is written against.

Performance rests on one invariant: **a stored object is never mutated after it is committed.** Every
write builds a new dict, so the stored dict itself can be shared by the history and by every watcher
without copying on the write path; readers get their private copy when they read (``get``/``list``)
or when they take an event off their watch queue.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import TypeVar

import msgspec

from kubesim.clock import Clock
from kubesim.deletion import Deletion, owner_uids
from kubesim.errors import (
    STALE,
    ApiError,
    already_exists,
    bad_request,
    cause,
    conflict,
    invalid,
    not_found,
    object_details,
    resource_name,
)
from kubesim.images import ImageRegistry
from kubesim.jsoncopy import fast_copy
from kubesim.metadata import metadata_errors
from kubesim.patch import JsonPatchError, json_patch, merge_patch, strip_directives
from kubesim.resources import Registry, ResourceType
from kubesim.selectors import parse_field_selector, parse_label_selector
from kubesim.watch import Change, Delivery, Subscription, Watcher, Watches, selector_filter


def _check_preconditions(rt: ResourceType, current: dict, preconditions: dict | None) -> None:
    """DeleteOptions.preconditions, worded as the API server's early check (``rest.BeforeDelete``), which
    names the resource by its kind (``RayJob.ray.io``), not its plural."""
    if not preconditions:
        return
    meta = current["metadata"]
    uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid is not None and uid != meta.get("uid"):
        why = (
            f"the UID in the precondition ({uid}) does not match the UID in record ({meta.get('uid')}). "
            "The object might have been deleted and then recreated"
        )
    elif version is not None and version != meta.get("resourceVersion"):
        why = (
            f"the ResourceVersion in the precondition ({version}) does not match the ResourceVersion in "
            f"record ({meta.get('resourceVersion')}). The object might have been modified"
        )
    else:
        return
    message = f'Operation cannot be fulfilled on {rt.qualified_kind} "{meta["name"]}": {why}'
    raise ApiError(409, "Conflict", message, object_details(rt, meta["name"], kind=rt.kind))


AdmissionHook = Callable[[str, ResourceType, dict, "dict | None"], None]
S = TypeVar("S", bound=Subscription)

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # upstream's generateName alphabet: no vowels, no words
_PROPAGATION = (None, "Background", "Foreground", "Orphan")


def _spec_part(obj: dict) -> dict:
    """Everything that counts for ``generation``: the object minus metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store(Deletion):
    """Objects of every served kind, with API-server semantics. Synchronous: every call is atomic."""

    def __init__(self, registry: Registry, clock: Clock, *, history: int = 20000) -> None:
        self.registry = registry
        self.clock = clock
        # What the nodes' container runtime can pull (``kubesim.images``): cluster state the kubelets read.
        self.images = ImageRegistry()
        self._objects: dict[
            str, dict[str, dict[str, dict]]
        ] = {}  # key -> namespace ("" if none) -> name -> obj
        self._rv = 0
        self._watches = Watches(history)
        self._hooks: list[AdmissionHook] = []
        self._by_uid: dict[str, tuple[str, str, str]] = {}  # uid -> (key, namespace, name)
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent uids
        self._emptying: set[str] = set()  # namespaces whose contents _delete_namespace is deleting right now
        for name in ("default", "kube-system", "kube-public"):
            self.create("namespaces", {"metadata": {"name": name}})

    # -- public API --------------------------------------------------------------------------------

    def resource_version(self) -> str:
        return str(self._rv)

    def add_admission_hook(self, hook: AdmissionHook) -> None:
        """Run ``hook(operation, rt, obj, old)`` on every CREATE and UPDATE (not on status writes).

        The hook may mutate ``obj`` (defaulting) or raise ``ApiError`` to deny; it must not mutate ``old``.
        Hooks run in registration order, before schema validation, like mutating webhooks.
        """
        self._hooks.append(hook)

    def counts(self) -> dict[str, int]:
        """Number of stored objects per resource key."""
        return {
            key: sum(len(names) for names in by_ns.values()) for key, by_ns in self._objects.items() if by_ns
        }

    def create(self, key: str, obj: dict, *, namespace: str | None = None, dry_run: bool = False) -> dict:
        rt = self._type(key)
        body = self._own_copy(obj)
        new = {"apiVersion": rt.api_version, "kind": rt.kind}
        new.update((k, v) for k, v in body.items() if k not in new)
        meta = new["metadata"]
        ns = self._create_namespace(rt, meta, namespace)
        if not meta.get("name") and not meta.get("generateName"):
            required = cause(
                "metadata.name", "FieldValueRequired", "Required value: name or generateName is required"
            )
            raise invalid(rt, "", [required])
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.clock.timestamp()
        meta["generation"] = 1
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(field, None)
        generated = not meta.get("name")
        for attempt in range(8):
            if generated:
                meta["name"] = self._generated_name(meta["generateName"])
            if meta["name"] not in self._objects.get(key, {}).get(ns, {}):
                break
            if not generated or attempt == 7:
                raise already_exists(rt, meta["name"])
        self._initial_state(rt, new)
        if ns and self._namespace_terminating(ns):
            message = (
                f'{resource_name(rt)} "{meta["name"]}" is forbidden: unable to create new content in namespace '
                f"{ns} because it is being terminated"
            )
            raise ApiError(403, "Forbidden", message, object_details(rt, meta["name"]))
        for hook in self._hooks:
            hook("CREATE", rt, new, None)
        self._validate(rt, new)
        if meta["name"] in self._objects.get(key, {}).get(ns, {}):  # a hook may have renamed it
            raise already_exists(rt, meta["name"])
        if dry_run:
            return new
        self._commit(rt, ns, new, "ADDED", None)
        self._index_owners(meta["uid"], set(), owner_uids(new))
        return fast_copy(new)

    def get(self, key: str, name: str, *, namespace: str | None = None) -> dict:
        rt = self._type(key)
        return fast_copy(self._current(rt, name, self._scope(rt, namespace)))

    def get_or_none(self, key: str, name: str, *, namespace: str | None = None) -> dict | None:
        """``get``, or None where it answers 404 (a controller's ``IsNotFound`` branch); other errors raise."""
        try:
            return self.get(key, name, namespace=namespace)
        except ApiError as err:
            if err.code == 404:
                return None
            raise

    def list(
        self,
        key: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        copies: bool = True,
    ) -> tuple[list[dict], str]:
        """The matching objects in (namespace, name) order, and the store's resourceVersion.

        ``copies=False``: the stored objects themselves, for a caller that mutates nothing and copies
        only what it hands on (a page of a paged list: copying all 30,000 objects for each page of 500
        made a paged list O(N) per page)."""
        rt = self._type(key)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector)
        items = [
            obj
            for obj in self._iter(key, namespace if rt.namespaced else None)
            if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj)
        ]
        return [fast_copy(obj) for obj in items] if copies else items, str(self._rv)

    def update(self, key: str, obj: dict, *, subresource: str | None = None) -> dict:
        rt = self._type(key)
        new = self._own_copy(obj)
        meta = new["metadata"]
        name = meta.get("name")
        if not name:
            raise invalid(
                rt, "", [cause("metadata.name", "FieldValueRequired", "Required value: name is required")]
            )
        current = self._current(rt, name, self._scope(rt, meta.get("namespace")))
        return self._update(rt, current, new, subresource)

    def patch(
        self,
        key: str,
        name: str,
        patch,
        *,
        patch_type: str = "merge",
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict:
        rt = self._type(key)
        current = self._current(rt, name, self._scope(rt, namespace))
        doc = fast_copy(current)
        if patch_type in ("merge", "strategic"):
            if not isinstance(patch, dict):
                raise bad_request(f"{patch_type} patch must be a JSON object")
            doc = merge_patch(doc, strip_directives(patch) if patch_type == "strategic" else patch)
        elif patch_type == "json":
            try:
                doc = json_patch(doc, patch)
            except JsonPatchError as exc:
                raise ApiError(422, "Invalid", str(exc)) from None
        else:
            raise ApiError(415, "UnsupportedMediaType", f"patch type {patch_type!r} is not supported")
        if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
            raise bad_request("the patched object must be a JSON object with metadata")
        if doc["metadata"].get("name") != name:
            raise bad_request(
                f"the name of the object ({doc['metadata'].get('name')}) does not match the name on the URL ({name})"
            )
        return self._update(rt, current, doc, subresource)

    def delete(
        self,
        key: str,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: str | None = None,
        preconditions: dict | None = None,
        dry_run: bool = False,
    ) -> dict:
        """Delete ``name``; ``preconditions`` (``{"uid", "resourceVersion"}`` of DeleteOptions) must match
        the stored object or the answer is 409 Conflict, checked before anything else as the API server
        does, so a deletion decided on an older version or another object with the same name never happens.
        An object that is already terminating is checked the same way (its deletion bumped its version)."""
        rt = self._type(key)
        if propagation_policy not in _PROPAGATION:
            raise bad_request(f"unsupported propagationPolicy {propagation_policy!r}")
        current = self._current(rt, name, self._scope(rt, namespace))
        _check_preconditions(rt, current, preconditions)
        if dry_run:
            return fast_copy(current)
        if rt.key == "namespaces":
            return fast_copy(self._delete_namespace(current))
        return fast_copy(self._delete(rt, current, propagation_policy))

    def watch(
        self,
        key: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        copy_objects: bool = True,
    ) -> Watcher:
        """Open a watch. ``copy_objects=False`` hands out the shared frozen objects (read-only use only,
        e.g. serialising them onto an HTTP stream), which saves a copy per event per watcher."""
        rt = self._type(key)
        ns = namespace if rt.namespaced and namespace else None
        watcher = Watcher(
            self._watches, key, ns, selector_filter(label_selector, field_selector), copy_objects
        )
        return self._register(watcher, resource_version)

    def subscribe(
        self,
        key: str,
        deliver: Callable[[Delivery], None],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
    ) -> Subscription:
        """A watch whose events are pushed: ``deliver`` is called inside each matching write (and, before
        this returns, for the initial or replayed events). Same semantics and errors as ``watch``;
        deliveries carry the shared frozen objects, so ``deliver`` must treat them as read-only."""
        rt = self._type(key)
        ns = namespace if rt.namespaced and namespace else None
        subscription = Subscription(
            self._watches, key, ns, selector_filter(label_selector, field_selector), deliver
        )
        return self._register(subscription, resource_version)

    def _register(self, subscription: S, resource_version: str | None) -> S:
        current = self._iter(subscription.key, subscription.namespace)  # a generator: read only if needed
        return self._watches.register(subscription, resource_version, self._rv, current)

    # -- lookups -----------------------------------------------------------------------------------

    def _type(self, key: str) -> ResourceType:
        rt = self.registry.get(key)
        if rt is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({key})")
        return rt

    def _scope(self, rt: ResourceType, namespace: str | None) -> str:
        if not rt.namespaced:
            return ""
        if not namespace:
            raise bad_request(f"a namespace is required for the namespaced resource {rt.key}")
        return namespace

    def _current(self, rt: ResourceType, name: str, ns: str) -> dict:
        obj = self._objects.get(rt.key, {}).get(ns, {}).get(name)
        if obj is None:
            raise not_found(rt, name)
        return obj

    def _lookup_uid(self, uid: str) -> tuple[ResourceType, dict] | None:
        where = self._by_uid.get(uid)
        if where is None:
            return None
        key, ns, name = where
        return self.registry.get(key), self._objects[key][ns][name]

    def _iter(self, key: str, namespace: str | None):
        by_ns = self._objects.get(key, {})
        spaces = [namespace] if namespace is not None else sorted(by_ns)
        for ns in spaces:
            names = by_ns.get(ns, {})
            for name in sorted(names):
                yield names[name]

    def _namespace_terminating(self, ns: str) -> bool:
        namespace = self._objects.get("namespaces", {}).get("", {}).get(ns)
        return namespace is not None and bool(namespace["metadata"].get("deletionTimestamp"))

    # -- write path --------------------------------------------------------------------------------

    def _own_copy(self, obj: dict) -> dict:
        if not isinstance(obj, dict):
            raise bad_request("the object must be a JSON object")
        try:
            new = fast_copy(obj)
        except (TypeError, msgspec.EncodeError) as exc:
            raise bad_request(f"the object is not valid JSON: {exc}") from None
        if not isinstance(new.get("metadata"), dict):
            new["metadata"] = {}
        return new

    def _create_namespace(self, rt: ResourceType, meta: dict, namespace: str | None) -> str:
        if not rt.namespaced:
            meta.pop("namespace", None)
            return ""
        in_body = meta.get("namespace")
        if namespace and in_body and namespace != in_body:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        ns = namespace or in_body
        if not ns:
            raise bad_request(f"a namespace is required for the namespaced resource {rt.key}")
        if ns not in self._objects.get("namespaces", {}).get("", {}):
            raise ApiError(
                404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"}
            )
        meta["namespace"] = ns
        return ns

    def _initial_state(self, rt: ResourceType, new: dict) -> None:
        """What the API server itself sets on create: status is the server's, not the client's."""
        if rt.key == "namespaces":
            new.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            new["status"] = {"phase": "Active"}
            labels = new["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = new["metadata"].get("name", "")
        elif rt.key == "pods":
            new["status"] = {"phase": "Pending"}
        elif rt.has_status:
            new.pop("status", None)

    @staticmethod
    def _generated_name(base: str) -> str:
        return base[:58] + "".join(random.choices(_NAME_ALPHABET, k=5))

    def _validate(self, rt: ResourceType, obj: dict) -> None:
        causes = []
        if rt.schema is not None:
            from kubesim import schema  # written in parallel; only kinds with a CRD schema need it

            schema.apply_defaults(obj, rt.schema)
            causes += [cause(e.field, e.reason, e.message) for e in schema.validate(obj, rt.schema)]
        causes += metadata_errors(rt, obj["metadata"])
        if causes:
            raise invalid(rt, obj["metadata"].get("name", ""), causes)

    def _update(
        self, rt: ResourceType, current: dict, new: dict, subresource: str | None, *, hooks: bool = True
    ) -> dict:
        name = current["metadata"]["name"]
        meta = new["metadata"]
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != current["metadata"]["resourceVersion"]:
            raise conflict(rt, name, STALE)
        uid = meta.get("uid")
        if uid and uid != current["metadata"]["uid"]:
            why = f"Precondition failed: UID in precondition: {current['metadata']['uid']}, UID in object meta: {uid}"
            raise conflict(rt, name, why)
        if subresource == "status":
            if not rt.has_status:
                raise ApiError(
                    404, "NotFound", f"the server could not find the requested resource ({rt.key}/status)"
                )
            status = new.get("status")
            new = fast_copy(current)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif subresource is not None:
            raise ApiError(
                405, "MethodNotAllowed", f"the subresource {subresource!r} of {rt.key} cannot be written"
            )
        else:
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            if rt.has_status:
                if "status" in current:
                    new["status"] = fast_copy(current["status"])
                else:
                    new.pop("status", None)
            kept = (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            )
            for field in kept + ("generation",):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
                else:
                    meta.pop(field, None)
            for hook in self._hooks if hooks else ():
                hook("UPDATE", rt, new, current)
        self._validate(rt, new)
        new_meta = new["metadata"]
        if current["metadata"].get("deletionTimestamp"):
            added = [
                f
                for f in new_meta.get("finalizers") or []
                if f not in (current["metadata"].get("finalizers") or [])
            ]
            if added:
                message = (
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers "
                    + "[]string{"
                    + ", ".join(f'"{f}"' for f in added)
                    + "}"
                )
                raise invalid(rt, name, [cause("metadata.finalizers", "FieldValueForbidden", message)])
        new_meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return fast_copy(current)  # a no-op write: no new resourceVersion, no event
        if _spec_part(new) != _spec_part(current):
            new_meta["generation"] = current["metadata"].get("generation", 0) + 1
        ns = current["metadata"].get("namespace", "")
        self._index_owners(new_meta["uid"], owner_uids(current), owner_uids(new))
        if new_meta.get("deletionTimestamp") and not new_meta.get("finalizers"):
            return fast_copy(self._remove(rt, ns, new))  # the last finalizer went: the deletion completes
        self._commit(rt, ns, new, "MODIFIED", current)
        return fast_copy(new)

    def _commit(self, rt: ResourceType, ns: str, obj: dict, type_: str, prev: dict | None) -> None:
        """Store ``obj`` (which is frozen from here on), stamp it with the next version, tell watchers."""
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        self._objects.setdefault(rt.key, {}).setdefault(ns, {})[meta["name"]] = obj
        self._by_uid[meta["uid"]] = (rt.key, ns, meta["name"])
        self._watches.publish(Change(self._rv, rt.key, ns, type_, obj, prev))
