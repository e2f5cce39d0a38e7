"""Kueue's ``batch/job`` integration, the parts that differ from the Ray kinds (pure functions over dicts).

A batch/v1 Job is a single pod set, ``main``, of ``parallelism`` pods (``completions`` if fewer) shaped by ``spec.template``. It is active while it has active pods, finished once its ``Complete`` or
``Failed`` condition is true, and its pods are ready once ``ready + succeeded`` reach that count.
``kubesim.kueue.jobs`` dispatches here for ``BATCH_JOB``; the naming, Workload, start and stop logic
stay shared.
"""

from __future__ import annotations

MAIN_POD_SET = "main"


def pod_count(job: dict) -> int:
    """Kueue's ``podsCount``: ``parallelism`` (the API server defaults it to 1), at most ``completions``."""
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
    completions = spec.get("completions")
    return count if completions is None else min(count, int(completions))


def template(job: dict) -> dict:
    return (job.get("spec") or {}).get("template") or {}


def is_active(job: dict) -> bool:
    """``IsActive``: the Job still has pods running (a suspended Job's are being deleted)."""
    return int((job.get("status") or {}).get("active") or 0) > 0


def finished(job: dict) -> tuple[bool, str, str]:
    """(finished, Finished-condition reason, message) from the Job's own terminal condition."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            reason = "Succeeded" if condition["type"] == "Complete" else "Failed"
            return True, reason, condition.get("message", "")
    return False, "", ""


def pods_ready(job: dict) -> bool:
    """``PodsReady``: every pod of the pod set is ready or already succeeded."""
    status = job.get("status") or {}
    ready = int(status.get("ready") or 0) + int(status.get("succeeded") or 0)
    return ready >= pod_count(job)
