"""What a finished wait leaves behind: the XComs (their keys are named here) and the closing lines of the
task log.

The same whether the task ends in the triggerer (a successful RayJob: ``RayJobTrigger`` yields Airflow's
``TaskSuccessEvent`` carrying these XComs, and no worker runs again) or resumes on a worker (``finish``:
failures, and tasks that must run user code at the end). So downstream tasks, the extra links and the task
log cannot tell the two apart.

Everything but ``finish`` and ``push_xcoms`` is pure: callers pass in what needs I/O (the preemptor RayJob, the driver log
tail). DAG files import this module through the operators, so at module level it imports only ``verdicts``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from kueue_ray.verdicts import UNREADABLE, VerdictStatus

if TYPE_CHECKING:
    from airflow.sdk import Context

RAYJOB_XCOM_KEY = "rayjob"
"""The XCom the operator and the sensor push with what they know about their RayJob (``rayjob_details``);
the extra links and the submit task's sensor read it."""
TIMELINE_XCOM_KEY = "timeline"
"""The XCom with what happened while waiting (``kueue_ray.timeline.Timeline.to_dict``)."""
RAYSERVICE_XCOM_KEY = "rayservice"
"""The XCom the deploy operator pushes with its RayService, what it waits for and, at the end, the
timeline; the Kueue tab reads it."""
RETURN_VALUE_XCOM_KEY = "return_value"
"""Airflow's key for what ``execute`` / ``execute_complete`` return (``XCOM_RETURN_KEY``)."""
LOG_TAIL_HEADER = "Last %d lines of the Ray driver (submitter) log:\n%s"


def rayjob_details(rayjob: dict, payload: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """What the links and downstream tasks need to know about the RayJob (the ``rayjob`` XCom)."""
    metadata = rayjob.get("metadata") or {}
    status = rayjob.get("status") or {}
    details = {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "ray_cluster": status.get("rayClusterName"),
        "job_id": status.get("jobId"),
        "dashboard_url": status.get("dashboardURL"),
        **extra,
    }
    for key in ("workload_name", "cluster_queue", "ray_cluster", "job_id", "dashboard_url", "worker_cluster"):
        if payload and payload.get(key):
            details[key] = payload[key]
    return details


def event_details(event: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """The ``rayjob`` XCom once waiting is over, from the event payload."""
    identity = {"metadata": {key: event.get(key) for key in ("name", "namespace", "uid")}}
    return rayjob_details(identity, event, **extra)


def summary_lines(event: Mapping[str, Any], preemptor_of: Callable[[str], dict | None]) -> list[str]:
    """The closing lines of the task log: how long it queued and ran, then each preemption (its preemptor
    named, via ``preemptor_of(job_uid)``) and each other eviction."""
    from kueue_ray.narration import name_preemptor, preemptor_job_uid, readable_quantities

    timeline = event.get("timeline") or {}
    lines = [
        f"RayJob {event['namespace']}/{event['name']} ended {event.get('phase') or event['status']} after "
        f"{timeline.get('queued_seconds') or 0.0:.1f}s queued "
        f"({timeline.get('awaiting_checks_seconds') or 0.0:.1f}s of it waiting for admission checks) and "
        f"{timeline.get('running_seconds') or 0.0:.1f}s running; "
        f"{len(timeline.get('admissions') or ())} admission(s), "
        f"{len(timeline.get('preemptions') or ())} preemption(s), "
        f"{timeline.get('pods_ready_eviction_count') or 0} eviction(s) for pods not ready"
    ]
    workers = worker_clusters(event)
    if workers:
        from kueue_ray.multikueue import worker_connection_id

        noun = "worker cluster" if len(workers) == 1 else "worker clusters, in turn,"
        lines.append(
            f"RayJob {event['namespace']}/{event['name']} was dispatched by MultiKueue to {noun} "
            f"{', '.join(workers)} (its Ray cluster, driver log and dashboard are on {workers[-1]}, "
            f"reached through the Airflow connection {worker_connection_id(workers[-1])!r})"
        )
    for preemption in timeline.get("preemptions") or ():
        message = preemption.get("message") or ""
        uid = preemptor_job_uid(message)
        told = readable_quantities(name_preemptor(message, preemptor_of(uid) if uid else None))
        lines.append(f"  preempted at {preemption.get('at')}: {told}")
    for eviction in timeline.get("evictions") or ():
        lines.append(
            f"  evicted at {eviction.get('at')} ({eviction.get('reason')}): {eviction.get('message')}"
        )
    return lines


def worker_clusters(event: Mapping[str, Any]) -> list[str]:
    """The MultiKueue worker clusters the RayJob ran on, in order (each admission's, then the last seen).

    >>> worker_clusters({"timeline": {"admissions": [{"worker_cluster": "w1"}, {"worker_cluster": "w2"}]}})
    ['w1', 'w2']
    """
    timeline = event.get("timeline") or {}
    named = [a.get("worker_cluster") for a in timeline.get("admissions") or ()]
    named += [timeline.get("worker_cluster"), event.get("worker_cluster")]
    return list(dict.fromkeys(w for w in named if w))


def driver_log_tail(task: Any, event: Mapping[str, Any], lines: int) -> str | None:
    """The driver log's last ``lines`` through ``task.hook``, or, for a RayJob MultiKueue ran on a worker
    cluster, through that worker's connection (``kueue_ray.multikueue.worker_connection_id``), else as the
    wait followed it there (MultiKueue deletes the worker's copy once it finished); without such a connection
    None, and the task log says which connection to create."""
    name, namespace, worker = event["name"], event["namespace"], event.get("worker_cluster")
    if not worker:
        return task.hook.submitter_log_tail(name, namespace, lines)
    from airflow.sdk.exceptions import AirflowNotFoundException

    from kueue_ray.multikueue import copy_gone, last_lines, missing_connection, worker_connection_id

    try:
        worker_hook = type(task.hook)(kubernetes_conn_id=worker_connection_id(worker))
        fresh = worker_hook.submitter_log_tail(name, namespace, lines)
    except AirflowNotFoundException:
        task.log.warning(missing_connection(worker, "the Ray driver log"))
        return None
    if fresh is None:
        from kueue_ray.worker_log import WORKER_TAIL_KEY

        fresh = last_lines(event.get(WORKER_TAIL_KEY), lines)
    if fresh is None:
        task.log.info(copy_gone(worker))
    return fresh


def reference(event: Mapping[str, Any]) -> dict[str, Any]:
    """What the task returns on success: enough to find the RayJob again."""
    return {"name": event["name"], "namespace": event["namespace"], "uid": event["uid"]}


def finish(task: Any, context: Context, event: Mapping[str, Any], *, log_tail_lines: int) -> dict:
    """End of waiting on a worker (operator and sensor): timeline to XCom, closing lines and the driver log
    tail to the task log (through ``task.hook``), raise on anything but success."""
    from airflow.sdk.exceptions import AirflowException

    from kueue_ray.worker_wait import find_rayjob

    context["ti"].xcom_push(key=TIMELINE_XCOM_KEY, value=event.get("timeline") or {})
    name, namespace, hook = event["name"], event["namespace"], task.hook
    for line in summary_lines(event, lambda uid: find_rayjob(hook, namespace, uid)):
        task.log.info(line)
    if (
        log_tail_lines > 0
        and event.get("status") != VerdictStatus.DELETED
        and event.get("status") not in UNREADABLE
    ):
        tail = driver_log_tail(task, event, log_tail_lines)
        if tail:
            task.log.info(LOG_TAIL_HEADER, log_tail_lines, tail)
    if event["status"] != VerdictStatus.SUCCESS:
        raise AirflowException(
            f"RayJob {namespace}/{name} did not succeed ({event['status']}, {event.get('reason')}): "
            f"{event.get('message')}"
        )
    return reference(event)


@dataclass(frozen=True)
class TriggerEnding:
    """How the trigger ends a successful task itself: what the worker would have pushed and logged.

    Travels in the trigger's kwargs as a plain dict (``to_dict`` / ``from_dict``), so it is decided on
    the worker when the task defers, where the operator is known.

    :param log_tail_lines: driver (submitter) log lines to copy into the task log; 0 reads none.
    :param rayjob_extra: keys the ``rayjob`` XCom carries besides the RayJob's own (the operator's queue
        and priority).
    :param links: extra-link XCom key -> its URL template (None: the default link), rendered from the
        ``rayjob`` XCom as ``kueue_ray.links.dashboard_url`` renders it on a worker.
    :param push_return_value: push ``return_value`` (the operator's ``do_xcom_push``).
    """

    log_tail_lines: int = 50
    rayjob_extra: dict[str, Any] = field(default_factory=dict)
    links: dict[str, str | None] = field(default_factory=dict)
    push_return_value: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TriggerEnding:
        return cls(
            log_tail_lines=int(data.get("log_tail_lines") or 0),
            rayjob_extra=dict(data.get("rayjob_extra") or {}),
            links=dict(data.get("links") or {}),
            push_return_value=bool(data.get("push_return_value", True)),
        )

    def xcoms(self, event: Mapping[str, Any], render_link: Callable[[str | None, dict], str]) -> dict:
        """Every XCom the task leaves on success, as the worker's ``execute_complete`` and extra links
        push them."""
        details = event_details(event, **self.rayjob_extra)
        xcoms: dict[str, Any] = {TIMELINE_XCOM_KEY: event.get("timeline") or {}, RAYJOB_XCOM_KEY: details}
        for key, template in self.links.items():
            xcoms[key] = render_link(template, details)
        if self.push_return_value:
            xcoms[RETURN_VALUE_XCOM_KEY] = reference(event)
        return xcoms


async def push_xcoms(ti: Any, xcoms: Mapping[str, Any]) -> None:
    """Store a task ending in the triggerer's XComs exactly as a worker's ``xcom_push`` does: through
    Airflow's XCom class (and so any custom XCom backend) and the triggerer's channel to the API server.

    Not as ``TaskSuccessEvent(xcoms=...)``: Airflow 3.3.2 stores those JSON-encoded once more than a
    worker's (``TaskInstance.xcom_push`` serializes, the column serializes again), so a downstream
    task would pull a string where it pulled a dict before.

    All are sent at once: the channel carries concurrent requests, so the success waits for about one
    round trip to the supervisor rather than one per XCom.
    """
    import asyncio

    from airflow.sdk.execution_time.xcom import XCom

    map_index = getattr(ti, "map_index", -1)
    coordinates = {
        "dag_id": ti.dag_id,
        "task_id": ti.task_id,
        "run_id": ti.run_id,
        "map_index": -1 if map_index is None else map_index,
    }
    await asyncio.gather(*(XCom.aset(key, value, **coordinates) for key, value in xcoms.items()))
