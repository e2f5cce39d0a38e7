"""The RayJob state machine of KubeRay v1.7.0 (``rayjob_controller.go``), one reconcile at a time.

Each ``_on_<state>`` step mirrors one case of KubeRay's ``Reconcile`` switch: it reads the RayJob and
its children, edits a copy of ``status`` and may create or delete children. Afterwards, exactly as
upstream, ``check_backoff_limit`` (``rayjob_attempt``) turns a retryable ``Failed`` into ``Retrying`` and the status is
written only if ``jobStatus``, ``jobDeploymentStatus``, ``rayClusterStatus`` or
``jobStatusCheckFailureStartTime`` changed. Instead of KubeRay's 3 s polling, the reconcile is
triggered by watch events, by the simulated dashboard when a Ray job changes, and by timers for
deadlines and TTLs.
"""

from __future__ import annotations

import copy

from kubesim.clock import format_time
from kubesim.errors import ApiError
from kubesim.kuberay.context import JOBS, RAYCLUSTERS, RAYJOBS, Context, owner_reference, random_suffix
from kubesim.kuberay.dashboard import TERMINAL, Behaviour
from kubesim.kuberay.raycluster import dashboard_url
from kubesim.kuberay.rayjob_attempt import (
    active_deadline_passed,
    check_backoff_limit,
    pre_running_deadline_passed,
    schedule_deadlines,
    status_check_timed_out,
)
from kubesim.kuberay.submitter import create_submitter_job
from kubesim.kuberay.validation import validate_rayjob

FINALIZER = "ray.io/rayjob-finalizer"
OPERATOR_MANAGER = "ray.io/kuberay-operator"
DEPLOYMENT_TERMINAL = ("Complete", "Failed")

# How Go marshals an empty RayClusterStatus (quantities print "0", the head struct is not omitted).
ZERO_CLUSTER_STATUS = {
    "desiredCPU": "0",
    "desiredGPU": "0",
    "desiredMemory": "0",
    "desiredTPU": "0",
    "head": {},
}
_SKIP_WRITE = "skip"  # a step that returns this ends the reconcile without a status write (upstream `return`)


def reconcile_rayjob(ctx: Context, namespace: str, name: str) -> None:
    rayjob = ctx.store.get_or_none(RAYJOBS, name, namespace=namespace)
    if rayjob is None:
        return
    spec = rayjob.get("spec") or {}
    if spec.get("managedBy") not in (None, "", OPERATOR_MANAGER):
        return  # "Skipping RayJob managed by a custom controller", even when it is being deleted
    if rayjob["metadata"].get("deletionTimestamp"):
        _on_deletion(ctx, rayjob)
        return
    original = rayjob.get("status") or {}
    status = copy.deepcopy(original)

    invalid = validate_rayjob(rayjob)
    if invalid:
        event_reason, message = invalid
        status.update(
            {"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed", "message": message}
        )
        if _needs_write(original, status):
            ctx.event(rayjob, "Warning", event_reason, f"{namespace}/{name}: {message}")
            ctx.write_status(RAYJOBS, rayjob, status)
        return

    step = _STEPS.get(status.get("jobDeploymentStatus", ""))
    if step is None:  # ValidationFailed and unknown values: KubeRay only logs "Unknown JobDeploymentStatus"
        return
    if status.get("jobDeploymentStatus", "") == "":
        rayjob = _ensure_finalizer(ctx, rayjob)
    if step(ctx, rayjob, status) == _SKIP_WRITE:
        return
    check_backoff_limit(rayjob, status)
    if _needs_write(original, status):
        if status.get("jobDeploymentStatus") in DEPLOYMENT_TERMINAL:
            status["endTime"] = ctx.stamp(rayjob["metadata"]["uid"], "endTime")
        ctx.write_status(RAYJOBS, rayjob, status)
    schedule_deadlines(ctx, rayjob, status)


# -- the steps -------------------------------------------------------------------------------------
def _on_new(ctx: Context, rayjob: dict, status: dict) -> None:
    """``initRayJobStatusIfNeed``: ids for this attempt, a fresh startTime, then Initializing."""
    spec = rayjob.get("spec") or {}
    name = rayjob["metadata"]["name"]
    if spec.get("submissionMode", "K8sJobMode") != "InteractiveMode" and not status.get("jobId"):
        status["jobId"] = spec.get("jobId") or f"{name}-{random_suffix()}"
    if not status.get("rayClusterName"):
        selected = (spec.get("clusterSelector") or {}).get("ray.io/cluster")
        status["rayClusterName"] = selected or f"{name}-{random_suffix()}"
    status["jobStatus"] = status.get("jobStatus", "")
    status["jobDeploymentStatus"] = "Initializing"
    status["startTime"] = ctx.stamp(rayjob["metadata"]["uid"], "startTime")


def _on_initializing(ctx: Context, rayjob: dict, status: dict) -> str | None:
    spec = rayjob.get("spec") or {}
    if (
        _to_suspending(rayjob, status)
        or active_deadline_passed(ctx, rayjob, status)
        or pre_running_deadline_passed(ctx, rayjob, status)
    ):
        return None
    cluster = _get_or_create_cluster(ctx, rayjob, status)
    if not status.get("dashboardURL"):
        if (cluster.get("status") or {}).get("state") != "ready":
            status["rayClusterStatus"] = cluster.get("status") or {}
            return None
        status["dashboardURL"] = dashboard_url(cluster["metadata"]["name"], cluster["metadata"]["namespace"])
    mode = spec.get("submissionMode", "K8sJobMode")
    if mode == "InteractiveMode":
        status["jobDeploymentStatus"] = "Waiting"
        return None
    if mode == "K8sJobMode":
        _create_submitter_if_needed(ctx, rayjob, status, cluster)
    status["jobDeploymentStatus"] = "Running"
    return None


def _on_waiting(ctx: Context, rayjob: dict, status: dict) -> str | None:
    if pre_running_deadline_passed(ctx, rayjob, status):
        return None
    job_id = (rayjob.get("spec") or {}).get("jobId")
    if not job_id:
        return _SKIP_WRITE
    status["jobId"] = job_id
    status["jobDeploymentStatus"] = "Running"
    return None


def _on_running(ctx: Context, rayjob: dict, status: dict) -> str | None:  # noqa: C901 - mirrors upstream
    spec = rayjob.get("spec") or {}
    namespace = rayjob["metadata"]["namespace"]
    mode = spec.get("submissionMode", "K8sJobMode")
    if (
        _to_suspending(rayjob, status)
        or active_deadline_passed(ctx, rayjob, status)
        or status_check_timed_out(ctx, rayjob, status)
    ):
        return None
    cluster = _get_or_create_cluster(ctx, rayjob, status)
    finished_at = None
    if mode == "K8sJobMode":
        job = ctx.store.get(
            JOBS, rayjob["metadata"]["name"], namespace=namespace
        )  # 404 → retried by the manager
        failed = _job_condition(job, "Failed")
        if failed:
            status["jobDeploymentStatus"] = "Failed"
            if status.get("jobStatus") == "FAILED":
                status["reason"] = "AppFailed"
            else:
                status["reason"] = "SubmissionFailed"
                status["message"] = (
                    f"Job submission has failed. Reason: {failed.get('reason', '')}. Message: {failed.get('message', '')}"
                )
            return None
        finished = failed or _job_condition(job, "Complete")
        finished_at = finished.get("lastTransitionTime") if finished else None

    run = ctx.dashboards.get_job(namespace, status.get("rayClusterName", ""), status.get("jobId", ""))
    if run is None:
        if mode == "HTTPMode":
            return _submit_over_http(ctx, rayjob, status)
        if finished_at:
            status["jobDeploymentStatus"] = "Failed"
            status["reason"] = "AppFailed"
            status["message"] = "Submitter completed but Ray job not found in RayCluster."
            return None
        return _SKIP_WRITE
    status.pop("jobStatusCheckFailureStartTime", None)
    deployment, reason = "Running", ""
    terminal = run.status in TERMINAL and (finished_at is not None or mode == "HTTPMode")
    if terminal:
        deployment = "Complete"
        if run.status == "FAILED":
            deployment, reason = "Failed", "AppFailed"
    status["rayClusterStatus"] = cluster.get("status") or {}
    status["jobStatus"] = run.status
    status["jobDeploymentStatus"] = deployment
    _set_or_drop(status, "reason", reason)
    _set_or_drop(status, "message", run.message)
    info = dict(status.get("rayJobInfo") or {})
    if run.start_time:
        info["startTime"] = format_time(run.start_time)
    if run.end_time:
        info["endTime"] = format_time(run.end_time)
    status["rayJobInfo"] = info
    return None


def _on_suspending_or_retrying(ctx: Context, rayjob: dict, status: dict) -> str | None:
    """Delete the RayCluster and the submitter, wait until both are gone, then forget the attempt."""
    cluster_gone = _delete_cluster(ctx, rayjob, status)
    job_gone = _delete_submitter(ctx, rayjob)
    if not (cluster_gone and job_gone):
        return _SKIP_WRITE  # their DELETED events bring us back
    for field in (
        "rayClusterName",
        "dashboardURL",
        "jobId",
        "message",
        "reason",
        "jobStatusCheckFailureStartTime",
    ):
        status.pop(field, None)
    status["rayClusterStatus"] = ZERO_CLUSTER_STATUS
    status["rayJobInfo"] = {}
    status["jobStatus"] = ""
    status["jobDeploymentStatus"] = "Suspended" if status["jobDeploymentStatus"] == "Suspending" else ""
    return None


def _on_suspended(ctx: Context, rayjob: dict, status: dict) -> str | None:
    if (rayjob.get("spec") or {}).get("suspend"):
        return _SKIP_WRITE
    status["jobStatus"] = ""
    status["jobDeploymentStatus"] = ""
    return None


def _on_finished(ctx: Context, rayjob: dict, status: dict) -> str:
    """Complete / Failed: ``shutdownAfterJobFinishes`` deletes the RayCluster ``ttlSecondsAfterFinished`` later."""
    spec = rayjob.get("spec") or {}
    if spec.get("clusterSelector") or not spec.get("shutdownAfterJobFinishes") or not status.get("endTime"):
        return _SKIP_WRITE
    key = ("rayjob", rayjob["metadata"]["namespace"], rayjob["metadata"]["name"])
    remaining = (spec.get("ttlSecondsAfterFinished") or 0) - ctx.simulated_since(
        rayjob["metadata"]["uid"], "endTime", status["endTime"]
    )
    if remaining > 0:
        ctx.requeue_once(key, f"ttl:{status['endTime']}", remaining)
    else:
        _delete_cluster(ctx, rayjob, status)
    return _SKIP_WRITE


_STEPS = {
    "": _on_new,
    "Initializing": _on_initializing,
    "Waiting": _on_waiting,
    "Running": _on_running,
    "Suspending": _on_suspending_or_retrying,
    "Retrying": _on_suspending_or_retrying,
    "Suspended": _on_suspended,
    "Complete": _on_finished,
    "Failed": _on_finished,
}


# -- checks ----------------------------------------------------------------------------------------
def _to_suspending(rayjob: dict, status: dict) -> bool:
    if not (rayjob.get("spec") or {}).get("suspend"):
        return False
    status["jobDeploymentStatus"] = "Suspending"
    return True


def _needs_write(old: dict, new: dict) -> bool:
    """``updateRayJobStatus`` persists only when one of these moved."""
    return (
        old.get("jobStatus", "") != new.get("jobStatus", "")
        or old.get("jobDeploymentStatus", "") != new.get("jobDeploymentStatus", "")
        or _cluster_status_key(old) != _cluster_status_key(new)
        or old.get("jobStatusCheckFailureStartTime") != new.get("jobStatusCheckFailureStartTime")
    )


def _cluster_status_key(status: dict) -> dict:
    return {k: v for k, v in (status.get("rayClusterStatus") or {}).items() if k != "lastUpdateTime"}


# -- children --------------------------------------------------------------------------------------
def _ensure_finalizer(ctx: Context, rayjob: dict) -> dict:
    finalizers = rayjob["metadata"].get("finalizers") or []
    if FINALIZER in finalizers:
        return rayjob
    updated = copy.deepcopy(rayjob)
    updated["metadata"]["finalizers"] = [*finalizers, FINALIZER]
    return ctx.store.update(RAYJOBS, updated)


def _on_deletion(ctx: Context, rayjob: dict) -> None:
    """Stop the Ray job if it may still run, then drop the finalizer (GC removes the children)."""
    status = rayjob.get("status") or {}
    if status.get("jobStatus", "") not in TERMINAL:
        ctx.dashboards.stop_job(
            rayjob["metadata"]["namespace"], status.get("rayClusterName", ""), status.get("jobId", "")
        )
    finalizers = rayjob["metadata"].get("finalizers") or []
    if FINALIZER in finalizers:
        rayjob["metadata"]["finalizers"] = [f for f in finalizers if f != FINALIZER]
        ctx.store.update(RAYJOBS, rayjob)


def _get_or_create_cluster(ctx: Context, rayjob: dict, status: dict) -> dict:
    namespace, name = rayjob["metadata"]["namespace"], status["rayClusterName"]
    spec = rayjob.get("spec") or {}
    ctx.cluster_users[(namespace, name)] = ("rayjob", namespace, rayjob["metadata"]["name"])
    try:
        return ctx.store.get(RAYCLUSTERS, name, namespace=namespace)
    except ApiError as exc:
        if exc.code != 404:
            raise
        if spec.get("clusterSelector"):
            ctx.event(
                rayjob,
                "Warning",
                "RayClusterNotFound",
                f"RayCluster {namespace}/{name} set in the clusterSelector is not found. It must be created manually",
            )
            raise
    labels = dict(rayjob["metadata"].get("labels") or {})
    labels.update(
        {
            "ray.io/originated-from-cr-name": rayjob["metadata"]["name"],
            "ray.io/originated-from-crd": "RayJob",
            "ray.io/job-submission-mode": spec.get("submissionMode", "K8sJobMode"),
        }
    )
    cluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(rayjob["metadata"].get("annotations") or {}),
            "ownerReferences": [owner_reference(rayjob)],
        },
        "spec": copy.deepcopy(spec.get("rayClusterSpec") or {}),
    }
    created = ctx.store.create(RAYCLUSTERS, cluster, namespace=namespace)
    ctx.event(rayjob, "Normal", "CreatedRayCluster", f"Created RayCluster {namespace}/{name}")
    return created


def _create_submitter_if_needed(ctx: Context, rayjob: dict, status: dict, cluster: dict) -> None:
    namespace, name = rayjob["metadata"]["namespace"], rayjob["metadata"]["name"]
    try:
        ctx.store.get(JOBS, name, namespace=namespace)
        return
    except ApiError as exc:
        if exc.code != 404:
            raise
    head = (((cluster.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}
    image = ((head.get("containers") or [{}])[0]).get("image", "rayproject/ray:2.52.0")
    with_status = {**rayjob, "status": status}
    create_submitter_job(ctx, with_status, image)
    ctx.event(rayjob, "Normal", "CreatedRayJobSubmitter", f"Created Kubernetes Job {namespace}/{name}")


def _submit_over_http(ctx: Context, rayjob: dict, status: dict) -> str | None:
    """HTTPMode: KubeRay itself submits; a refused submission starts the status-check failure clock."""
    namespace = rayjob["metadata"]["namespace"]
    behaviour = Behaviour.for_attempt(rayjob, status.get("failed", 0))
    if behaviour.outcome == "SubmissionFailed":
        if not status.get("jobStatusCheckFailureStartTime"):
            status["jobStatusCheckFailureStartTime"] = ctx.stamp(rayjob["metadata"]["uid"], "checkFailure")
            return None
        return _SKIP_WRITE
    entrypoint = (rayjob.get("spec") or {}).get("entrypoint", "")
    ctx.dashboards.submit(namespace, status["rayClusterName"], status["jobId"], entrypoint, behaviour)
    if status.pop("jobStatusCheckFailureStartTime", None):
        return None
    return _SKIP_WRITE


def _delete_cluster(ctx: Context, rayjob: dict, status: dict) -> bool:
    """``deleteClusterResources``: True once the RayCluster is gone."""
    if (rayjob.get("spec") or {}).get("clusterSelector") or not status.get("rayClusterName"):
        return True
    namespace, name = rayjob["metadata"]["namespace"], status["rayClusterName"]
    cluster = ctx.store.get_or_none(RAYCLUSTERS, name, namespace=namespace)
    if cluster is None:
        return True
    if not cluster["metadata"].get("deletionTimestamp"):
        ctx.store.delete(RAYCLUSTERS, name, namespace=namespace)
        ctx.event(rayjob, "Normal", "DeletedRayCluster", f"Deleted cluster {namespace}/{name}")
    return False


def _delete_submitter(ctx: Context, rayjob: dict) -> bool:
    """``deleteSubmitterJob``: True once the submitter Job is gone (HTTPMode has none)."""
    if (rayjob.get("spec") or {}).get("submissionMode", "K8sJobMode") in ("HTTPMode", "SidecarMode"):
        return True
    namespace, name = rayjob["metadata"]["namespace"], rayjob["metadata"]["name"]
    job = ctx.store.get_or_none(JOBS, name, namespace=namespace)
    if job is None:
        return True
    if not job["metadata"].get("deletionTimestamp"):
        ctx.store.delete(JOBS, name, namespace=namespace, propagation_policy="Background")
        ctx.event(rayjob, "Normal", "DeletedRayJobSubmitter", f"Deleted submitter K8s Job {namespace}/{name}")
    return False


# -- small helpers ---------------------------------------------------------------------------------
def _job_condition(job: dict, condition_type: str) -> dict | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type and condition.get("status") == "True":
            return condition
    return None


def _set_or_drop(status: dict, field: str, value: str) -> None:
    if value:
        status[field] = value
    else:
        status.pop(field, None)
