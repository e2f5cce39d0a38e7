"""What Kueue v0.19.2 writes on a RayJob's Workload when its quota is released, the same on kubesim and on
real Kueue, and what the plugin's status model makes of it.

With ``UnadmittedWorkloadsObservability`` off (Kueue's default) ``Admitted`` is written only when it flips
(``SyncAdmittedCondition``): never for a Workload that was never admitted; on release of an admitted one,
``NoReservationUnsatisfiedChecks`` when its admission checks were reset to Pending by the eviction,
``NoReservation`` when it has none; and that ``Admitted=False`` stays when quota is reserved again. An
admission check's ``Retry`` eviction ends in ``Requeued=True`` / ``BackoffFinished`` once nothing is left to
wait for. Every Workload that is not admitted carries ``PodsReady=False`` / ``WaitForStart`` (the job
reconciler's ``generatePodsReadyCondition``; waitForPodsReady is always on with the v1beta2 configuration).

The admission check belongs to no controller either backend runs: the test is its controller, marking the
AdmissionCheck ``Active`` and writing the Workload's check state, as a ProvisioningRequest controller does.
"""

from __future__ import annotations

import datetime

import pytest
from kubernetes import client
from kueue_ray.operators import SubmitRayJobOperator
from kueue_ray.phases import Phase
from kueue_ray.status import observe

KUEUE = ("kueue.x-k8s.io", "v1beta2")
WAIT_FOR_START = ("False", "WaitForStart", "Not all pods are ready or succeeded")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def said(workload: dict | None, type_: str) -> tuple[str, str, str] | None:
    for found in ((workload or {}).get("status") or {}).get("conditions") or ():
        if found["type"] == type_:
            return found["status"], found["reason"], found["message"]
    return None


def submit(queues, body, task_context, name: str, *, local_queue: str, priority: str) -> str:
    return SubmitRayJobOperator(
        task_id=name,
        template=body,
        local_queue=local_queue,
        priority=priority,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(task_context(name))["uid"]


def rayjob(queues, uid: str) -> dict:
    return next(job for job in queues.rayjobs() if job["metadata"]["uid"] == uid)


@pytest.fixture
def checked_queue(queues, unique_name):
    """A LocalQueue ``checked`` before a ClusterQueue of the same quota whose AdmissionCheck the test
    decides; yields the check's name."""
    custom = queues.custom
    check, cq, flavor = f"{unique_name}-check", f"{unique_name}-checked", f"{unique_name}-flavor"
    custom.create_cluster_custom_object(
        *KUEUE,
        "admissionchecks",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "AdmissionCheck",
            "metadata": {"name": check},
            "spec": {"controllerName": "example.com/capacity-provisioner"},
        },
    )
    active = {"type": "Active", "status": "True", "reason": "Active", "message": "The check is active"}
    # A merge patch: Kueue adds its resource-in-use finalizer to the AdmissionCheck meanwhile.
    status = {"status": {"conditions": [{**active, "lastTransitionTime": now()}]}}
    custom.patch_cluster_custom_object_status(*KUEUE, "admissionchecks", check, status)
    quota = [
        {"name": "cpu", "nominalQuota": "2"},
        {"name": "memory", "nominalQuota": "8G"},
        {"name": "nvidia.com/gpu", "nominalQuota": "1"},
    ]
    spec = {
        "namespaceSelector": {},
        "admissionChecksStrategy": {"admissionChecks": [{"name": check}]},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": flavor, "resources": quota}],
            }
        ],
    }
    body = {"apiVersion": "/".join(KUEUE), "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": spec}
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", body)
    lq = {"apiVersion": "/".join(KUEUE), "kind": "LocalQueue", "metadata": {"name": "checked"}}
    custom.create_namespaced_custom_object(
        *KUEUE, queues.namespace, "localqueues", {**lq, "spec": {"clusterQueue": cq}}
    )
    yield check
    for plural, name in (("clusterqueues", cq), ("admissionchecks", check)):
        try:
            custom.delete_cluster_custom_object(*KUEUE, plural, name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def decide(queues, uid: str, state: str, message: str) -> None:
    """The check controller's write: the Workload's only check in ``state``."""
    workload = queues.workload(uid)
    [check] = workload["status"]["admissionChecks"]
    changed = {"name": check["name"], "state": state, "message": message, "lastTransitionTime": now()}
    queues.custom.patch_namespaced_custom_object_status(
        *KUEUE,
        queues.namespace,
        "workloads",
        workload["metadata"]["name"],
        {"status": {"admissionChecks": [changed]}},
    )


def test_admission_check_evictions_before_and_after_admission(
    queues, checked_queue, rayjob_body, task_context, eventually
):
    uid = submit(
        queues, rayjob_body(duration="inf"), task_context, "train", local_queue="checked", priority=queues.low
    )

    def awaiting_check():
        workload = queues.workload(uid)
        checks = ((workload or {}).get("status") or {}).get("admissionChecks") or []
        return (said(workload, "QuotaReserved") or ("",))[0] == "True" and checks and workload

    workload = eventually(awaiting_check)
    assert said(workload, "Admitted") is None
    eventually(lambda: said(queues.workload(uid), "PodsReady") == WAIT_FOR_START)
    seen = observe(rayjob(queues, uid), queues.workload(uid))
    assert (seen.phase, seen.reason) == (Phase.AWAITING_CHECKS, "QuotaReserved")

    # Retry before the Workload was ever admitted: evicted, released and requeued, never Admitted.
    decide(queues, uid, "Retry", "no GPU node yet")

    def requeued():
        workload = queues.workload(uid)
        return (said(workload, "Requeued") or ("", ""))[1] == "BackoffFinished" and workload

    workload = eventually(requeued)
    assert said(workload, "Requeued") == ("True", "BackoffFinished", "The workload backoff was finished")
    assert said(workload, "Admitted") is None
    assert said(workload, "PodsReady") == WAIT_FOR_START
    assert workload["status"]["schedulingStats"]["evictions"] == [
        {"reason": "AdmissionCheck", "underlyingCause": "", "count": 1}
    ]
    workload = eventually(awaiting_check)
    [check] = workload["status"]["admissionChecks"]
    assert (check["state"], check["message"]) == (
        "Pending",
        "Reset to Pending after eviction. Previously: Retry",
    )

    # Ready: admitted, the RayJob runs.
    decide(queues, uid, "Ready", "")
    eventually(lambda: (said(queues.workload(uid), "PodsReady") or ("",))[0] == "True", timeout=60)
    assert said(queues.workload(uid), "Admitted")[:2] == ("True", "Admitted")

    # Retry once admitted: the eviction resets the check, so the release says not all checks are ready.
    decide(queues, uid, "Retry", "GPU node reclaimed")

    def released():
        workload = queues.workload(uid)
        return (said(workload, "Admitted") or ("",))[0] == "False" and workload

    workload = eventually(released, timeout=60)
    assert said(workload, "Admitted") == (
        "False",
        "NoReservationUnsatisfiedChecks",
        "The workload has no reservation and not all checks ready",
    )
    # Requeued, quota reserved again: the Admitted=False of the release stays; the checks say what it
    # waits for, and so does the plugin.
    workload = eventually(lambda: (w := awaiting_check()) and said(w, "Admitted")[0] == "False" and w)
    assert said(workload, "Admitted")[1] == "NoReservationUnsatisfiedChecks"
    eventually(lambda: said(queues.workload(uid), "PodsReady") == WAIT_FOR_START)
    seen = eventually(
        lambda: (s := observe(rayjob(queues, uid), queues.workload(uid))).phase is Phase.AWAITING_CHECKS and s
    )
    assert seen.reason == "QuotaReserved"
    assert seen.message.startswith("quota reserved in ClusterQueue ")
    assert f"{checked_queue} (Pending: Reset to Pending after eviction. Previously: Retry)" in seen.message


def test_a_preempted_workload_without_checks_is_told_it_has_no_reservation(
    queues, rayjob_body, task_context, eventually
):
    low = submit(
        queues,
        rayjob_body(duration="inf"),
        task_context,
        "low",
        local_queue="user-queue",
        priority=queues.low,
    )
    eventually(lambda: (said(queues.workload(low), "PodsReady") or ("",))[0] == "True", timeout=60)
    submit(
        queues,
        rayjob_body(duration="inf"),
        task_context,
        "high",
        local_queue="user-queue",
        priority=queues.high,
    )

    def released():
        workload = queues.workload(low)
        return (said(workload, "QuotaReserved") or ("",))[0] == "False" and workload

    workload = eventually(released, timeout=60)
    assert said(workload, "Admitted") == ("False", "NoReservation", "The workload has no reservation")
    assert said(workload, "Requeued")[:2] == ("True", "Preempted")
    # Not admitted any more, Kueue's job reconciler writes WaitForStart; a pass that still saw it admitted
    # with its pods failing wrote WaitForRecovery first (generatePodsReadyCondition: real Kueue did, in CI).
    eventually(lambda: said(queues.workload(low), "PodsReady") == WAIT_FOR_START)
    seen = observe(rayjob(queues, low), queues.workload(low))
    assert seen.phase in (Phase.QUEUED, Phase.PREEMPTED)
