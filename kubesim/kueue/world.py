"""What the Kueue controller decides over: the kinds it watches, and one read of their objects (``World``).

Apart from the informer cache (``kubesim.kueue.cache``) so that the pure rules which read a ``World``
(queue status, admission checks, the visibility API) depend on it and not on the cache's machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kubesim.kueue.admission_checks import ADMISSION_CHECK_KEY
from kubesim.kueue.jobs import JOB_KINDS, WORKLOAD_KEY

CQ_KEY = "clusterqueues.kueue.x-k8s.io"
LQ_KEY = "localqueues.kueue.x-k8s.io"
RF_KEY = "resourceflavors.kueue.x-k8s.io"
WPC_KEY = "workloadpriorityclasses.kueue.x-k8s.io"
COHORT_KEY = "cohorts.kueue.x-k8s.io"
NAMESPACE_KEY = "namespaces"
AC_KEY = ADMISSION_CHECK_KEY
CONFIG_KEYS = (CQ_KEY, LQ_KEY, RF_KEY, WPC_KEY, COHORT_KEY, NAMESPACE_KEY, AC_KEY)
WATCHED_KEYS = (*JOB_KINDS, WORKLOAD_KEY, *CONFIG_KEYS)


@dataclass
class World:
    """One read of every object the controller decides over (by name; LocalQueues by (ns, name))."""

    flavors: dict[str, dict] = field(default_factory=dict)
    cluster_queues: dict[str, dict] = field(default_factory=dict)
    cohorts: dict[str, dict] = field(default_factory=dict)
    local_queues: dict[tuple[str, str], dict] = field(default_factory=dict)
    priority_classes: dict[str, dict] = field(default_factory=dict)
    admission_checks: dict[str, dict] = field(default_factory=dict)
    namespace_labels: dict[str, dict] = field(default_factory=dict)
    workloads: list[dict] = field(default_factory=list)

    @classmethod
    def read(cls, store) -> World:
        """The current objects, read afresh from the store (for when no controller keeps a view)."""
        return cls.build(lambda key: store.list(key)[0])

    @classmethod
    def build(cls, items: Callable[[str], list[dict]]) -> World:
        """A World from ``items(key)``, which lists a kind's objects in the store's list order."""

        def by_name(key: str) -> dict[str, dict]:
            return {o["metadata"]["name"]: o for o in items(key)}

        return cls(
            flavors=by_name(RF_KEY),
            cluster_queues=by_name(CQ_KEY),
            cohorts=by_name(COHORT_KEY),
            local_queues={(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in items(LQ_KEY)},
            priority_classes=by_name(WPC_KEY),
            admission_checks=by_name(AC_KEY),
            namespace_labels={
                n: o["metadata"].get("labels") or {} for n, o in by_name(NAMESPACE_KEY).items()
            },
            workloads=items(WORKLOAD_KEY),
        )

    def local_queue_of(self, wl: dict) -> dict | None:
        return self.local_queues.get(
            (wl["metadata"]["namespace"], (wl.get("spec") or {}).get("queueName", ""))
        )


def int_or_zero(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
