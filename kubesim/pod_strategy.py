"""The API server's validation of a pod's resource requirements, as a store admission hook.

A real API server refuses a pod whose container requests a resource that may not be overcommitted (an
extended resource such as ``nvidia.com/gpu``, or hugepages) without a limit equal to the request. A
RayJob's or RayCluster's pod templates are custom resources and not validated like pods, so such a RayJob
is accepted, admitted by Kueue, and only KubeRay's pod creation is refused: the RayCluster then reports
``ReplicaFailure`` (kubesim.kuberay.raycluster).

    >>> causes = resource_causes({"spec": {"containers": [
    ...     {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}})
    >>> causes[0]["field"], causes[0]["message"]
    ('spec.containers[0].resources.limits', 'Required value: Limit must be set for non overcommitable resources')
"""

from __future__ import annotations

from kubesim import quantity
from kubesim.errors import cause, invalid

PODS = "pods"


def overcommit_allowed(resource: str) -> bool:
    """``IsOvercommitAllowed``: a native resource (no domain, or a ``kubernetes.io/`` one) other than
    hugepages."""
    native = "/" not in resource or "kubernetes.io/" in resource
    return native and not resource.startswith("hugepages-")


def resource_causes(pod: dict) -> list[dict]:
    """``ValidateResourceRequirements`` for the resources that may not be overcommitted, per container."""
    spec = pod.get("spec") or {}
    causes = []
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(kind) or []):
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {}
            path = f"spec.{kind}[{index}].resources"
            for resource, amount in (resources.get("requests") or {}).items():
                if overcommit_allowed(resource):
                    continue
                if resource not in limits:
                    message = "Required value: Limit must be set for non overcommitable resources"
                    causes.append(cause(f"{path}.limits", "FieldValueRequired", message))
                elif quantity.parse_quantity(amount) != quantity.parse_quantity(limits[resource]):
                    message = (
                        f'Invalid value: "{amount}": must be equal to {resource} limit of {limits[resource]}'
                    )
                    causes.append(cause(f"{path}.requests", "FieldValueInvalid", message))
    return causes


def admission_hook(operation: str, rt, obj: dict, old: dict | None) -> None:
    """The pod strategy's ``Validate`` on create (a pod's resources cannot change after)."""
    if rt.key != PODS or operation != "CREATE":
        return
    causes = resource_causes(obj)
    if causes:
        raise invalid(rt, obj["metadata"].get("name", ""), causes)
