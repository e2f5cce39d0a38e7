"""What admission injects into a job's pod templates, and what an eviction restores (pure).

Kueue's ``podset.PodSetInfo``: per admitted pod set, the assigned flavors' node labels and tolerations and
Kueue's pod labels. ``start_job`` merges them into the templates as it unsuspends the job
(``RunWithPodSetsInfo``); ``stop_job`` suspends it and puts the templates back as the Workload recorded
them (``RestorePodSetsInfo``). Which templates a kind has comes from ``kubesim.kueue.jobs``.
"""

from __future__ import annotations

import copy

from kubesim.kueue import batch_job
from kubesim.kueue.jobs import (
    BATCH_JOB,
    CLUSTER_QUEUE_POD_LABEL,
    HEAD_POD_SET,
    LOCAL_QUEUE_POD_LABEL,
    PODSET_LABEL,
    RAYJOB,
    SUBMITTER_POD_SET,
    JobKind,
    cluster_spec,
    default_submitter_template,
    set_suspend,
)


def _pod_templates(kind: JobKind, job: dict, *, create_submitter: bool) -> list[tuple[str, dict]]:
    """(pod set name, template dict inside ``job``) in pod set order, for in-place edits."""
    if kind is BATCH_JOB:
        return [(batch_job.MAIN_POD_SET, job.setdefault("spec", {}).setdefault("template", {}))]
    rc_spec = cluster_spec(kind, job)
    if rc_spec is None:
        return []
    head = rc_spec.setdefault("headGroupSpec", {}).setdefault("template", {})
    templates = [(HEAD_POD_SET, head)]
    for group in rc_spec.get("workerGroupSpecs") or []:
        templates.append((str(group.get("groupName", "")).lower(), group.setdefault("template", {})))
    if kind is RAYJOB:
        spec = job["spec"]
        if (spec.get("submissionMode") or "K8sJobMode") == "K8sJobMode":
            if spec.get("submitterPodTemplate") is None and create_submitter:
                spec["submitterPodTemplate"] = default_submitter_template(job)
            if spec.get("submitterPodTemplate") is not None:
                templates.append((SUBMITTER_POD_SET, spec["submitterPodTemplate"]))
    return templates


def pod_set_infos(workload: dict, flavors: dict[str, dict], local_queue: str) -> dict[str, dict]:
    """What admission injects per pod set: flavor node labels + tolerations, and Kueue's pod labels."""
    admission = (workload.get("status") or {}).get("admission") or {}
    cluster_queue = admission.get("clusterQueue", "")
    infos = {}
    for assignment in admission.get("podSetAssignments") or []:
        node_selector: dict[str, str] = {}
        tolerations: list[dict] = []
        for flavor_name in dict.fromkeys((assignment.get("flavors") or {}).values()):
            flavor_spec = (flavors.get(flavor_name) or {}).get("spec") or {}
            node_selector.update(flavor_spec.get("nodeLabels") or {})
            tolerations.extend(t for t in flavor_spec.get("tolerations") or [] if t not in tolerations)
        infos[assignment["name"]] = {
            "labels": {
                PODSET_LABEL: assignment["name"],
                LOCAL_QUEUE_POD_LABEL: local_queue,
                CLUSTER_QUEUE_POD_LABEL: cluster_queue,
            },
            "nodeSelector": node_selector,
            "tolerations": tolerations,
        }
    return infos


def start_job(kind: JobKind, job: dict, infos: dict[str, dict]) -> dict:
    """Upstream ``RunWithPodSetsInfo``: a copy of ``job`` unsuspended with the admission merged in."""
    started = copy.deepcopy(job)
    set_suspend(kind, started, False)
    for name, template in _pod_templates(kind, started, create_submitter=True):
        info = infos.get(name)
        if info is None:
            continue
        template.setdefault("metadata", {}).setdefault("labels", {}).update(info["labels"])
        pod_spec = template.setdefault("spec", {})
        if info["nodeSelector"]:
            pod_spec.setdefault("nodeSelector", {}).update(info["nodeSelector"])
        if info["tolerations"]:
            existing = pod_spec.setdefault("tolerations", [])
            existing.extend(t for t in info["tolerations"] if t not in existing)
    return started


def stop_job(kind: JobKind, job: dict, original_pod_sets: list[dict]) -> dict:
    """Upstream ``Suspend`` + ``RestorePodSetsInfo``: a copy of ``job`` suspended, templates as recorded.

    The Workload's pod sets were copied from the job before admission, so their labels, node selectors
    and tolerations are exactly what the job had before Kueue injected anything.
    """
    stopped = copy.deepcopy(job)
    set_suspend(kind, stopped, True)
    recorded = {ps["name"]: ps.get("template") or {} for ps in original_pod_sets}
    for name, template in _pod_templates(kind, stopped, create_submitter=False):
        if name not in recorded:
            continue
        original = recorded[name]
        _restore_field(template.setdefault("metadata", {}), original.get("metadata") or {}, "labels")
        pod_spec = template.setdefault("spec", {})
        for field in ("nodeSelector", "tolerations"):
            _restore_field(pod_spec, original.get("spec") or {}, field)
    return stopped


def _restore_field(target: dict, original: dict, field: str) -> None:
    if original.get(field):
        target[field] = copy.deepcopy(original[field])
    else:
        target.pop(field, None)
