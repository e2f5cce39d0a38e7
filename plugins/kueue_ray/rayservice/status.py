"""What a RayService, its Ray clusters and their Kueue Workloads mean, as one phase a DAG author can act on.

KubeRay (v1.7) keeps up to two Ray clusters per RayService: the *active* one, which the Serve Service
sends traffic to, and a *pending* one it prepares for a new cluster config (``status.activeServiceStatus``
/ ``pendingServiceStatus``, each with the cluster's status and its Serve applications). Once every Serve
application of the pending cluster is RUNNING, KubeRay switches traffic to it and it becomes the active
one; the old cluster is deleted after a delay. The cluster being brought up, pending if there is one, else
active, is the *target*: it is what waiting is about.

Kueue (v0.19) admits either the RayService as a whole (its shipped configuration: one Workload whose
``kueue.x-k8s.io/job-uid`` is the RayService's uid) or, with ``ray.io/rayservice`` left out of its
``integrations.frameworks``, each RayCluster KubeRay creates for it (a Workload per cluster, owned by the
RayCluster). ``observe_service`` is given the candidate Workloads and picks the target cluster's own, else
the RayService's.

The order of the checks:

1. KubeRay refused the spec (``Ready`` reason ``ValidationFailed`` / ``InitializingTimeout``): FAILED.
2. KubeRay has not acted on the spec the operator wrote yet (``observedGeneration``): SUBMITTED.
3. Serve said no on the target cluster: an application ``DEPLOY_FAILED``, or ``UNHEALTHY`` (the application
   or a deployment), with Serve's message: final for this spec.
4. Kueue deactivated the target's Workload (or an admission check rejected it): DEACTIVATED.
5. Kueue evicted it while the cluster still runs: PREEMPTED / PODS_NOT_READY / EVICTED.
6. Serving: no pending cluster, the active one ready (and not the one an upgrade replaces), every
   application RUNNING with every deployment HEALTHY, ``Ready=True``: SERVING, the success.
7. Quota reserved: AWAITING_CHECKS until admitted, then ADMITTED while the cluster starts and DEPLOYING
   while Serve deploys on it.
8. No Workload: BLOCKED when Kueue took the RayService's Workload away for a new cluster config and will
   create none while the old cluster serves (the shipped configuration cannot upgrade a serving
   RayService's cluster); else SUBMITTED.
9. Not admitted: INADMISSIBLE (waiting cannot help) or QUEUED, in Kueue's words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from kueue_ray import workload as wl
from kueue_ray.phases import TERMINAL_SERVICE_PHASES, ServicePhase
from kueue_ray.status import describe_waiting_for_checks, is_inadmissible, pods_not_ready_hint

SERVICE_WORKLOAD = "service"
CLUSTER_WORKLOADS = "cluster"


@dataclass(frozen=True)
class ServiceObservation:
    """One moment of a RayService's life, as the deploy operator's trigger sees it."""

    phase: ServicePhase
    reason: str
    message: str
    target_cluster: str | None = None
    """The cluster being brought up (pending, else active)."""
    target_role: str | None = None
    """``pending`` or ``active``."""
    active_cluster: str | None = None
    pending_cluster: str | None = None
    admitted_by: str | None = None
    """Whose Workload Kueue admits: ``service`` (the RayService's), ``cluster`` (each RayCluster's)."""
    workload_name: str | None = None
    cluster_queue: str | None = None
    flavors: dict[str, dict[str, str]] = field(default_factory=dict)
    preemptions: int = 0
    pods_ready_evictions: int = 0
    last_preemption: dict[str, str] | None = None
    quota_reserved_at: str | None = None
    admitted_at: str | None = None
    applications: dict[str, str] = field(default_factory=dict)
    """Application -> Serve status on the target cluster."""
    pods_ready_timeout: float | None = None

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_SERVICE_PHASES

    @property
    def serving(self) -> bool:
        return self.phase is ServicePhase.SERVING

    def describe(self) -> str:
        """One log line: ``QUEUED (Pending): couldn't assign flavors ...``."""
        text = f"{self.phase.value} ({self.reason})" if self.reason else self.phase.value
        return f"{text}: {self.message}" if self.message else text

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase.value,
            "reason": self.reason,
            "message": self.message,
            "target_cluster": self.target_cluster,
            "target_role": self.target_role,
            "active_cluster": self.active_cluster,
            "pending_cluster": self.pending_cluster,
            "admitted_by": self.admitted_by,
            "workload_name": self.workload_name,
            "cluster_queue": self.cluster_queue,
            "preemptions": self.preemptions,
            "pods_ready_evictions": self.pods_ready_evictions,
            "applications": dict(self.applications),
        }


def _conditions(obj: dict | None) -> dict[str, dict]:
    """KubeRay's conditions of a RayService by type (a Workload's are read through ``kueue_ray.workload``)."""
    return {c.get("type"): c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def _newest(workloads: list[dict]) -> dict | None:
    return max(
        workloads, key=lambda w: (w.get("metadata") or {}).get("creationTimestamp") or "", default=None
    )


def service_workload(service: dict, workloads: list[dict]) -> dict | None:
    """The Workload Kueue made for the RayService itself (shipped configuration), if any."""
    uid = (service.get("metadata") or {}).get("uid")
    return _newest([w for w in workloads if wl.controller_owner(w)[::2] == ("RayService", uid)])


def cluster_workload(cluster: str | None, workloads: list[dict]) -> dict | None:
    """The Workload Kueue made for RayCluster ``cluster`` (``ray.io/rayservice`` not integrated), if any."""
    if not cluster:
        return None
    return _newest([w for w in workloads if wl.controller_owner(w)[:2] == ("RayCluster", cluster)])


def application_names(service: dict) -> list[str]:
    """The Serve applications ``spec.serveConfigV2`` declares (KubeRay names an unnamed one ``default``)."""
    try:
        config = yaml.safe_load((service.get("spec") or {}).get("serveConfigV2") or "") or {}
    except yaml.YAMLError:
        return []
    if not isinstance(config, dict):
        return []
    return [
        (app.get("name") or "default") for app in config.get("applications") or () if isinstance(app, dict)
    ]


def serve_failure(applications: dict) -> tuple[str, str] | None:
    """(phase, Serve's message) when an application failed to deploy or is unhealthy; None otherwise."""
    for status in ("DEPLOY_FAILED", "UNHEALTHY"):
        for name, app in sorted(applications.items()):
            deployments = app.get("serveDeploymentStatuses") or {}
            bad = {d: v for d, v in sorted(deployments.items()) if v.get("status") == status}
            if app.get("status") != status and not bad:
                continue
            parts = [f"application {name} is {app.get('status')}"]
            if app.get("message"):
                parts[0] += f": {app['message']}"
            parts += [
                f"deployment {d} is {status}: {v.get('message') or '(no message)'}" for d, v in bad.items()
            ]
            return status, "; ".join(parts)
    return None


def _serving_problems(service: dict, active: dict, switch_from: str | None) -> list[str]:
    """Why the active cluster does not serve the current spec yet (empty when it does)."""
    name = active.get("rayClusterName")
    if not name:
        return ["no active RayCluster"]
    if switch_from and name == switch_from:
        return [f"RayCluster {name} is still the one being replaced"]
    problems = []
    if ((active.get("rayClusterStatus") or {}).get("state")) != "ready":
        problems.append(f"RayCluster {name} is not ready")
    applications = active.get("applicationStatuses") or {}
    for app in application_names(service):
        if app not in applications:
            problems.append(f"application {app} not deployed")
    for app_name, app in sorted(applications.items()):
        if app.get("status") != "RUNNING":
            problems.append(f"application {app_name} is {app.get('status')}")
        for deployment, status in sorted((app.get("serveDeploymentStatuses") or {}).items()):
            if status.get("status") != "HEALTHY":
                problems.append(f"deployment {deployment} is {status.get('status')}")
    if _conditions(service).get("Ready", {}).get("status") != "True":
        problems.append("the RayService is not Ready")
    return problems


def observe_service(
    service: dict,
    workloads: list[dict],
    *,
    generation: int | None = None,
    switch_from: str | None = None,
) -> ServiceObservation:
    """Interpret a RayService and its candidate Workloads.

    ``generation``: the spec generation the operator wrote; KubeRay must have observed it. ``switch_from``:
    the cluster an upgrade replaces, which must no longer be the active one for the service to count as
    serving the new spec.
    """
    status = service.get("status") or {}
    conditions = _conditions(service)
    active = status.get("activeServiceStatus") or {}
    pending = status.get("pendingServiceStatus") or {}
    active_name = active.get("rayClusterName") or None
    pending_name = pending.get("rayClusterName") or None
    target = pending if pending_name else active
    target_name = pending_name or active_name
    role = "pending" if pending_name else ("active" if active_name else None)
    own = cluster_workload(target_name, workloads)
    workload = own or service_workload(service, workloads)
    admitted_by = (
        CLUSTER_WORKLOADS if own is not None else (SERVICE_WORKLOAD if workload is not None else None)
    )
    wl_status = (workload or {}).get("status") or {}
    admission = wl_status.get("admission") or {}
    applications = target.get("applicationStatuses") or {}
    cluster_queue: str | None = admission.get("clusterQueue") or None
    application_states = {name: str(app.get("status") or "") for name, app in applications.items()}
    pods_ready_timeout = wl.pods_ready_timeout(workload)
    # ServiceObservation's fields every rule's result shares (checked by the dataclass at run time: the
    # rules below read the typed locals above, not this dict)
    common: dict[str, Any] = {
        "target_cluster": target_name,
        "target_role": role,
        "active_cluster": active_name,
        "pending_cluster": pending_name,
        "admitted_by": admitted_by,
        "workload_name": ((workload or {}).get("metadata") or {}).get("name"),
        "cluster_queue": cluster_queue,
        "flavors": {
            a.get("name", ""): dict(a.get("flavors") or {}) for a in admission.get("podSetAssignments") or []
        },
        "preemptions": wl.count_preemptions(workload),
        "pods_ready_evictions": wl.count_pods_ready_evictions(workload),
        "last_preemption": wl.last_preemption(workload),
        "quota_reserved_at": wl.quota_reserved_since(workload),
        "admitted_at": wl.admitted_since(workload),
        "applications": application_states,
        "pods_ready_timeout": pods_ready_timeout,
    }

    def result(phase: ServicePhase, reason: str, message: str) -> ServiceObservation:
        return ServiceObservation(phase=phase, reason=reason, message=message, **common)

    where = f"{role} RayCluster {target_name}" if target_name else "the RayService"
    serves_meanwhile = f"; RayCluster {active_name} keeps serving" if pending_name and active_name else ""

    # 1-2. KubeRay's verdict on the spec, and whether it has seen the spec at all.
    ready = conditions.get("Ready") or {}
    if ready.get("status") == "False" and ready.get("reason") in ("ValidationFailed", "InitializingTimeout"):
        return result(ServicePhase.FAILED, ready["reason"], ready.get("message") or "")
    observed = int(status.get("observedGeneration") or 0)
    if generation is not None and observed < generation:
        return result(
            ServicePhase.SUBMITTED,
            "NotObserved",
            f"KubeRay has not acted on generation {generation} of the spec yet (observed {observed})",
        )

    # 3. Serve's verdict on the target cluster.
    failure = serve_failure(applications)
    if failure is not None:
        phase, message = failure
        return result(ServicePhase(phase), phase, f"on {where}: {message}{serves_meanwhile}")

    wl_conditions = wl.conditions(workload)
    quota = wl_conditions.get(wl.QUOTA_RESERVED) or {}
    evicted = wl_conditions.get(wl.EVICTED) or {}
    quota_reserved = quota.get("status") == "True"
    cluster_state = (target.get("rayClusterStatus") or {}).get("state")

    # 4. Deactivation: it will not be admitted again.
    if workload is not None:
        rejected = [c for c in wl.admission_checks(workload) if c["state"] == wl.ADMISSION_CHECK_REJECTED]
        if rejected:
            checks = "; ".join(
                f"{c['name']}: {c['message']}" if c["message"] else c["name"] for c in rejected
            )
            return result(
                ServicePhase.DEACTIVATED,
                "AdmissionCheckRejected",
                f"admission check rejected {where} ({checks}); Kueue deactivates its Workload",
            )
        target_condition = wl_conditions.get(wl.DEACTIVATION_TARGET) or {}
        if (workload.get("spec") or {}).get("active") is False or target_condition.get("status") == "True":
            said = evicted if wl.is_deactivation(evicted.get("reason")) else target_condition
            return result(
                ServicePhase.DEACTIVATED,
                said.get("reason") or wl.DEACTIVATED,
                f"{where}: {said.get('message') or 'The workload is deactivated'}",
            )

    # 5. Evicted while its cluster still holds the quota.
    if evicted.get("status") == "True" and quota_reserved:
        reason = evicted.get("reason") or wl.EVICTED
        message = evicted.get("message") or ""
        if reason == wl.PODS_READY_TIMEOUT:
            hint = pods_not_ready_hint(pods_ready_timeout)
            return result(
                ServicePhase.PODS_NOT_READY, reason, f"{where}: {hint} ({message}){serves_meanwhile}"
            )
        phase = ServicePhase.PREEMPTED if reason == wl.EVICTED_BY_PREEMPTION else ServicePhase.EVICTED
        return result(phase, reason, f"{where}: {message}{serves_meanwhile}")

    # 6. Serving the spec the operator wrote.
    if not pending_name and not _serving_problems(service, active, switch_from):
        apps = ", ".join(sorted(applications))
        return result(
            ServicePhase.SERVING,
            ready.get("reason") or "Ready",
            f"RayCluster {active_name} serves {apps}: every application RUNNING, every deployment HEALTHY",
        )

    # 7. Admitted: the cluster starts, then Serve deploys.
    if quota_reserved:
        admitted = wl_conditions.get(wl.ADMITTED) or {}
        if admitted.get("status") != "True":
            return result(
                ServicePhase.AWAITING_CHECKS,
                wl.QUOTA_RESERVED,
                f"{where}: {describe_waiting_for_checks(cluster_queue, wl.admission_checks(workload))}",
            )
        if cluster_state != "ready":
            return result(
                ServicePhase.ADMITTED,
                wl.ADMITTED,
                f"{where} admitted by ClusterQueue {cluster_queue}; its pods are starting{serves_meanwhile}",
            )
        deploying = ", ".join(f"{name} {state}" for name, state in sorted(application_states.items()))
        problems = _serving_problems(service, active, switch_from) if not pending_name else []
        detail = deploying or "; ".join(problems) or "Serve applications not reported yet"
        return result(
            ServicePhase.DEPLOYING,
            "ClusterReady",
            f"{where} is ready; Serve: {detail}{serves_meanwhile}",
        )

    # 8. No Workload (yet).
    if workload is None:
        suspended = bool(((service.get("spec") or {}).get("rayClusterConfig") or {}).get("suspend"))
        if suspended and active_name and pending_name and ready.get("status") == "True":
            return result(
                ServicePhase.BLOCKED,
                "NoWorkloadWhileServing",
                f"Kueue admits this RayService as one Workload and will not create one for its new cluster "
                f"config while RayCluster {active_name} serves, so pending RayCluster {pending_name} stays "
                f"suspended; deploy the new version as a new RayService, change only serveConfigV2, or "
                f"let Kueue admit RayServices through their RayClusters (leave ray.io/rayservice out of "
                f"its integrations.frameworks)",
            )
        if not target_name:
            return result(ServicePhase.SUBMITTED, "NoCluster", "KubeRay has not named a RayCluster yet")
        return result(
            ServicePhase.SUBMITTED,
            "WorkloadPending",
            f"{where}: waiting for Kueue to create the Workload{serves_meanwhile}",
        )

    # 9. Not admitted: inadmissible or waiting.
    reason = quota.get("reason") or ""
    message = quota.get("message") or ""
    if is_inadmissible(reason, message):
        return result(ServicePhase.INADMISSIBLE, reason or "Inadmissible", f"{where}: {message}")
    if evicted.get("status") == "True" and not message:
        requeue_at = (wl_status.get("requeueState") or {}).get("requeueAt")
        detail = evicted.get("message") or ""
        if requeue_at:
            detail = f"backing off until {requeue_at} after: {detail}"
        return result(
            ServicePhase.QUEUED, evicted.get("reason") or wl.REQUEUED, f"{where}: {detail}{serves_meanwhile}"
        )
    return result(
        ServicePhase.QUEUED,
        reason or "Pending",
        f"{where}: {message or 'Waiting for the Kueue scheduler.'}{serves_meanwhile}",
    )
