"""What the three views share: where they link to (``Links``), how an owning task instance is described
to a user who may read its DAG (``describe_owner``), and the small readers of objects, priority, queue
position and phase that a RayJob, a RayService and a queue all need.

Apart from the views because every one of them imports it and it imports none of them; the security rule
(``describe_owner`` returns None for a DAG the user may not read) lives here once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kueue_ray.links import kueue_tab_path, task_instance_path
from kueue_ray.naming import PRIORITY_CLASS_LABEL, AirflowIdentity
from kueue_ray.narration import readable_quantities
from kueue_ray.timeline import to_iso
from kueue_ray.ui.access import Access
from kueue_ray.ui.snapshot import PendingRead, Snapshot

APP_PREFIX = "/kueue"
QUEUES_ROUTE = "kueue-queues"
"""``url_route`` of the navigation page: ``/plugin/kueue-queues``."""
HIDDEN_OWNER = "a workload of a DAG you cannot read"
FOREIGN_OWNER = "a workload this Airflow has no record of (not submitted by it, or gone before it was seen)"


@dataclass(frozen=True)
class Links:
    """Where the pages link to, inside Airflow's UI (``root`` is the path of ``[api] base_url``)."""

    root: str = ""
    deployment: str | None = None
    """This Airflow deployment (``kueue_ray.deployment``): a workload of another one is never linked here."""

    def task_instance(self, identity: AirflowIdentity) -> str:
        return self.root + task_instance_path(
            identity.dag_id, identity.run_id, identity.task_id, identity.map_index
        )

    def kueue_tab(self, identity: AirflowIdentity) -> str:
        return self.root + kueue_tab_path(
            identity.dag_id, identity.run_id, identity.task_id, identity.map_index
        )

    def queue(self, cluster_queue: str) -> str:
        """The queues page scrolled to one ClusterQueue, as a page of Airflow's UI (not the bare iframe)."""
        return f"{self.root}/plugin/{QUEUES_ROUTE}{self.root}{APP_PREFIX}/queues#cq-{quote(cluster_queue, safe='')}"


def metadata_of(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def conditions_of(obj: dict | None) -> dict[str, dict]:
    return {c.get("type"): c for c in ((obj or {}).get("status") or {}).get("conditions") or ()}


def priority_of(workload: dict | None, rayjob: dict | None) -> dict[str, Any]:
    spec = (workload or {}).get("spec") or {}
    ref = spec.get("priorityClassRef") or {}
    name = ref.get("name") or (metadata_of(rayjob).get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    return {"class": name, "value": spec.get("priority")}


def another_airflow(deployment: str) -> str:
    return f"another Airflow: {deployment}"


def describe_owner(identity: AirflowIdentity | None, access: Access, links: Links) -> dict[str, Any] | None:
    """The owning task instance with links, or None when the user may not know it (or there is none).

    A workload another Airflow deployment submitted is named as such, with that deployment's identity and
    nothing else: its DAG ids are not this deployment's to show, and no task here owns it."""
    if identity is not None and identity.deployment and links.deployment not in (None, identity.deployment):
        return {
            "foreign_deployment": identity.deployment,
            "description": another_airflow(identity.deployment),
        }
    if identity is None or not access.can_read(identity.dag_id):
        return None
    return {
        "dag_id": identity.dag_id,
        "run_id": identity.run_id,
        "task_id": identity.task_id,
        "map_index": identity.map_index,
        "task_instance_url": links.task_instance(identity),
        "kueue_tab_url": links.kueue_tab(identity),
    }


@dataclass(frozen=True)
class TaskRef:
    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1

    def identity(self) -> AirflowIdentity:
        return AirflowIdentity(self.dag_id, self.task_id, self.run_id, self.map_index)


def victims_of(
    snapshot: Snapshot, job_uids: Iterable[str | None], access: Access, links: Links
) -> list[dict[str, Any]]:
    """Whom the objects with these uids preempted (``Snapshot.preempted_by``: what this api-server saw
    since it started), oldest first: when, Kueue's reason, and the victim's task instance under the same
    reading rule as a preemptor."""
    found = []
    for uid in {u for u in job_uids if u}:
        for preemption in snapshot.preempted_by.get(uid, ()):
            identity = snapshot.identities.get(preemption["job_uid"])
            owner = describe_owner(identity, access, links) if identity else None
            if owner is None:
                owner = {"description": HIDDEN_OWNER if identity else FOREIGN_OWNER}
            elif "foreign_deployment" not in owner and identity is not None:
                owner["description"] = (
                    f"DAG {identity.dag_id}, run {identity.run_id}, task {identity.task_id}"
                )
            found.append(
                {
                    "at": to_iso(preemption.get("at")),
                    "reason": preemption.get("reason") or "",
                    "victim": owner,
                }
            )
    return sorted(found, key=lambda v: v["at"] or "")


def iso_times(health: dict) -> dict:
    return {key: to_iso(health[key]) for key in ("synced_at", "failing_since")}


def find_recorded(objects: Iterable[dict], xcom: dict) -> dict | None:
    """The object a task recorded in its XCom, in the cache: same name and namespace, and the same uid when
    the XCom has one (an object created again under the name later is not the one this task made)."""
    name, namespace, uid = xcom.get("name"), xcom.get("namespace"), xcom.get("uid")
    for obj in objects:
        meta = metadata_of(obj)
        if (
            meta.get("name") == name
            and meta.get("namespace") == namespace
            and (not uid or meta.get("uid") == uid)
        ):
            return obj
    return None


def phase_view(
    words: dict[str, str], kind: str, observation: Any, recorded: dict | None, *, terminal: bool
) -> dict[str, Any]:
    """A task view's phase: the ``observation`` (a RayJob's or a RayService's) in ``words``, or, once the
    ``kind`` object is gone from the cluster, the last phase the task ``recorded`` in its XCom."""
    if observation is None:
        final = (recorded or {}).get("final_phase") or (recorded or {}).get("phase")
        return {
            "phase": final,
            "words": (words.get(final, final) if final else "Unknown")
            + f" (the {kind} no longer exists in the cluster)",
            "reason": "",
            "message": "",
            "terminal": True,
        }
    phase = observation.phase.value
    return {
        "phase": phase,
        "words": words.get(phase, phase.replace("_", " ").capitalize()),
        "reason": observation.reason,
        "message": readable_quantities(observation.message or ""),
        "terminal": terminal,
    }


def position_of(read: PendingRead | None, workload: dict | None) -> dict[str, Any] | None:
    if read is None or read.summary is None or workload is None:
        return None
    items = read.summary.get("items") or ()
    for entry in items:
        meta = entry.get("metadata") or {}
        if meta.get("name") == metadata_of(workload).get("name") and meta.get("namespace") == metadata_of(
            workload
        ).get("namespace"):
            return {
                "in_cluster_queue": int(entry.get("positionInClusterQueue", 0)) + 1,
                "in_local_queue": int(entry.get("positionInLocalQueue", 0)) + 1,
                "pending_in_cluster_queue": len(items),
                "fetched_at": to_iso(read.fetched_at),
            }
    return None
