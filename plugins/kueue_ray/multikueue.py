"""What Kueue's MultiKueue (v0.19) says on a manager cluster's objects, in one place (pure).

A MultiKueue manager holds the queues; an admission check of controller ``kueue.x-k8s.io/multikueue``
dispatches each Workload to one worker cluster, copies the RayJob there and mirrors its status back. On the
manager, the RayJob carries ``spec.managedBy: kueue.x-k8s.io/multikueue`` (so the manager's KubeRay leaves
it alone) and its Workload names the worker in ``status.clusterName`` and in the check's message
(``workload.go`` syncAdmittingRemoteState: ``The workload was admitted on "worker1"``).

>>> wl = {"status": {"clusterName": "worker1", "admissionChecks": [
...     {"name": "mk", "state": "Ready", "message": 'The workload was admitted on "worker1"'}]}}
>>> worker_cluster(wl), worker_cluster(None)
('worker1', None)
>>> worker_cluster({"status": {"admissionChecks": [
...     {"name": "mk", "state": "Ready", "message": 'The workload was admitted on "worker2"'}]}})
'worker2'
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from kueue_ray.errors import KueueRayError, PreflightError

CONTROLLER = "kueue.x-k8s.io/multikueue"
"""The AdmissionCheck ``spec.controllerName`` of MultiKueue, and the RayJob ``spec.managedBy`` value of a
job MultiKueue runs on a worker (KubeRay v1.7's CRD allows exactly this value besides ``ray.io/kuberay-operator``)."""

_ADMITTED_ON = re.compile(r'^The workload was admitted on "(?P<cluster>[^"]+)"')
_MESSAGES = (
    "The workload was admitted on ",
    "Admitting remote ",
    "Workload evicted on worker cluster",
    "No multikueue adapter found",
    "Admission check is Ready but no admitting cluster is recorded",
)
"""How MultiKueue's own check messages begin (``workload.go``: syncAdmittingRemoteState, reconcileGroup,
Reconcile), to tell its check from others on a Workload whose RayJob MultiKueue manages."""


def multikueue_config_name(admission_check: Mapping | None) -> str | None:
    """The MultiKueueConfig a MultiKueue AdmissionCheck's ``spec.parameters`` names (None without one).

    >>> multikueue_config_name({"spec": {"controllerName": CONTROLLER, "parameters": {
    ...     "apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "workers"}}})
    'workers'
    """
    parameters = ((admission_check or {}).get("spec") or {}).get("parameters") or {}
    if parameters.get("kind") != "MultiKueueConfig" or not parameters.get("name"):
        return None
    return str(parameters["name"])


def workers_refusal(cluster_queue: str, verdicts: Mapping[str, KueueRayError]) -> PreflightError:
    """The preflight error for a RayJob none of the worker clusters of ``cluster_queue``'s MultiKueue check
    can ever admit, from each worker's own refusal: its field and value are the first worker's, the problem
    and the fix name every worker (a fix shared by all is said once).

    >>> big = lambda cq: PreflightError(f"RayJob needs 4 CPU but ClusterQueue {cq} provides at most 2",
    ...     field="resources[cpu]", value="4", fix="raise nominalQuota or request less CPU")
    >>> error = workers_refusal("mk-cq", {"w1": big("gpu"), "w2": big("gpu")})
    >>> error.field, error.value
    ('resources[cpu]', '4')
    >>> print(error.problem)  # doctest: +NORMALIZE_WHITESPACE
    no MultiKueue worker cluster of ClusterQueue mk-cq (w1, w2) can ever admit it: on w1, RayJob needs 4 CPU
    but ClusterQueue gpu provides at most 2; on w2, RayJob needs 4 CPU but ClusterQueue gpu provides at most 2
    >>> error.fix
    'on w1 or w2, raise nominalQuota or request less CPU'
    """
    first = next(iter(verdicts.values()))
    problems = "; ".join(f"on {worker}, {error.problem}" for worker, error in verdicts.items())
    fixes: dict[str, list[str]] = {}
    for worker, error in verdicts.items():
        fixes.setdefault(error.fix, []).append(worker)
    fix = "; or ".join(f"on {' or '.join(workers)}, {each}" for each, workers in fixes.items())
    return PreflightError(
        f"no MultiKueue worker cluster of ClusterQueue {cluster_queue} ({', '.join(verdicts)}) can ever "
        f"admit it: {problems}",
        field=first.field,
        value=first.value,
        fix=fix,
    )


def managed_by_multikueue(rayjob: Mapping | None) -> bool:
    """Whether the RayJob is one MultiKueue dispatches (a manager's copy; the worker's copy has no
    ``managedBy``).

    >>> managed_by_multikueue({"spec": {"managedBy": CONTROLLER}}), managed_by_multikueue({"spec": {}})
    (True, False)
    """
    return ((rayjob or {}).get("spec") or {}).get("managedBy") == CONTROLLER


def worker_cluster(workload: Mapping | None) -> str | None:
    """The worker cluster (its MultiKueueCluster's name) that runs the Workload's job: ``status.clusterName``
    (set once the check is Ready, cleared when Kueue evicts the Workload for a re-dispatch), else the name a
    Ready check's message gives; None before dispatch and on a cluster without MultiKueue."""
    status = (workload or {}).get("status") or {}
    if status.get("clusterName"):
        return str(status["clusterName"])
    for check in status.get("admissionChecks") or ():
        match = _ADMITTED_ON.match(str(check.get("message") or ""))
        if match and check.get("state") == "Ready":
            return match["cluster"]
    return None


def multikueue_check(checks: list[dict[str, str]], managed: bool) -> dict[str, str] | None:
    """MultiKueue's check among a Workload's ``[{"name", "state", "message"}]``
    (``kueue_ray.workload.admission_checks``): the one whose message is MultiKueue's, else, for a RayJob
    MultiKueue manages (``managed``), its only check. None when there is none to tell apart.

    >>> multikueue_check([{"name": "mk", "state": "Pending", "message": ""}], managed=True)
    {'name': 'mk', 'state': 'Pending', 'message': ''}
    >>> multikueue_check([{"name": "mk", "state": "Pending", "message": ""}], managed=False) is None
    True
    """
    for check in checks:
        if check.get("message", "").startswith(_MESSAGES):
            return check
    if managed and len(checks) == 1:
        return checks[0]
    return None


FOLLOWED_LINES = 200
"""Driver log lines a wait keeps while following the log on a worker (``kueue_ray.worker_log``) for a task
that resumes on an Airflow worker; one that ends in the triggerer keeps its ``log_tail_lines``."""

WORKER_CONNECTION_PREFIX = "kueue_worker_"
"""The Airflow ``kubernetes`` connection of a worker cluster is ``kueue_worker_<MultiKueueCluster name>``,
its dashes and dots spelled as underscores (so that its environment variable,
``AIRFLOW_CONN_KUEUE_WORKER_<NAME>``, is one a shell can set)."""


def worker_connection_id(cluster: str) -> str:
    """The Airflow connection to reach MultiKueue worker ``cluster`` through (driver logs, dashboard link).

    >>> worker_connection_id("gpu-east.eu")
    'kueue_worker_gpu_east_eu'
    """
    return WORKER_CONNECTION_PREFIX + re.sub(r"[^0-9A-Za-z_]", "_", cluster)


def missing_connection(cluster: str, what: str) -> str:
    """The task-log line when ``what`` (e.g. "the Ray driver log") lives on a worker cluster Airflow has no
    connection to: which connection to create.

    >>> missing_connection("w1", "the Ray driver log")  # doctest: +NORMALIZE_WHITESPACE
    "No Airflow connection 'kueue_worker_w1' for MultiKueue worker cluster 'w1', where the Ray job ran:
    the Ray driver log is not shown. Create a 'kubernetes' connection named 'kueue_worker_w1' with that
    worker's kubeconfig (e.g. the environment variable AIRFLOW_CONN_KUEUE_WORKER_W1) to see it here."
    """
    conn_id = worker_connection_id(cluster)
    return (
        f"No Airflow connection {conn_id!r} for MultiKueue worker cluster {cluster!r}, where the Ray job "
        f"ran: {what} is not shown. Create a 'kubernetes' connection named {conn_id!r} with that worker's "
        f"kubeconfig (e.g. the environment variable AIRFLOW_CONN_{conn_id.upper()}) to see it here."
    )


def last_lines(text: str | None, lines: int) -> str | None:
    """The last ``lines`` lines of ``text`` (None stays None).

    >>> last_lines("a\\nb\\nc\\n", 2)
    'b\\nc\\n'
    """
    if text is None:
        return None
    return "".join(text.splitlines(keepends=True)[-lines:]) if lines > 0 else ""


def copy_gone(cluster: str) -> str:
    """The task-log line when the worker had no driver log to give: MultiKueue deletes the worker's copy of a
    finished job (``workload.go`` reconcileGroup, step 2: "Delete all remote workloads when the local
    workload is finished"), submitter pod included, usually before a wait that saw it finish can read it."""
    return (
        f"No Ray driver log found on MultiKueue worker cluster {cluster!r}: MultiKueue deletes the worker's copy "
        "of the RayJob, and its submitter pod with it, as soon as the job finishes"
    )
