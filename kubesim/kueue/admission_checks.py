"""Admission checks: Kueue v0.19's two-phase admission, and a simulated check controller that decides them.

A ClusterQueue's ``spec.admissionChecksStrategy.admissionChecks[{name, onFlavors}]`` names AdmissionChecks
(cluster-scoped ``kueue.x-k8s.io/v1beta2`` objects, each owned by a controller, e.g. the ProvisioningRequest
controller that asks the cluster autoscaler for GPU nodes). Kueue then admits in two steps:

1. the scheduler reserves quota (``QuotaReserved=True``) but does not admit; the Workload lists every check
   that applies to its flavors in ``status.admissionChecks[{name, state: Pending, message, ...}]`` and the
   job stays suspended;
2. once every check is ``Ready`` the Workload gets ``Admitted=True`` ("The workload is admitted") and the job
   starts. A ``Rejected`` check deactivates the Workload (``DeactivationTarget`` reason ``AdmissionCheck``,
   then ``spec.active=false`` and an eviction ``DeactivatedDueToAdmissionCheck``); a ``Retry`` check evicts
   it (reason ``AdmissionCheck``) and it queues again. Every eviction resets the checks to ``Pending``.

A never-admitted Workload gets no ``Admitted`` condition while its checks are pending (Kueue only writes
``Admitted`` when it flips). A ClusterQueue that names a missing or inactive AdmissionCheck is inactive.

**The simulated check controller** (``SIMULATED_CONTROLLER``): kubesim decides the checks whose
``spec.controllerName`` is ``kubesim.dev/admission-check``, as their annotations say (the AdmissionCheck is
cluster setup, not a RayJob, so nothing kubesim-only reaches a job):

=============================== ==============================================================================
``kubesim.dev/decision``        ``Ready`` (default), ``Rejected`` or ``Retry``
``kubesim.dev/after``           simulated seconds after the quota reservation the decision is taken (0)
``kubesim.dev/message``         the check's message with the decision
``kubesim.dev/pending-message`` the check's message while it waits (e.g. "Waiting for GPU nodes")
``kubesim.dev/retries``         with ``Retry``: how many attempts are sent back before the check is Ready (1)
=============================== ==============================================================================

It marks those AdmissionChecks ``Active`` (a check of an unknown controller stays inactive, so its
ClusterQueue is inactive, as on a real cluster without that controller).

This module holds the rules (pure); ``admission_check_controller`` applies them each pass.
"""

from __future__ import annotations

ADMISSION_CHECK_KEY = "admissionchecks.kueue.x-k8s.io"
SIMULATED_CONTROLLER = "kubesim.dev/admission-check"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
"""MultiKueue's admission checks: decided by ``kubesim.multikueue`` where a cluster runs it."""
DECISION = "kubesim.dev/decision"
AFTER = "kubesim.dev/after"
MESSAGE = "kubesim.dev/message"
PENDING_MESSAGE = "kubesim.dev/pending-message"
RETRIES = "kubesim.dev/retries"

PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"
REASON_ADMISSION_CHECK = "AdmissionCheck"
MSG_ACTIVE = "The admission check is active"


# ----------------------------------------------------------------------------------------------- pure rules


def cluster_queue_flavors(cq: dict) -> set[str]:
    return {
        flavor["name"]
        for group in (cq.get("spec") or {}).get("resourceGroups") or []
        for flavor in group.get("flavors") or []
    }


def strategy(cq: dict | None) -> dict[str, set[str]]:
    """Check name -> the flavors it applies to (all of the ClusterQueue's when ``onFlavors`` is empty)."""
    rules = (((cq or {}).get("spec") or {}).get("admissionChecksStrategy") or {}).get("admissionChecks") or []
    every = cluster_queue_flavors(cq or {})
    return {rule["name"]: set(rule.get("onFlavors") or ()) or set(every) for rule in rules}


def checks_for(wl: dict, cq: dict | None) -> set[str]:
    """``AdmissionChecksForWorkload``: with an admission, the checks of its flavors; without, only the
    checks that apply to every flavor of the ClusterQueue."""
    rules = strategy(cq)
    admission = (wl.get("status") or {}).get("admission")
    if admission:
        used = {
            flavor
            for assignment in admission.get("podSetAssignments") or []
            for flavor in (assignment.get("flavors") or {}).values()
        }
        return {name for name, flavors in rules.items() if flavors & used}
    every = cluster_queue_flavors(cq or {})
    return {name for name, flavors in rules.items() if flavors >= every}


def states(wl: dict) -> list[dict]:
    return list((wl.get("status") or {}).get("admissionChecks") or [])


def in_state(wl: dict, state: str) -> list[dict]:
    return [check for check in states(wl) if check.get("state") == state]


def all_ready(wl: dict) -> bool:
    """``HasAllChecksReady``: every listed check is Ready (no checks: trivially)."""
    return all(check.get("state") == READY for check in states(wl))


def has_all_required(wl: dict, cq: dict | None) -> bool:
    """``HasAllRequiredChecks``: every check the admission's flavors need is listed (in any state)."""
    listed = {check.get("name") for check in states(wl)}
    return checks_for(wl, cq) <= listed


def ready_to_admit(wl: dict, cq: dict | None) -> bool:
    """Quota reserved and nothing left to wait for: the Workload may be ``Admitted``."""
    return has_all_required(wl, cq) and all_ready(wl)


def describe(checks: list[dict], state: str) -> str:
    """``buildAdmissionChecksMessage``: ``AdmissionCheck in Rejected state: "gpu" (no capacity)``."""
    parts = []
    for check in sorted(checks, key=lambda c: c.get("name", "")):
        name = check.get("name", "")
        parts.append(f'"{name}" ({check["message"]})' if check.get("message") else f'"{name}"')
    noun = "AdmissionChecks" if len(checks) > 1 else "AdmissionCheck"
    return f"{noun} in {state} state: {'; '.join(parts)}"


def sync_states(wl: dict, wanted: set[str], now: str) -> None:
    """``syncAdmissionCheckConditions``: add the missing checks as Pending, drop the ones no longer
    wanted, keep them sorted by name."""
    status = wl.setdefault("status", {})
    current = {check["name"]: check for check in status.get("admissionChecks") or []}
    for name in wanted - set(current):
        current[name] = {"name": name, "state": PENDING, "message": "", "lastTransitionTime": now}
    kept = [current[name] for name in sorted(current) if name in wanted]
    if kept:
        status["admissionChecks"] = kept
    else:
        status.pop("admissionChecks", None)


def set_state(wl: dict, name: str, state: str, message: str, now: str) -> None:
    """``SetAdmissionCheckState``: the transition time moves only when the state changes."""
    for check in (wl.get("status") or {}).get("admissionChecks") or []:
        if check.get("name") == name:
            if check.get("state") != state:
                check["lastTransitionTime"] = now
            check["state"] = state
            check["message"] = message
            return


def reset_on_eviction(wl: dict, now: str) -> None:
    """``resetChecksOnEviction``: every decided check goes back to Pending; a Retry counts a retry."""
    for check in (wl.get("status") or {}).get("admissionChecks") or []:
        state = check.get("state")
        if state == PENDING:
            continue
        if state == RETRY:
            check["retryCount"] = int(check.get("retryCount") or 0) + 1
        check.update(
            state=PENDING,
            message=f"Reset to Pending after eviction. Previously: {state}",
            lastTransitionTime=now,
        )


def is_active(check: dict) -> bool:
    return any(
        c.get("type") == "Active" and c.get("status") == "True"
        for c in (check.get("status") or {}).get("conditions") or []
    )


def inactive_causes(cq: dict, admission_checks: dict[str, dict]) -> list[tuple[str, str]]:
    """(reason, message part) for each way the ClusterQueue's checks make it inactive, Kueue's wording."""
    names = sorted(strategy(cq))
    missing = [name for name in names if name not in admission_checks]
    inactive = [name for name in names if name in admission_checks and not is_active(admission_checks[name])]
    causes = []
    if missing:
        causes.append(
            ("AdmissionCheckNotFound", f"references missing AdmissionCheck(s): {','.join(missing)}")
        )
    if inactive:
        causes.append(
            ("AdmissionCheckInactive", f"references inactive AdmissionCheck(s): {','.join(inactive)}")
        )
    return causes


def simulated_decision(check: dict, state: dict) -> tuple[str, str]:
    """(state, message) the simulated controller gives the Workload's check ``state`` now that it is due."""
    annotations = (check.get("metadata") or {}).get("annotations") or {}
    decision = annotations.get(DECISION, READY)
    message = annotations.get(MESSAGE, "")
    if decision == RETRY:
        try:
            retries = int(annotations.get(RETRIES, "1"))
        except ValueError:
            retries = 1
        if int(state.get("retryCount") or 0) >= retries:
            return READY, ""
        return RETRY, message
    if decision not in (READY, REJECTED):
        decision = READY
    return decision, message


def simulated_delay(check: dict) -> float:
    try:
        return max(0.0, float(((check.get("metadata") or {}).get("annotations") or {}).get(AFTER, "0")))
    except ValueError:
        return 0.0
