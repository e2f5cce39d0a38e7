"""The RayService status in the shape KubeRay writes it: Go's ``RayServiceStatuses`` through ``encoding/json``.

KubeRay writes the whole status struct, so ``omitempty`` decides what a client reads. A struct field is
never omitted: ``activeServiceStatus`` and ``pendingServiceStatus`` are always there, each with a
``rayClusterStatus`` whose ``resource.Quantity`` fields read ``"0"`` and whose ``head`` is ``{}`` when
there is no cluster. Zero numbers, empty strings, lists and maps are left out: ``numServeEndpoints`` is
absent while it is 0, ``serviceStatus`` while the service is not running, an application's ``message``
while Serve has none. Conditions carry the ``observedGeneration`` they were set at.

    >>> go_status({"pendingServiceStatus": {}, "numServeEndpoints": 0})["pendingServiceStatus"]
    {'rayClusterStatus': {'desiredCPU': '0', 'desiredGPU': '0', 'desiredMemory': '0', 'desiredTPU': '0', 'head': {}}}
"""

from __future__ import annotations

from kubesim.kuberay.raycluster import set_condition

ROLES = ("activeServiceStatus", "pendingServiceStatus")
_QUANTITIES = ("desiredCPU", "desiredGPU", "desiredMemory", "desiredTPU")


def _omit_empty(value: dict) -> dict:
    return {k: v for k, v in value.items() if v not in (None, "", 0, [], {})}


def go_cluster_status(status: dict | None) -> dict:
    """A RayCluster's status as a RayService role holds it (``rayv1.RayClusterStatus``)."""
    shaped = _omit_empty(status or {})
    for field in _QUANTITIES:
        shaped.setdefault(field, "0")
    shaped.setdefault("head", {})
    return shaped


def go_role(role: dict | None) -> dict:
    """One ``rayv1.RayServiceStatus``: the cluster's name, its status and its Serve applications."""
    role = role or {}
    shaped = _omit_empty({k: v for k, v in role.items() if k != "rayClusterStatus"})
    shaped["rayClusterStatus"] = go_cluster_status(role.get("rayClusterStatus"))
    return shaped


def go_status(status: dict) -> dict:
    """The whole status as ``r.Status().Update`` sends it."""
    shaped = _omit_empty({k: v for k, v in status.items() if k not in ROLES})
    for role in ROLES:
        shaped[role] = go_role(status.get(role))
    return shaped


def set_service_condition(status: dict, now: str, type_: str, value: str, reason: str, message: str) -> None:
    """``setCondition``: ``meta.SetStatusCondition`` with the status's ``observedGeneration``."""
    conditions = status.setdefault("conditions", [])
    set_condition(conditions, now, type_, value, reason, message)
    for condition in conditions:
        if condition["type"] == type_:
            condition["observedGeneration"] = status.get("observedGeneration", 0)


def is_true(status: dict, type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in status.get("conditions") or [])
