"""What the hub watches: the three resources (RayJobs, RayServices, Kueue Workloads), each with its API
coordinates, its label selector and how its objects are keyed and trimmed for the cache.

Apart from the subscriptions and the loops because both read these descriptions and neither owns them:
a ``Subscription`` names the resource it reads, a watch loop lists and keys what it describes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kueue_ray.kube import api
from kueue_ray.kube.essential import essential_rayjob, essential_workload
from kueue_ray.naming import DEPLOYMENT_LABEL, JOB_UID_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE

RAYJOB = "rayjob"
RAYSERVICE = "rayservice"
WORKLOAD = "workload"


def _labels(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("labels") or {}


@dataclass(frozen=True)
class WatchedResource:
    """What one watch loop lists and watches, and how it keys the objects it caches.

    ``selects`` mirrors ``label_selector`` on the client side: a relist may only conclude that a cached
    object was deleted if the list would have returned it (a RayJob read by GET may lack our label).
    """

    kind: str
    group: str
    version: str
    plural: str
    label_selector: str
    key_of: Callable[[dict], str | None]
    selects: Callable[[dict], bool]
    essential: Callable[[dict], dict]
    """What the cache keeps of an object: the fields waiting reads (``kueue_ray.status.essential_*``)."""
    packed: bool = True
    """Whether the cache keeps its objects as compact JSON (``kueue_ray.kube.packed``): a namespace may
    hold tens of thousands of RayJobs and Workloads."""

    @property
    def qualified(self) -> str:
        """``plural.group``, as RBAC and ``kubectl auth can-i`` name it."""
        return f"{self.plural}.{self.group}"


def _managed(
    kind: str, coordinates: api.Resource, essential: Callable[[dict], dict], packed: bool
) -> WatchedResource:
    """A ray.io resource the plugin creates (RayJobs, RayServices): listed by our managed-by label, keyed by
    its name."""
    return WatchedResource(
        kind=kind,
        group=coordinates.group,
        version=coordinates.version,
        plural=coordinates.plural,
        label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
        key_of=lambda obj: (obj.get("metadata") or {}).get("name"),
        selects=lambda obj: _labels(obj).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE,
        essential=essential,
        packed=packed,
    )


RAYJOBS = _managed(RAYJOB, api.RAYJOB, essential_rayjob, packed=True)
# Whole and unpacked: the RayService status model reads spec and status alike, and a namespace holds few
# services.
RAYSERVICES = _managed(RAYSERVICE, api.RAYSERVICE, lambda obj: obj, packed=False)
"""The deploy operator's RayServices. Their Workloads are in the same Workload watch: the RayService's own
(keyed by its uid) or, when Kueue admits it through its RayClusters, each cluster's."""
# Kueue copies no labels of ours onto Workloads, only the owner's uid: select on that label existing and
# key the Workloads by it.
WORKLOADS = WatchedResource(
    kind=WORKLOAD,
    group=api.WORKLOAD.group,
    version=api.WORKLOAD.version,
    plural=api.WORKLOAD.plural,
    label_selector=JOB_UID_LABEL,
    key_of=lambda obj: _labels(obj).get(JOB_UID_LABEL),
    selects=lambda obj: JOB_UID_LABEL in _labels(obj),
    essential=essential_workload,
)


def of_deployment(resource: WatchedResource, deployment: str) -> WatchedResource:
    """``resource`` (RayJobs, RayServices) narrowed to one Airflow deployment's objects
    (``kueue_ray.deployment``): a triggerer serves one deployment's waits, so it need not cache another's.
    Unchanged for "" (a wait whose task predates deployments) and for Workloads, which carry no labels of
    ours."""
    if not deployment or resource.kind == WORKLOAD:
        return resource
    return replace(
        resource,
        label_selector=f"{resource.label_selector},{DEPLOYMENT_LABEL}={deployment}",
        selects=lambda obj: resource.selects(obj) and _labels(obj).get(DEPLOYMENT_LABEL) == deployment,
    )
