"""The RayService status model on objects shaped like KubeRay v1.7 / Kueue v0.19 write them."""

from datetime import UTC, datetime

from kueue_ray.phases import ServicePhase
from kueue_ray.rayservice.status import observe_service
from kueue_ray.workload import related_workload

SERVE_CONFIG = "applications:\n  - name: forecast\n    deployments:\n      - name: Model\n"
NEVER_FITS = (
    "couldn't assign flavors to pod set gpu-workers: insufficient quota for nvidia.com/gpu in flavor gpu, "
    "request > maximum capacity (24 > 8)"
)
PREEMPTED_MSG = "Preempted to accommodate a workload (UID: 1c2d, JobUID: 9f8e) due to prioritization"


def cond(type_, status, reason, message=""):
    return {"type": type_, "status": status, "reason": reason, "message": message}


def apps(status="RUNNING", deployment="HEALTHY", message="", deployment_message=""):
    return {
        "forecast": {
            "status": status,
            "message": message,
            "serveDeploymentStatuses": {"Model": {"status": deployment, "message": deployment_message}},
        }
    }


def role(name, state="ready", applications=None):
    status = {"rayClusterName": name, "rayClusterStatus": {"state": state} if state else {}}
    if applications is not None:
        status["applicationStatuses"] = applications
    return status


def service(*, active=None, pending=None, ready="True", ready_reason="NonZeroServeEndpoints", generation=1,
            suspend=False):  # fmt: skip
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "serve", "namespace": "ray", "uid": "svc-uid", "generation": generation},
        "spec": {"serveConfigV2": SERVE_CONFIG, "rayClusterConfig": {"suspend": suspend}},
        "status": {
            "observedGeneration": generation,
            "activeServiceStatus": active or {},
            "pendingServiceStatus": pending or {},
            "conditions": [cond("Ready", ready, ready_reason)],
        },
    }


def workload(owner_kind="RayService", owner_name="serve", owner_uid="svc-uid", *conditions, name=None,
             admission=True, active=True, **status):  # fmt: skip
    body = {
        "metadata": {
            "name": name or f"{owner_kind.lower()}-{owner_name}-abcde",
            "ownerReferences": [
                {"kind": owner_kind, "name": owner_name, "uid": owner_uid, "controller": True}
            ],
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"active": active},
        "status": {"conditions": list(conditions), **status},
    }
    if admission:
        body["status"]["admission"] = {
            "clusterQueue": "team-a-cq",
            "podSetAssignments": [{"name": "head", "flavors": {"cpu": "default-flavor"}}],
        }
    return body


ADMITTED = (cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"))


def test_a_new_service_queued_in_kueue():
    obs = observe_service(
        service(pending=role("serve-a", state="suspended"), ready="False", ready_reason="Initializing"),
        [
            workload(
                "RayService",
                "serve",
                "svc-uid",
                cond("QuotaReserved", "False", "Pending", "1 more needed"),
                admission=False,
            )
        ],  # fmt: skip
    )
    assert obs.phase is ServicePhase.QUEUED
    assert obs.message == "pending RayCluster serve-a: 1 more needed"
    assert obs.admitted_by == "service"


def test_never_fits_is_inadmissible():
    obs = observe_service(
        service(pending=role("serve-a", state=""), ready="False", ready_reason="Initializing"),
        [
            workload(
                "RayCluster",
                "serve-a",
                "c-uid",
                cond("QuotaReserved", "False", "Pending", NEVER_FITS),
                admission=False,
            )
        ],  # fmt: skip
    )
    assert obs.phase is ServicePhase.INADMISSIBLE
    assert obs.admitted_by == "cluster"


def test_admitted_then_deploying_then_serving():
    starting = observe_service(
        service(pending=role("serve-a", state=""), ready="False", ready_reason="Initializing"),
        [workload("RayService", "serve", "svc-uid", *ADMITTED)],
    )
    assert starting.phase is ServicePhase.ADMITTED
    assert "admitted by ClusterQueue team-a-cq" in starting.message

    deploying = observe_service(
        service(
            pending=role("serve-a", applications=apps("DEPLOYING", "UPDATING")),
            ready="False",
            ready_reason="Initializing",
        ),  # fmt: skip
        [workload("RayService", "serve", "svc-uid", *ADMITTED)],
    )
    assert deploying.phase is ServicePhase.DEPLOYING
    assert "forecast DEPLOYING" in deploying.message

    serving = observe_service(
        service(active=role("serve-a", applications=apps())),
        [workload("RayService", "serve", "svc-uid", *ADMITTED)],
    )
    assert serving.phase is ServicePhase.SERVING and serving.terminal
    assert serving.active_cluster == "serve-a"


def test_an_upgrade_serves_only_once_the_new_cluster_took_over():
    workloads = [
        workload("RayCluster", "serve-old", "old-uid", *ADMITTED),
        workload("RayCluster", "serve-new", "new-uid", *ADMITTED),
    ]
    during = observe_service(
        service(
            active=role("serve-old", applications=None),
            pending=role("serve-new", applications=apps("DEPLOYING", "UPDATING")),
            generation=2,
        ),  # fmt: skip
        workloads,
        generation=2,
        switch_from="serve-old",
    )
    assert during.phase is ServicePhase.DEPLOYING
    assert during.message.endswith("; RayCluster serve-old keeps serving")
    assert during.target_role == "pending"

    before_kuberay_acts = observe_service(
        service(active=role("serve-old", applications=apps()), generation=2),
        workloads,
        generation=2,
        switch_from="serve-old",
    )
    assert before_kuberay_acts.phase is not ServicePhase.SERVING

    after = observe_service(
        service(active=role("serve-new", applications=apps()), generation=2),
        workloads,
        generation=2,
        switch_from="serve-old",
    )
    assert after.phase is ServicePhase.SERVING


def test_kuberay_not_having_seen_the_new_spec_is_not_success():
    obs = observe_service(
        service(active=role("serve-a", applications=apps()), generation=1), [], generation=2
    )
    assert obs.phase is ServicePhase.SUBMITTED
    assert obs.reason == "NotObserved"


def test_preempted_pending_cluster_names_both_clusters():
    obs = observe_service(
        service(active=role("serve-old"), pending=role("serve-new", state="")),
        [
            workload("RayCluster", "serve-old", "old-uid", *ADMITTED),
            workload(
                "RayCluster",
                "serve-new",
                "new-uid",
                *ADMITTED,
                cond("Evicted", "True", "Preempted", PREEMPTED_MSG),
                cond("Preempted", "True", "InClusterQueue", PREEMPTED_MSG),
            ),
        ],
    )
    assert obs.phase is ServicePhase.PREEMPTED
    assert obs.message == f"pending RayCluster serve-new: {PREEMPTED_MSG}; RayCluster serve-old keeps serving"


def test_requeued_after_preemption_counts_it():
    obs = observe_service(
        service(active=role("serve-old"), pending=role("serve-new", state="suspended")),
        [
            workload(
                "RayCluster",
                "serve-new",
                "new-uid",
                cond("QuotaReserved", "False", "Pending", "1 more needed"),
                cond("Evicted", "True", "Preempted", PREEMPTED_MSG),
                admission=False,
                schedulingStats={"evictions": [{"reason": "Preempted", "count": 1}]},
            )
        ],
    )
    assert obs.phase is ServicePhase.QUEUED
    assert obs.preemptions == 1


def test_deploy_failed_quotes_serve():
    obs = observe_service(
        service(
            pending=role(
                "serve-a",
                applications=apps(
                    "DEPLOY_FAILED",
                    "DEPLOY_FAILED",
                    "Deploying application forecast failed",
                    "No module named 'serve_aurora'",
                ),
            ),
            ready="False",
            ready_reason="Initializing",
        ),  # fmt: skip
        [workload("RayService", "serve", "svc-uid", *ADMITTED)],
    )
    assert obs.phase is ServicePhase.DEPLOY_FAILED and obs.terminal
    assert "application forecast is DEPLOY_FAILED: Deploying application forecast failed" in obs.message
    assert "deployment Model is DEPLOY_FAILED: No module named 'serve_aurora'" in obs.message


def test_an_unhealthy_deployment_fails_even_when_the_application_says_running():
    obs = observe_service(
        service(active=role("serve-a", applications=apps("RUNNING", "UNHEALTHY", "", "health check failed"))),
        [workload("RayService", "serve", "svc-uid", *ADMITTED)],
    )
    assert obs.phase is ServicePhase.UNHEALTHY
    assert "deployment Model is UNHEALTHY: health check failed" in obs.message


def test_validation_failed_is_final():
    obs = observe_service(service(ready="False", ready_reason="ValidationFailed"), [], generation=1)
    assert obs.phase is ServicePhase.FAILED


def test_shipped_kueue_blocks_a_cluster_upgrade_of_a_serving_service():
    obs = observe_service(
        service(
            active=role("serve-old", applications=None),
            pending=role("serve-new", state="suspended"),
            suspend=True,
        ),  # fmt: skip
        [],
    )
    assert obs.phase is ServicePhase.BLOCKED and obs.terminal
    assert "integrations.frameworks" in obs.message


def test_deactivated_workload():
    obs = observe_service(
        service(pending=role("serve-a", state=""), ready="False", ready_reason="Initializing"),
        [
            workload(
                "RayService",
                "serve",
                "svc-uid",
                cond("Evicted", "True", "DeactivatedDueToAdmissionCheck", "The workload is deactivated"),
                active=False,
                admission=False,
            )
        ],
    )
    assert obs.phase is ServicePhase.DEACTIVATED


def test_related_workloads_are_the_services_and_its_current_clusters():
    svc = service(active=role("serve-old"), pending=role("serve-new"))
    assert related_workload(svc, workload("RayService", "serve", "svc-uid"))
    assert related_workload(svc, workload("RayCluster", "serve-new", "x"))
    assert not related_workload(svc, workload("RayCluster", "serve-older", "x"))
    assert not related_workload(svc, workload("RayJob", "serve", "svc-uid"))


def test_a_preemption_seen_only_after_the_requeue_still_gets_its_preempted_line():
    from kueue_ray.rayservice.waiting import ServiceTimeline, describe_unseen_preemptions

    requeued = observe_service(
        service(active=role("serve-old"), pending=role("serve-new", state="suspended")),
        [
            workload(
                "RayCluster",
                "serve-new",
                "new-uid",
                cond("QuotaReserved", "False", "Pending", "1 more needed"),
                cond("Preempted", "False", "QuotaReserved", f"Previously: {PREEMPTED_MSG}"),
                admission=False,
                schedulingStats={"evictions": [{"reason": "Preempted", "count": 1}]},
            )
        ],
    )
    timeline = ServiceTimeline()
    timeline.record(requeued, datetime(2026, 1, 1, tzinfo=UTC))
    assert describe_unseen_preemptions("ray", "serve", requeued, timeline.preemption_count) == [
        f"RayService ray/serve: PREEMPTED (Preempted): pending RayCluster serve-new: {PREEMPTED_MSG}; "
        "RayCluster serve-old keeps serving"
    ]
    # Nothing newly counted, or the PREEMPTED moment itself observed: its own line says it already.
    assert describe_unseen_preemptions("ray", "serve", requeued, 0) == []
    preempted = observe_service(
        service(active=role("serve-old"), pending=role("serve-new", state="")),
        [
            workload(
                "RayCluster",
                "serve-new",
                "new-uid",
                *ADMITTED,
                cond("Evicted", "True", "Preempted", PREEMPTED_MSG),
                cond("Preempted", "True", "InClusterQueue", PREEMPTED_MSG),
            )
        ],
    )
    assert describe_unseen_preemptions("ray", "serve", preempted, 1) == []


def test_a_first_look_after_the_deploy_splits_the_time_before_it_at_the_admission():
    """The triggerer picked the wait up 5 s after the deploy and the service already served: the Kueue tab
    and the task log must not say "0s queued, 0s starting"."""
    from kueue_ray.rayservice.waiting import ServiceTimeline

    admitted = {"lastTransitionTime": "2026-01-01T00:00:02Z"}
    serving = observe_service(
        service(active=role("serve-a", applications=apps())),
        [
            workload(
                "RayService",
                "serve",
                "svc-uid",
                cond("QuotaReserved", "True", "QuotaReserved") | admitted,
                cond("Admitted", "True", "Admitted") | admitted,
            )
        ],
    )
    assert serving.phase is ServicePhase.SERVING and serving.admitted_at
    timeline = ServiceTimeline(submitted_at=datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    timeline.record(serving, datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC))
    assert (timeline.queued_seconds, timeline.starting_seconds) == (2.0, 3.0)

    queued = observe_service(
        service(active=None, ready="False", ready_reason="Pending"),
        [
            workload(
                "RayService", "serve", "svc-uid", cond("QuotaReserved", "False", "Pending"), admission=False
            )
        ],
    )
    waiting = ServiceTimeline(submitted_at=datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    waiting.record(queued, datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC))
    assert (queued.phase, waiting.queued_seconds, waiting.starting_seconds) == (ServicePhase.QUEUED, 4.0, 0.0)


def test_the_deploy_event_carries_only_what_the_task_needs_so_its_log_line_stays_readable():
    """Airflow writes the whole event into the task log ("Trigger fired event ... result=TriggerEvent<...>"):
    it carries the verdict, the RayService, the active cluster and the timeline, not the whole observation."""
    import json

    from kueue_ray.rayservice.status import ServiceObservation
    from kueue_ray.rayservice.waiting import ServiceTarget, ServiceTimeline
    from kueue_ray.verdicts import Verdict

    target = ServiceTarget(
        name="aurora-serve-2f9c1d", namespace="ray", uid="0c5e8a5e-1d7a-4a43-9a55-2d1c1f0b9b11",
        generation=1, created=True, queue="team-a", priority="prod-priority",
    )  # fmt: skip
    serving = ServiceObservation(
        phase=ServicePhase.SERVING,
        reason="Serving",
        message="application forecast RUNNING, deployment Model HEALTHY",
        target_cluster="aurora-serve-2f9c1d-raycluster-x7k2p",
        target_role="active",
        active_cluster="aurora-serve-2f9c1d-raycluster-x7k2p",
        admitted_by="cluster",
        workload_name="raycluster-aurora-serve-2f9c1d-raycluster-x7k2p-3a1b2",
        cluster_queue="team-a-cq",
        flavors={"head": {"cpu": "default"}, "gpu-workers": {"nvidia.com/gpu": "gpu", "cpu": "default"}},
        admitted_at="2026-12-01T10:00:05Z",
        applications={"forecast": "RUNNING"},
    )
    from dataclasses import replace

    timeline = ServiceTimeline(submitted_at=datetime(2026, 12, 1, 10, 0, tzinfo=UTC).timestamp())
    starting = replace(serving, phase=ServicePhase.ADMITTED, reason="Admitted", applications={})
    timeline.record(starting, datetime(2026, 12, 1, 10, 0, 6, tzinfo=UTC))
    timeline.record(serving, datetime(2026, 12, 1, 10, 1, tzinfo=UTC))
    payload = target.payload(Verdict("success", "Serving", serving.message), serving, timeline)

    assert payload["active_cluster"] == serving.active_cluster
    assert payload["timeline"]["admissions"][0]["cluster_queue"] == "team-a-cq"
    assert "observation" not in payload and "admitted_key" not in payload["timeline"]
    assert len(repr(payload)) < 900, repr(payload)
    json.dumps(payload)
