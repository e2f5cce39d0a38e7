"""Where a pod may run: the kube-scheduler's node filters that decide whether a pod stays Pending.

kubesim has no node capacity. Without Node objects it behaves like an elastic cluster and every pod is
placed. Once Node objects exist (``kubectl apply`` / ``--apply`` them, e.g. a tainted GPU pool), a pod
is placed only on a node that passes the filters a real scheduler applies first:

* ``spec.unschedulable`` (cordoned) nodes are skipped;
* the pod's ``nodeSelector`` must match the node's labels;
* every ``NoSchedule`` / ``NoExecute`` taint of the node must be tolerated by the pod.

A pod that fits nowhere stays Pending with ``PodScheduled=False`` / ``Unschedulable`` and the scheduler's
message ("0/3 nodes are available: 1 node(s) had untolerated taint {sku: gpu}, ..."), which is how a GPU pod
without the pool's toleration looks on a real cluster, and what makes Kueue's waitForPodsReady evict it.
Pure functions over plain dicts.
"""

from __future__ import annotations

NODES = "nodes"
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations: list[dict] | None, taint: dict) -> bool:
    """``v1.Toleration.ToleratesTaint``: effect matches (or is empty), key matches (an empty key with
    ``Exists`` matches every key), and ``Exists`` or an equal value."""
    for toleration in tolerations or []:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if operator == "Exists":
            return True
        if operator == "Equal" and key and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _untolerated(pod_spec: dict, node: dict) -> dict | None:
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in SCHEDULING_EFFECTS and not tolerates(pod_spec.get("tolerations"), taint):
            return taint
    return None


def why_not(pod_spec: dict, node: dict) -> str | None:
    """The scheduler's reason this node cannot take the pod, None if it can."""
    if (node.get("spec") or {}).get("unschedulable"):
        return "node(s) were unschedulable"
    labels = (node.get("metadata") or {}).get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return "node(s) didn't match Pod's node affinity/selector"
    taint = _untolerated(pod_spec, node)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"
    return None


def unschedulable_message(pod_spec: dict, nodes: list[dict]) -> str | None:
    """The ``Unschedulable`` message for a pod no node can take; None if one can (or there are no nodes).

    Shaped like kube-scheduler's ``FitError``: reasons counted per node, sorted, then the preemption
    verdict (kubesim never preempts pods)."""
    if not nodes:
        return None
    reasons: dict[str, int] = {}
    for node in nodes:
        reason = why_not(pod_spec, node)
        if reason is None:
            return None
        reasons[reason] = reasons.get(reason, 0) + 1
    total = len(nodes)
    detail = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
    return (
        f"0/{total} nodes are available: {detail}. preemption: 0/{total} nodes are available: "
        f"{total} Preemption is not helpful for scheduling."
    )


def unschedulable_pod_status(pod: dict, message: str, now: str) -> dict:
    """A Pending pod's status when no node fits: only ``PodScheduled=False``, no container started."""
    return {
        "phase": "Pending",
        "qosClass": (pod.get("status") or {}).get("qosClass", "Burstable"),
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": now,
            }
        ],
    }
