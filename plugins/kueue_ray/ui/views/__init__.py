"""What the two Kueue pages show, as JSON: pure functions of the cluster's objects and of what the user
may read.

* ``queues_view``: every ClusterQueue with its cohort, its quota per flavor and resource (nominal quota,
  borrowing and lending limits, what is admitted and reserved), its pending workloads in Kueue's order
  with their positions, and its admitted workloads with their age.
* ``task_view``: the RayJob one task instance submitted or waits for: its Workload, queues, priority,
  phase in words, queue position, timeline spans, and links; for a deploy task, its RayService the same
  way (``service_task_view``), with the active and pending Ray clusters.

Security is decided here, once: a workload is described (names, DAG, run, task, links, Kueue's messages)
only when its RayJob's annotations name a DAG the user may read. Everything else (other DAGs, jobs not
started by Airflow) appears only in counts. A preemptor is named under the same rule.

The package, one module per page or tab: ``queues``, ``rayjob`` (``task_view``, which hands a deploy task
to ``rayservice``), ``rayservice``, and ``common`` for what they share (links, owners, the readers of
objects, position and phase).
"""

from kueue_ray.ui.views.common import (
    APP_PREFIX,
    FOREIGN_OWNER,
    HIDDEN_OWNER,
    QUEUES_ROUTE,
    Links,
    TaskRef,
    describe_owner,
)
from kueue_ray.ui.views.queues import queues_view, quota_rows
from kueue_ray.ui.views.rayjob import task_cluster_queue, task_view
from kueue_ray.ui.views.rayservice import (
    find_rayservice,
    service_cluster_queue,
    service_task_view,
)

__all__ = [
    "APP_PREFIX",
    "FOREIGN_OWNER",
    "HIDDEN_OWNER",
    "QUEUES_ROUTE",
    "Links",
    "TaskRef",
    "describe_owner",
    "find_rayservice",
    "queues_view",
    "quota_rows",
    "service_cluster_queue",
    "service_task_view",
    "task_cluster_queue",
    "task_view",
]
