"""The task log's "why still queued" (``why_queued_sentences``), and what it reads of a pending Workload
and its queues (``sentences_key``), so that a triggerer's queued tasks of one shape share one explanation
per change of the holders (``kueue_ray.hub``). The explanation itself is ``kueue_ray.why_queued``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from kueue_ray.holdings import Holding, requests_of
from kueue_ray.naming import JOB_UID_LABEL, AirflowIdentity
from kueue_ray.why_queued import explain_queued


def sentences_key(own: Mapping, cluster_queue: Mapping, cluster_queues: Iterable[Mapping]) -> tuple | None:
    """What ``why_queued_sentences`` reads of a pending Workload and its queues: equal keys, same sentences
    from the same holders, so a triggerer's queued tasks of one shape share one explanation per change of
    the holders (``kueue_ray.hub``). Its priority, class and request; its creation time only where
    ``LowerOrNewerEqualPriority`` reads it; not its name (the holders left out by name are admitted, and it
    is not). None (nothing shared) for an admitted Workload, or a queue without ``resourceVersion``.

        >>> cq = {"metadata": {"name": "cq", "resourceVersion": "7"}, "spec": {}}
        >>> a = {"metadata": {"name": "a", "creationTimestamp": "2026-12-06T00:00:00Z"},
        ...      "spec": {"priority": 100}, "status": {"resourceRequests": [{"resources": {"cpu": "1"}}]}}
        >>> b = {**a, "metadata": {"name": "b", "creationTimestamp": "2026-12-06T00:01:00Z"}}
        >>> sentences_key(a, cq, [cq]) == sentences_key(b, cq, [cq])
        True
        >>> newer = {**cq, "spec": {"preemption": {"withinClusterQueue": "LowerOrNewerEqualPriority"}}}
        >>> sentences_key(a, newer, [newer]) == sentences_key(b, newer, [newer])
        False
    """
    if (own.get("status") or {}).get("admission"):
        return None
    versions = tuple(
        ((q.get("metadata") or {}).get("name"), (q.get("metadata") or {}).get("resourceVersion"))
        for q in (cluster_queue, *cluster_queues)
    )
    if any(version is None for _, version in versions):
        return None
    spec = own.get("spec") or {}
    within = ((cluster_queue.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue")
    newer = within == "LowerOrNewerEqualPriority"
    created = (own.get("metadata") or {}).get("creationTimestamp") if newer else None
    priority_class = (spec.get("priorityClassRef") or {}).get("name")
    return versions, spec.get("priority"), priority_class, created, tuple(sorted(requests_of(own).items()))


def why_queued_sentences(
    cluster_queue: Mapping | None,
    own: Mapping | None,
    holdings: Iterable[Holding],
    cluster_queues: Iterable[Mapping],
    rayjob_by_uid: Callable[[str], dict | None],
) -> list[str]:
    """The task log's "why still queued" for Workload ``own`` (empty when it or its ClusterQueue could not
    be read, or it is admitted). A holder's submitter is named from its RayJob's annotations when
    ``rayjob_by_uid`` (the watch hub's cache) has it, as the log names a preemptor."""
    if not cluster_queue or own is None or (own.get("status") or {}).get("admission"):
        return []

    def describe(holder: Mapping) -> str | None:
        uid = ((holder.get("metadata") or {}).get("labels") or {}).get(JOB_UID_LABEL)
        rayjob = rayjob_by_uid(uid) if uid else None
        identity = AirflowIdentity.from_annotations(((rayjob or {}).get("metadata") or {}).get("annotations"))
        return f"DAG {identity.dag_id}, run {identity.run_id}, task {identity.task_id}" if identity else None

    return explain_queued(
        own, cluster_queue, holdings=holdings, cluster_queues=cluster_queues, describe=describe
    ).sentences()
