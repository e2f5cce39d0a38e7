"""Deletion in the store: finalizers, ownerReference garbage collection and namespace termination.

A mixin of ``kubesim.store.Store``, kept apart because it is the one part of the store that writes on
its own initiative (the garbage collector's writes), and reads best as one piece. It relies on the
store's object maps and write path (``_objects``, ``_by_uid``, ``_dependents``, ``_emptying``,
``_commit``, ``_update``, ``_type``, ``_lookup_uid``, ``_namespace_terminating``, ``_watches``).
"""

from __future__ import annotations

from kubesim.jsoncopy import fast_copy
from kubesim.resources import ResourceType
from kubesim.watch import Change

FOREGROUND = "foregroundDeletion"


def owner_uids(obj: dict) -> set[str]:
    return {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("uid")}


class Deletion:
    """What ``Store.delete`` sets in motion once the object to delete is found."""

    def _delete(self, rt: ResourceType, current: dict, policy: str | None) -> dict:
        meta = current["metadata"]
        uid = meta["uid"]
        if policy == "Orphan":
            self._orphan_dependents(uid)
        if meta.get("deletionTimestamp"):
            return current  # already terminating: deleting again changes nothing
        finalizers = list(meta.get("finalizers") or [])
        foreground = policy == "Foreground" and bool(self._dependents.get(uid))
        if foreground and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        if not finalizers:
            return self._remove(rt, meta.get("namespace", ""), current)
        new = fast_copy(current)
        new["metadata"].update(
            deletionTimestamp=self.clock.timestamp(),
            deletionGracePeriodSeconds=0,
            finalizers=finalizers,
            generation=meta.get("generation", 0) + 1,
        )
        self._commit(rt, meta.get("namespace", ""), new, "MODIFIED", current)
        if foreground:
            self._collect(uid)
        return self._find(rt, new) or new

    def _find(self, rt: ResourceType, obj: dict) -> dict | None:
        meta = obj["metadata"]
        return self._objects.get(rt.key, {}).get(meta.get("namespace", ""), {}).get(meta["name"])

    def _remove(self, rt: ResourceType, ns: str, obj: dict) -> dict:
        """Take the object out of the store for good, then let the GC and namespace deletion follow."""
        meta = obj["metadata"]
        names = self._objects[rt.key][ns]
        del names[meta["name"]]
        if not names:
            del self._objects[rt.key][ns]
        uid = meta["uid"]
        self._by_uid.pop(uid, None)
        self._rv += 1
        gone = {**obj, "metadata": {**meta, "resourceVersion": str(self._rv)}}
        self._watches.publish(Change(self._rv, rt.key, ns, "DELETED", gone, None))
        owners = owner_uids(obj)
        self._index_owners(uid, owners, set())
        self._collect(uid)
        self._release_foreground_owners(owners)
        if ns and ns not in self._emptying and self._namespace_terminating(ns):
            self._finish_namespace(ns)
        return gone

    def _index_owners(self, uid: str, before: set[str], after: set[str]) -> None:
        for owner in before - after:
            dependents = self._dependents.get(owner)
            if dependents is not None:
                dependents.discard(uid)
                if not dependents:
                    del self._dependents[owner]
        for owner in after - before:
            self._dependents.setdefault(owner, set()).add(uid)

    def _collect(self, owner_uid: str) -> None:
        """Garbage-collect the dependents of a removed (or foreground-deleting) owner.

        As upstream's GC: a dependent that still has another live owner only loses the dangling
        reference; one with no live owner left is deleted (honouring its own finalizers).
        """
        owner_gone = owner_uid not in self._by_uid
        for dep_uid in sorted(self._dependents.get(owner_uid, ())):
            found = self._lookup_uid(dep_uid)
            if found is None:
                continue
            rt, dep = found
            refs = dep["metadata"].get("ownerReferences") or []
            alive = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in self._by_uid]
            if alive:
                self._set_owner_refs(rt, dep, [r for r in refs if r.get("uid") != owner_uid])
            else:
                self._delete(rt, dep, None)
        if owner_gone:
            self._dependents.pop(owner_uid, None)

    def _orphan_dependents(self, owner_uid: str) -> None:
        for dep_uid in sorted(self._dependents.get(owner_uid, ())):
            found = self._lookup_uid(dep_uid)
            if found is not None:
                rt, dep = found
                refs = dep["metadata"].get("ownerReferences") or []
                self._set_owner_refs(rt, dep, [r for r in refs if r.get("uid") != owner_uid])

    def _set_owner_refs(self, rt: ResourceType, obj: dict, refs: list[dict]) -> None:
        """The GC's own write: no admission hooks, as it only edits metadata.ownerReferences."""
        new = fast_copy(obj)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        self._commit(rt, obj["metadata"].get("namespace", ""), new, "MODIFIED", obj)
        self._index_owners(obj["metadata"]["uid"], owner_uids(obj), owner_uids(new))

    def _release_foreground_owners(self, owners: set[str]) -> None:
        """A foreground-deleting owner goes once its last dependent is gone (its finalizer is dropped)."""
        for owner_uid in owners:
            found = self._lookup_uid(owner_uid)
            if found is None or self._dependents.get(owner_uid):
                continue
            rt, owner = found
            finalizers = owner["metadata"].get("finalizers") or []
            if owner["metadata"].get("deletionTimestamp") and FOREGROUND in finalizers:
                new = fast_copy(owner)
                new["metadata"]["finalizers"] = [f for f in finalizers if f != FOREGROUND]
                self._update(rt, owner, new, None, hooks=False)  # the GC's write, not a client's

    def _delete_namespace(self, namespace: dict) -> dict:
        """Mark the namespace Terminating, delete its contents, and remove it once it is empty."""
        rt = self._type("namespaces")
        ns = namespace["metadata"]["name"]
        if not namespace["metadata"].get("deletionTimestamp"):
            new = fast_copy(namespace)
            new["metadata"]["deletionTimestamp"] = self.clock.timestamp()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["status"] = {"phase": "Terminating"}
            self._commit(rt, "", new, "MODIFIED", namespace)
            self._emptying.add(ns)
            try:
                for key, by_ns in list(self._objects.items()):
                    for name in sorted(by_ns.get(ns, {})):
                        obj = self._objects[key].get(ns, {}).get(name)
                        if obj is not None:
                            self._delete(self.registry.get(key), obj, None)
            finally:
                self._emptying.discard(ns)
            if gone := self._finish_namespace(ns):
                return gone
        return self._objects["namespaces"][""][ns]

    def _finish_namespace(self, ns: str) -> dict | None:
        """Remove a terminating namespace once nothing is left in it; returns the removed namespace."""
        if any(ns in by_ns for key, by_ns in self._objects.items() if key != "namespaces"):
            return None
        namespace = self._objects.get("namespaces", {}).get("", {}).get(ns)
        if namespace is None:
            return None
        return self._remove(self._type("namespaces"), "", namespace)
