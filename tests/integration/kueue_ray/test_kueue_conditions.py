"""What Kueue writes on Workloads queued behind a full ClusterQueue (BestEffortFIFO), the same on kubesim
and on real Kueue v0.19.2: the head is evaluated and told why it waits; the Workloads of its shape behind
it are parked with it unevaluated (scheduling equivalence) and carry no QuotaReserved condition; a
Workload of another shape is evaluated in its turn."""

from __future__ import annotations

from kueue_ray.operators import SubmitRayJobOperator

from tests.integration.kueue_ray.test_hub import quota_reserved


def submit(queues, body, task_context, name: str) -> str:
    return SubmitRayJobOperator(
        task_id=name,
        template=body,
        local_queue=queues.local_queue,
        priority=queues.low,
        namespace=queues.namespace,
        wait_for_completion=False,
    ).execute(task_context(name))["uid"]


def condition(workload: dict | None, type_: str = "QuotaReserved") -> dict | None:
    for cond in ((workload or {}).get("status") or {}).get("conditions") or ():
        if cond["type"] == type_:
            return cond
    return None


def test_only_the_head_and_other_shapes_are_told_why_they_wait(queues, rayjob_body, task_context, eventually):
    blocker = submit(queues, rayjob_body(duration="inf"), task_context, "blocker")
    # Settled: its PodsReady change would requeue the parked Workloads (a change of an admitted Workload
    # makes Kueue retry the inadmissible ones), which on real Kueue under load came after same-1 arrived
    # and had it evaluated.
    eventually(
        lambda: (condition(queues.workload(blocker), "PodsReady") or {}).get("status") == "True", timeout=60
    )
    assert quota_reserved(queues.workload(blocker)) == "True"
    same = [submit(queues, rayjob_body(duration="inf"), task_context, "same-0")]
    eventually(lambda: quota_reserved(queues.workload(same[0])) == "False")
    # These two arrive after their shape was parked: they are parked on arrival, never evaluated.
    same += [submit(queues, rayjob_body(duration="inf"), task_context, f"same-{i}") for i in (1, 2)]
    other = submit(queues, rayjob_body(duration="inf", cpu="1", memory="4G", gpu="1"), task_context, "other")

    told = eventually(lambda: condition(queues.workload(other)))
    assert (told["status"], told["reason"]) == ("False", "Pending")
    assert "insufficient unused quota for nvidia.com/gpu" in told["message"]
    head = condition(queues.workload(same[0]))
    assert (head["status"], head["reason"]) == ("False", "Pending")
    assert "insufficient unused quota" in head["message"]
    assert [condition(queues.workload(uid)) for uid in same[1:]] == [None, None]
