"""Errors that tell the DAG author what to change.

Every error names the offending field, the value found there and a concrete fix, because the person
reading it is looking at a failed task log, not at this code. ``str(error)`` carries all three.
"""

from __future__ import annotations

from typing import Any


class KueueRayError(Exception):
    """Base class: a problem with a field, the value found there and how to fix it."""

    def __init__(self, problem: str, *, field: str, value: Any, fix: str) -> None:
        self.problem = problem
        self.field = field
        self.value = value
        self.fix = fix
        super().__init__(f"{field}: {problem} (got {value!r}). Fix: {fix}")


class ManifestError(KueueRayError):
    """The RayJob / RayService body (or the template that produced it) is not acceptable.

    Raised before any API call, so a bad manifest never reaches the cluster.
    """


class PolicyError(KueueRayError):
    """The priority requested for a run is not allowed by the DAG's priority policy."""


class PreflightError(KueueRayError):
    """The cluster cannot run this RayJob (or RayService) as configured; raised before anything is
    created."""


class ClusterAccessError(Exception):
    """The cluster refuses what the task needs (401/403), or does not serve an API it needs (Kueue,
    KubeRay); ``str`` is the whole explanation: what, to whom, the check and the fix."""
