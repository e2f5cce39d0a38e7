"""Store objects (dicts) to the scheduler's model (``kubesim.kueue.model``), and admissions back to dicts.

The scheduler decides over immutable model values; this is the one place that reads Kueue's API objects
for it, so the scheduler never sees a dict and the controller never parses a quantity itself.
"""

from __future__ import annotations

from kubesim import quantity
from kubesim.kueue import jobs, model
from kubesim.kueue.conditions import (
    admission_of,
    find_condition,
    is_evicting,
    queue_order_timestamp,
    timestamp_seconds,
)
from kubesim.kueue.queue_status import cluster_queue_active, stop_policy


def _tolerations(items: list[dict] | None) -> tuple[model.Toleration, ...]:
    return tuple(
        model.Toleration(
            key=t.get("key", ""),
            operator=t.get("operator", "Equal"),
            value=t.get("value", ""),
            effect=t.get("effect", ""),
        )
        for t in items or []
    )


def model_flavor(obj: dict) -> model.ResourceFlavor:
    spec = obj.get("spec") or {}
    taints = tuple(
        model.Taint(key=t.get("key", ""), value=t.get("value", ""), effect=t.get("effect", "NoSchedule"))
        for t in spec.get("nodeTaints") or []
    )
    return model.ResourceFlavor(
        name=obj["metadata"]["name"],
        node_labels=dict(spec.get("nodeLabels") or {}),
        node_taints=taints,
        tolerations=_tolerations(spec.get("tolerations")),
    )


def _optional_quantity(resource: str, value) -> int | None:
    return None if value is None else quantity.to_canonical(resource, value)


def model_resource_groups(groups: list[dict] | None) -> tuple[model.ResourceGroup, ...]:
    result = []
    for group in groups or []:
        flavors = []
        for flavor in group.get("flavors") or []:
            resources = {
                r["name"]: model.ResourceQuota(
                    nominal=quantity.to_canonical(r["name"], r.get("nominalQuota", 0)),
                    borrowing_limit=_optional_quantity(r["name"], r.get("borrowingLimit")),
                    lending_limit=_optional_quantity(r["name"], r.get("lendingLimit")),
                )
                for r in flavor.get("resources") or []
            }
            flavors.append(model.FlavorQuotas(name=flavor["name"], resources=resources))
        result.append(
            model.ResourceGroup(
                covered_resources=tuple(group.get("coveredResources") or ()), flavors=tuple(flavors)
            )
        )
    return tuple(result)


def model_cluster_queue(obj: dict, flavors: dict[str, dict]) -> model.ClusterQueue:
    spec = obj.get("spec") or {}
    preemption = spec.get("preemption") or {}
    borrow = preemption.get("borrowWithinCohort") or {}
    fungibility = spec.get("flavorFungibility") or {}
    return model.ClusterQueue(
        name=obj["metadata"]["name"],
        resource_groups=model_resource_groups(spec.get("resourceGroups")),
        cohort=spec.get("cohortName") or None,
        queueing_strategy=spec.get("queueingStrategy") or model.BEST_EFFORT_FIFO,
        preemption=model.PreemptionPolicy(
            within_cluster_queue=preemption.get("withinClusterQueue") or model.NEVER,
            reclaim_within_cohort=preemption.get("reclaimWithinCohort") or model.NEVER,
            borrow_within_cohort_policy=borrow.get("policy") or model.NEVER,
            borrow_max_priority_threshold=borrow.get("maxPriorityThreshold"),
        ),
        flavor_fungibility=model.FlavorFungibility(
            when_can_borrow=fungibility.get("whenCanBorrow") or model.MAY_STOP_SEARCH,
            when_can_preempt=fungibility.get("whenCanPreempt") or model.TRY_NEXT_FLAVOR,
            preference=fungibility.get("preference") or model.BORROWING_OVER_PREEMPTION,
        ),
        stop_policy=stop_policy(obj),
        namespace_selector=spec.get("namespaceSelector"),
        active=cluster_queue_active(obj, flavors)[0],
    )


def model_cohort(obj: dict) -> model.Cohort:
    spec = obj.get("spec") or {}
    return model.Cohort(
        name=obj["metadata"]["name"],
        parent=spec.get("parentName") or None,
        resource_groups=model_resource_groups(spec.get("resourceGroups")),
    )


def model_pod_sets(wl: dict) -> tuple[model.PodSet, ...]:
    result = []
    for ps in (wl.get("spec") or {}).get("podSets") or []:
        pod_spec = (ps.get("template") or {}).get("spec") or {}
        result.append(
            model.PodSet(
                name=ps["name"],
                count=int(ps.get("count", 1)),
                requests=jobs.pod_requests(pod_spec),
                node_selector=dict(pod_spec.get("nodeSelector") or {}),
                tolerations=_tolerations(pod_spec.get("tolerations")),
            )
        )
    return tuple(result)


def model_admission(wl: dict, reserved_at: float | None = None) -> model.Admission | None:
    admission = admission_of(wl)
    if admission is None:
        return None
    reserved = find_condition(wl, "QuotaReserved") or {}
    return model.Admission(
        cluster_queue=admission.get("clusterQueue", ""),
        pod_set_assignments=tuple(
            model.PodSetAssignment(
                name=a["name"],
                flavors=dict(a.get("flavors") or {}),
                resource_usage={
                    r: quantity.to_canonical(r, v) for r, v in (a.get("resourceUsage") or {}).items()
                },
                count=int(a.get("count", 1)),
            )
            for a in admission.get("podSetAssignments") or []
        ),
        reserved_at=reserved_at or timestamp_seconds(reserved.get("lastTransitionTime")),
    )


def model_workload(
    wl: dict, cluster_queue: str, *, seq: int, inadmissible: bool = False, reserved_at: float | None = None
) -> model.Workload:
    meta = wl["metadata"]
    spec = wl.get("spec") or {}
    return model.Workload(
        key=f"{meta['namespace']}/{meta['name']}",
        uid=meta["uid"],
        cluster_queue=cluster_queue,
        pod_sets=model_pod_sets(wl),
        priority=int(spec.get("priority") or 0),
        queue_timestamp=timestamp_seconds(queue_order_timestamp(wl)),
        creation_seq=seq,
        job_uid=(meta.get("labels") or {}).get(jobs.JOB_UID_LABEL),
        namespace=meta["namespace"],
        local_queue=spec.get("queueName", ""),
        admission=model_admission(wl, reserved_at),
        evicted=is_evicting(wl),
        inadmissible=inadmissible,
    )


def admission_dict(admission: model.Admission) -> dict:
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [
            {
                "name": a.name,
                "flavors": dict(a.flavors),
                "resourceUsage": {r: quantity.to_string(r, v) for r, v in a.resource_usage.items()},
                "count": a.count,
            }
            for a in admission.pod_set_assignments
        ],
    }


def resource_requests(wl: dict) -> list[dict]:
    """``status.resourceRequests`` of a pending workload: per pod set totals."""
    return [
        {"name": ps.name, "resources": {r: quantity.to_string(r, v) for r, v in ps.total().items()}}
        for ps in model_pod_sets(wl)
    ]
