"""The Workload conditions Kueue v0.19.2 writes around a quota release, as kubesim's Kueue controller writes
them for batch Jobs: ``Admitted`` only when it flips (``SyncAdmittedCondition`` with
``UnadmittedWorkloadsObservability`` off), ``Requeued`` after an admission-check eviction, ``PodsReady`` on
Workloads that were never admitted (waitForPodsReady is always on with the v1beta2 configuration).

The admission check here belongs to no controller kubesim simulates: the test decides it, writing the
Workload's ``status.admissionChecks`` as a check controller (e.g. the ProvisioningRequest one) does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kubesim.cluster import Cluster
from kubesim.kueue import jobs
from kubesim.kueue.conditions import sync_admitted
from kubesim.kueue.eviction import Eviction
from kubesim.kueue.job_sync import pods_ready_condition
from kubesim.kueue.world import World
from tests.unit.kubesim.support import until

NS = "ml"
JOBS = "jobs.batch"
WORKLOADS = "workloads.kueue.x-k8s.io"
CHECKS = "admissionchecks.kueue.x-k8s.io"
STAMP = "2026-01-01T00:00:00Z"


def job(name: str, priority: str, queue: str = "user-queue") -> dict:
    container = {
        "name": "base",
        "image": "busybox",
        "command": ["sh", "-c", "sleep infinity"],
        "resources": {"requests": {"cpu": "1"}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {jobs.QUEUE_LABEL: queue, jobs.PRIORITY_CLASS_LABEL: priority}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def queue(cluster: Cluster, name: str, checks: tuple[str, ...] = ()) -> None:
    store = cluster.store
    store.create("resourceflavors.kueue.x-k8s.io", {"metadata": {"name": f"{name}-flavor"}})
    spec: dict = {
        "namespaceSelector": {},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": f"{name}-flavor", "resources": [{"name": "cpu", "nominalQuota": "1"}]}],
            }
        ],
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check} for check in checks]}
    store.create("clusterqueues.kueue.x-k8s.io", {"metadata": {"name": name}, "spec": spec})
    lq = {"metadata": {"name": "user-queue", "namespace": NS}, "spec": {"clusterQueue": name}}
    store.create("localqueues.kueue.x-k8s.io", lq)


def run(body: Callable, checks: tuple[str, ...] = ()) -> None:
    async def main() -> None:
        cluster = Cluster(time_scale=1000.0, controllers=("kubesim.batch", "kubesim.kueue"))
        cluster.store.create("namespaces", {"metadata": {"name": NS}})
        for name, value in (("low", 10), ("high", 1000)):
            cluster.store.create(
                "workloadpriorityclasses.kueue.x-k8s.io", {"metadata": {"name": name}, "value": value}
            )
        for check in checks:
            # An AdmissionCheck of a controller kubesim does not run, made Active as its controller would.
            created = cluster.store.create(
                CHECKS, {"metadata": {"name": check}, "spec": {"controllerName": "example.com/provisioner"}}
            )
            active = {"type": "Active", "status": "True", "reason": "Active", "message": "ok"}
            created["status"] = {"conditions": [{**active, "lastTransitionTime": STAMP}]}
            cluster.store.update(CHECKS, created, subresource="status")
        queue(cluster, "cq", checks)
        await cluster.start()
        try:
            await asyncio.wait_for(body(cluster), 10)
        finally:
            await cluster.stop()

    asyncio.run(main())


def workload_of(cluster: Cluster, name: str) -> dict | None:
    uid = cluster.store.get(JOBS, name, namespace=NS)["metadata"]["uid"]
    found, _ = cluster.store.list(WORKLOADS, namespace=NS, label_selector=f"kueue.x-k8s.io/job-uid={uid}")
    return found[0] if found else None


def condition(wl: dict | None, type_: str) -> dict:
    return next(
        (c for c in ((wl or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {}
    )


def said(wl: dict | None, type_: str) -> tuple[str, str, str] | None:
    found = condition(wl, type_)
    return (found["status"], found["reason"], found["message"]) if found else None


def decide(cluster: Cluster, name: str, state: str, message: str) -> None:
    """What a check controller does: set the state of the Workload's check."""
    wl = workload_of(cluster, name)
    for check in wl["status"]["admissionChecks"]:
        check.update(state=state, message=message, lastTransitionTime=cluster.clock.timestamp())
    cluster.store.update(WORKLOADS, wl, subresource="status")


WAIT_FOR_START = ("False", "WaitForStart", "Not all pods are ready or succeeded")


def test_a_queued_workload_waits_for_start_and_has_no_admitted_condition():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(JOBS, job("blocker", "high"), namespace=NS)
        await until(
            lambda: condition(workload_of(cluster, "blocker"), "PodsReady").get("status") == "True", ""
        )
        cluster.store.create(JOBS, job("waiting", "low"), namespace=NS)
        pending = await until(lambda: said(workload_of(cluster, "waiting"), "QuotaReserved"), "evaluated")
        assert pending[:2] == ("False", "Pending")
        wl = await until(lambda: said(workload_of(cluster, "waiting"), "PodsReady"), "PodsReady written")
        assert wl == WAIT_FOR_START
        assert condition(workload_of(cluster, "waiting"), "Admitted") == {}

    run(body)


def test_a_preempted_workload_without_checks_gets_no_reservation_and_waits_for_start_again():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(JOBS, job("low", "low"), namespace=NS)
        await until(
            lambda: condition(workload_of(cluster, "low"), "PodsReady").get("status") == "True", "runs"
        )
        cluster.store.create(JOBS, job("high", "high"), namespace=NS)

        def released():
            wl = workload_of(cluster, "low")
            return condition(wl, "QuotaReserved").get("status") == "False" and wl

        wl = await until(released, "low's quota released")
        assert said(wl, "Admitted") == ("False", "NoReservation", "The workload has no reservation")
        assert said(wl, "Requeued")[:2] == ("True", "Preempted")
        assert isinstance(wl["status"]["accumulatedPastExecutionTimeSeconds"], int)
        wl = await until(lambda: said(workload_of(cluster, "low"), "PodsReady") == WAIT_FOR_START, "reset")

    run(body)


def test_admission_check_evictions_before_and_after_admission():
    async def body(cluster: Cluster) -> None:
        cluster.store.create(JOBS, job("train", "low"), namespace=NS)
        await until(
            lambda: (
                condition(workload_of(cluster, "train"), "QuotaReserved").get("status") == "True"
                and (workload_of(cluster, "train")["status"].get("admissionChecks") or [])
            ),
            "quota reserved, check pending",
        )
        # Retry before the Workload was ever admitted: evicted, released, requeued; no Admitted at all.
        decide(cluster, "train", "Retry", "no capacity yet")

        def requeued():
            wl = workload_of(cluster, "train")
            return said(wl, "Requeued") and said(wl, "Requeued")[1] == "BackoffFinished" and wl

        wl = await until(requeued, "Requeued=True/BackoffFinished")
        assert said(wl, "Requeued") == ("True", "BackoffFinished", "The workload backoff was finished")
        assert condition(wl, "Admitted") == {}
        assert "requeueAt" not in (wl["status"].get("requeueState") or {})
        [check] = wl["status"]["admissionChecks"]
        assert (check["state"], check["message"], check["retryCount"]) == (
            "Pending",
            "Reset to Pending after eviction. Previously: Retry",
            1,
        )
        await until(
            lambda: condition(workload_of(cluster, "train"), "QuotaReserved").get("status") == "True",
            "reserved again",
        )
        decide(cluster, "train", "Ready", "")
        await until(
            lambda: condition(workload_of(cluster, "train"), "Admitted").get("status") == "True", "in"
        )
        # Retry once admitted: the eviction resets the check, so the release says not all checks are ready.
        decide(cluster, "train", "Retry", "capacity lost")

        def released():
            wl = workload_of(cluster, "train")
            return condition(wl, "Admitted").get("status") == "False" and wl

        wl = await until(released, "Admitted=False")
        assert said(wl, "Admitted") == (
            "False",
            "NoReservationUnsatisfiedChecks",
            "The workload has no reservation and not all checks ready",
        )
        await until(
            lambda: said(workload_of(cluster, "train"), "PodsReady") == WAIT_FOR_START, "not admitted"
        )
        await until(lambda: said(workload_of(cluster, "train"), "Requeued")[1] == "BackoffFinished", "again")

    run(body, checks=("provisioning",))


def status_of(*conditions: tuple[str, str, str], checks: tuple[str, ...] = ()) -> dict:
    return {
        "metadata": {"generation": 1},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": "", "lastTransitionTime": STAMP}
                for t, s, r in conditions
            ],
            "admissionChecks": [{"name": f"c{i}", "state": state} for i, state in enumerate(checks)],
        },
    }


def test_admitted_is_written_only_when_it_flips():
    admitted = ("Admitted", "True", "Admitted")
    released = ("QuotaReserved", "False", "Pending")
    # Never admitted: nothing to write, whatever the checks.
    never = status_of(released, checks=("Pending",))
    sync_admitted(never, "2026-01-01T00:01:00Z")
    assert condition(never, "Admitted") == {}
    # Admitted, quota released with every check Ready (a job put on hold keeps them): NoReservation.
    held = status_of(admitted, released, checks=("Ready", "Ready"))
    sync_admitted(held, "2026-01-01T00:01:00Z")
    assert said(held, "Admitted") == ("False", "NoReservation", "The workload has no reservation")
    assert held["status"]["accumulatedPastExecutionTimeSeconds"] == 60
    # Admitted, a check no longer Ready while the quota is kept: UnsatisfiedChecks.
    kept = status_of(admitted, ("QuotaReserved", "True", "QuotaReserved"), checks=("Retry",))
    sync_admitted(kept, "2026-01-01T00:01:00Z")
    assert said(kept, "Admitted") == ("False", "UnsatisfiedChecks", "The workload has not all checks ready")
    # A stale Admitted=False is left alone while the Workload is not admissible.
    stale = status_of(("Admitted", "False", "NoReservation"), ("QuotaReserved", "True", "QuotaReserved"))
    stale["status"]["admissionChecks"] = [{"name": "c", "state": "Pending"}]
    sync_admitted(stale, "2026-01-01T00:01:00Z")
    assert said(stale, "Admitted")[1] == "NoReservation"


def test_pods_ready_follows_the_job_reconcilers_rule():
    """``generatePodsReadyCondition``: not admitted waits for start whatever the pods; once admitted,
    ready pods start it (or recover it), pods lost after being ready wait for recovery."""
    ready = {"status": "True", "reason": "Started"}
    recovering = {"status": "False", "reason": "WaitForRecovery"}
    assert pods_ready_condition(False, True, ready) == WAIT_FOR_START
    assert pods_ready_condition(True, False, None) == WAIT_FOR_START
    assert pods_ready_condition(True, True, None)[:2] == ("True", "Started")
    assert pods_ready_condition(True, False, ready) == (
        "False",
        "WaitForRecovery",
        "At least one pod has failed, waiting for recovery",
    )
    assert pods_ready_condition(True, False, recovering)[1] == "WaitForRecovery"
    assert pods_ready_condition(True, True, recovering)[:2] == ("True", "Recovered")


def test_reactivation_requeues_a_workload_deactivated_by_hand_only():
    """Kueue's workload controller flips ``Requeued=False`` / ``Deactivated`` to ``Reactivated`` when
    ``spec.active`` is true again; a deactivation with a cause (``DeactivatedDueToAdmissionCheck``, ...)
    keeps its ``Requeued=False``, as its switch matches the plain reason only."""

    async def body(cluster: Cluster) -> None:
        store = cluster.store
        store.create(JOBS, job("train", "low"), namespace=NS)
        await until(
            lambda: condition(workload_of(cluster, "train"), "Admitted").get("status") == "True", "in"
        )
        name = workload_of(cluster, "train")["metadata"]["name"]
        store.patch(WORKLOADS, name, {"spec": {"active": False}}, namespace=NS)
        await until(lambda: (said(workload_of(cluster, "train"), "Requeued") or ("",))[0] == "False", "out")
        assert said(workload_of(cluster, "train"), "Requeued")[1] == "Deactivated"
        store.patch(WORKLOADS, name, {"spec": {"active": True}}, namespace=NS)
        await until(lambda: (said(workload_of(cluster, "train"), "Requeued") or ("",))[0] == "True", "back")
        assert said(workload_of(cluster, "train"), "Requeued") == (
            "True",
            "Reactivated",
            "The workload was reactivated",
        )

    run(body)
    active = {"spec": {"active": True}}
    assert Eviction._restart_reason("Deactivated", active, None, World()) == (
        "Reactivated",
        "The workload was reactivated",
    )
    assert Eviction._restart_reason("DeactivatedDueToAdmissionCheck", active, None, World()) is None
