"""When a RayJob attempt ends otherwise than by its Ray job: deadlines, the status-check timeout, retries.

KubeRay v1.7.0's ``rayjob_controller.go`` checks ``activeDeadlineSeconds``, ``preRunningDeadlineSeconds``
and ``DEFAULT_RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS`` on every reconcile and counts each finished attempt
against ``backoffLimit``; the state machine (``kubesim.kuberay.rayjob``) asks these, and instead of
KubeRay's 3 s polling ``schedule_deadlines`` sets timers for when they fall due.
"""

from __future__ import annotations

from kubesim.clock import parse_time
from kubesim.kuberay.context import Context

STATUS_CHECK_TIMEOUT = 300.0  # DEFAULT_RAYJOB_STATUS_CHECK_TIMEOUT_SECONDS


def active_deadline_passed(ctx: Context, rayjob: dict, status: dict) -> bool:
    return _deadline_passed(ctx, rayjob, status, "activeDeadlineSeconds", "DeadlineExceeded")


def pre_running_deadline_passed(ctx: Context, rayjob: dict, status: dict) -> bool:
    return _deadline_passed(ctx, rayjob, status, "preRunningDeadlineSeconds", "PreRunningDeadlineExceeded")


def _deadline_passed(ctx: Context, rayjob: dict, status: dict, field: str, reason: str) -> bool:
    """The attempt has run past ``spec.<field>``: ``Failed`` with KubeRay's reason and message."""
    deadline = (rayjob.get("spec") or {}).get(field)
    if deadline is None or _since_start(ctx, rayjob, status) < deadline:
        return False
    status["jobDeploymentStatus"] = "Failed"
    status["reason"] = reason
    status["message"] = (
        f"The RayJob has passed the {field}. StartTime: {_go_time(status['startTime'])}. "
        f"{field[0].upper()}{field[1:]}: {deadline}"
    )
    return True


def status_check_timed_out(ctx: Context, rayjob: dict, status: dict) -> bool:
    since = status.get("jobStatusCheckFailureStartTime")
    if (
        not since
        or ctx.simulated_since(rayjob["metadata"]["uid"], "checkFailure", since) < STATUS_CHECK_TIMEOUT
    ):
        return False
    status["jobDeploymentStatus"] = "Failed"
    status["reason"] = "JobStatusCheckTimeoutExceeded"
    status["message"] = (
        f"Job status checks have been failing since {parse_time(since).strftime('%Y-%m-%d %H:%M:%S')}; "
        f"exceeded timeout of {int(STATUS_CHECK_TIMEOUT)}s"
    )
    return True


def check_backoff_limit(rayjob: dict, status: dict) -> None:
    """``checkBackoffLimitAndUpdateStatusIfNeeded``: count the attempt; retry a failure if allowed."""
    failed = status.get("failed", 0)
    succeeded = status.get("succeeded", 0)
    if status.get("jobDeploymentStatus") == "Failed":
        failed += 1
    if status.get("jobStatus") == "SUCCEEDED" and status.get("jobDeploymentStatus") == "Complete":
        succeeded += 1
    status["failed"], status["succeeded"] = failed, succeeded
    backoff_limit = (rayjob.get("spec") or {}).get("backoffLimit")
    if (
        status.get("jobDeploymentStatus") == "Failed"
        and backoff_limit is not None
        and failed < backoff_limit + 1
    ):
        if status.get("reason") in ("DeadlineExceeded", "JobStatusCheckTimeoutExceeded"):
            return
        status["jobDeploymentStatus"] = "Retrying"


def schedule_deadlines(ctx: Context, rayjob: dict, status: dict) -> None:
    """Timers for the deadlines of the current attempt (KubeRay re-checks them every 3 s)."""
    state = status.get("jobDeploymentStatus")
    start = status.get("startTime")
    if not start or state not in ("Initializing", "Running", "Waiting"):
        return
    spec = rayjob.get("spec") or {}
    key = ("rayjob", rayjob["metadata"]["namespace"], rayjob["metadata"]["name"])
    elapsed = _since_start(ctx, rayjob, status)
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if spec.get(field) is not None and (field == "activeDeadlineSeconds" or state != "Running"):
            ctx.requeue_once(key, f"{field}:{start}", spec[field] - elapsed)
    failing_since = status.get("jobStatusCheckFailureStartTime")
    if failing_since:
        waited = ctx.simulated_since(rayjob["metadata"]["uid"], "checkFailure", failing_since)
        ctx.requeue_once(key, f"check:{failing_since}", STATUS_CHECK_TIMEOUT - waited)


def _since_start(ctx: Context, rayjob: dict, status: dict) -> float:
    return ctx.simulated_since(rayjob["metadata"]["uid"], "startTime", status["startTime"])


def _go_time(timestamp: str) -> str:
    """How Go prints a ``*metav1.Time`` with ``%v``: ``2026-08-20 10:00:00 +0000 UTC``."""
    return parse_time(timestamp).strftime("%Y-%m-%d %H:%M:%S +0000 UTC")
