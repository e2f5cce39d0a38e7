"""Why a workload still waits: who holds the quota it needs, whether it may take it, whether borrowing
helps, and whether waiting can ever admit it (the Aurora case: 8 GPUs next to the DAG's serving cluster)."""

import doctest

from kueue_ray import why_queued as module
from kueue_ray import why_queued_log
from kueue_ray.holdings import holdings_of, requests_of
from kueue_ray.why_queued import explain_queued


def team_queue(name, *, within="LowerPriority", reclaim="Any", gpus="4", borrow="4"):
    return {
        "metadata": {"name": name},
        "spec": {
            "cohortName": "shared-cohort",
            "preemption": {"withinClusterQueue": within, "reclaimWithinCohort": reclaim},
            "resourceGroups": [
                {
                    "flavors": [
                        {
                            "name": "gpu",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": gpus, "borrowingLimit": borrow}
                            ],
                        }
                    ]
                }
            ],
        },
    }


def admitted(
    name, cq, gpus, *, priority=100, klass="dev-priority", owner="RayJob", created="2026-12-01T10:00:00Z"
):
    return {
        "metadata": {
            "name": name,
            "namespace": "ray",
            "creationTimestamp": created,
            "ownerReferences": [{"kind": owner, "name": f"{name}-owner"}],
        },
        "spec": {"priority": priority, "priorityClassRef": {"name": klass}},
        "status": {
            "admission": {
                "clusterQueue": cq,
                "podSetAssignments": [
                    {
                        "name": "head",
                        "flavors": {"nvidia.com/gpu": "gpu"},
                        "resourceUsage": {"nvidia.com/gpu": gpus},
                    }
                ],
            },
            "conditions": [{"type": "Admitted", "status": "True"}],
        },
    }


def pending(gpus, *, priority=100, klass="dev-priority", created="2026-12-02T10:00:00Z"):
    return {
        "metadata": {"name": "rayjob-finetune", "namespace": "ray", "creationTimestamp": created},
        "spec": {"priority": priority, "priorityClassRef": {"name": klass}},
        "status": {
            "resourceRequests": [{"name": "worker", "resources": {"nvidia.com/gpu": gpus, "cpu": "8"}}]
        },
    }


A, B = team_queue("team-a-cq"), team_queue("team-b-cq")
SERVE = admitted(
    "raycluster-serve", "team-a-cq", "1", priority=1000, klass="prod-priority", owner="RayCluster"
)


def explain(workload, *others, queues=(A, B), describe=lambda _w: None):
    return explain_queued(
        workload,
        queues[0],
        holdings=holdings_of([workload, *others]),
        cluster_queues=queues,
        describe=describe,
    )


def test_the_module_examples_hold():
    assert doctest.testmod(module).failed == 0
    assert doctest.testmod(why_queued_log).failed == 0


def test_aurora_two_gpu_workers_next_to_its_own_service_will_not_be_admitted_by_waiting():
    why = explain(pending("8"), SERVE, describe=lambda w: "DAG aurora, run r1, task deploy_serve")
    assert why.stuck
    verdict = why.verdict()
    assert verdict.startswith("Will not be admitted by waiting: it needs 8 nvidia.com/gpu, and at most 7")
    assert (
        "raycluster-serve (RayCluster raycluster-serve-owner, DAG aurora, run r1, task deploy_serve)"
        in verdict
    )
    [holder] = why.holders
    assert (holder.lasting, holder.may_take) == (True, False)
    assert "may not preempt it (withinClusterQueue: LowerPriority)" in holder.how
    # Borrowing is said to be needed and possible in principle, which is why only the service blocks it.
    assert (
        "4 nvidia.com/gpu beyond its nominal 4 must be borrowed from cohort shared-cohort" in why.borrowing()
    )
    assert why.to_dict()["sentences"][0] == verdict


def test_one_gpu_worker_fits_beside_the_service_and_can_wait():
    why = explain(pending("4"), SERVE)
    assert not why.stuck
    assert why.verdict().startswith("Can be admitted")
    assert "borrowing is not needed" in why.borrowing()


def test_a_workload_kueue_has_not_tried_yet_is_explained_from_its_pod_sets_as_the_cache_keeps_it():
    """Kueue writes ``status.resourceRequests`` only when its scheduler tries a Workload; the ones behind
    the head of a queue wait without them. What the triggers' cache keeps (``essential_workload``) still
    says what it needs, so the task log names it rather than "It needs  in ClusterQueue"."""
    from kueue_ray.kube.essential import essential_workload

    untried = pending("8")
    del untried["status"]
    untried["spec"]["podSets"] = [
        {
            "name": "worker",
            "count": 2,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "ray-worker",
                            "image": "rayproject/ray:2.52.0",
                            "args": ["x"] * 50,
                            "resources": {
                                "requests": {"nvidia.com/gpu": "4"},
                                "limits": {"nvidia.com/gpu": "4"},
                            },
                        }
                    ]
                }
            },
        }
    ]
    kept = essential_workload(untried)
    assert "rayproject" not in str(kept) and "limits" not in str(kept)
    why = explain(kept, SERVE)
    assert why.sentences()[1] == (
        "It needs 8 nvidia.com/gpu (3 of its 4 free) in ClusterQueue team-a-cq, at priority dev-priority 100."
    )
    assert why.stuck


def test_unknown_or_uncovered_requests_are_said_not_explained_as_needing_nothing():
    untried = pending("8")
    del untried["status"]
    why = explain(untried, SERVE)
    assert why.sentences() == [
        "What it needs is not known yet: Kueue writes it (status.resourceRequests) when its scheduler first "
        "tries this Workload."
    ]
    tpu = pending("8")
    tpu["status"]["resourceRequests"] = [{"name": "worker", "resources": {"google.com/tpu": "4"}}]
    assert explain(tpu, SERVE).to_dict()["sentences"] == [
        "ClusterQueue team-a-cq has no quota for what it requests (google.com/tpu): waiting alone will not "
        "admit it."
    ]


def test_a_holder_that_ends_by_itself_is_waited_for_not_a_blocker():
    dev = admitted("rayjob-other", "team-a-cq", "4")
    why = explain(pending("8"), SERVE, dev)
    assert why.stuck  # the service still keeps one GPU for good
    why = explain(pending("7"), SERVE, dev)
    assert not why.stuck
    assert (
        why.verdict()
        == "Can be admitted by waiting: for 1 workload(s) holding its quota that end by themselves."
    )


def test_a_prod_workload_may_preempt_a_dev_holder_but_not_an_equal_prod_service():
    dev = admitted("rayjob-dev", "team-a-cq", "3")
    why = explain(pending("8", priority=1000, klass="prod-priority"), SERVE, dev)
    by_name = {h.name: h for h in why.holders}
    assert by_name["rayjob-dev"].may_take
    assert not by_name["raycluster-serve"].may_take
    assert "preempting rayjob-dev" in explain(pending("7", priority=1000), SERVE, dev).verdict()


def test_a_lower_priority_service_is_no_blocker_for_a_priority_that_may_preempt_it():
    low_service = admitted("raycluster-low", "team-a-cq", "1", priority=100, owner="RayCluster")
    assert not explain(pending("8", priority=1000, klass="prod-priority"), low_service).stuck


def test_another_teams_service_within_its_own_quota_cannot_be_reclaimed_and_shrinks_what_can_be_borrowed():
    theirs = admitted(
        "raycluster-b", "team-b-cq", "2", priority=1000, klass="prod-priority", owner="RayCluster"
    )
    why = explain(pending("7"), theirs)
    assert why.stuck
    [holder] = why.holders
    assert holder.cluster_queue == "team-b-cq" and not holder.may_take
    assert "uses no more than its own quota" in holder.how
    assert why.needs[0].reachable == 6


def test_another_teams_borrowing_job_may_be_reclaimed():
    borrower = admitted("rayjob-b", "team-b-cq", "6", priority=1000, klass="prod-priority")
    why = explain(pending("4"), borrower)
    [holder] = why.holders
    assert holder.may_take and "reclaimable while team-b-cq borrows" in holder.how


def test_without_a_cohort_it_cannot_borrow():
    alone = {**team_queue("solo"), "spec": {**team_queue("solo")["spec"], "cohortName": None}}
    why = explain(pending("2"), queues=(alone,))
    assert "is in no cohort: it cannot borrow" in why.borrowing()
    assert why.holder_lines() == []
    assert "Nothing admitted holds its quota." in why.sentences()


def test_requests_fall_back_to_pod_sets_when_kueue_has_not_summed_them():
    workload = {
        "spec": {
            "podSets": [
                {
                    "name": "worker",
                    "count": 2,
                    "template": {
                        "spec": {
                            "containers": [{"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "4"}}}],
                            "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
                        }
                    },
                }
            ]
        }
    }
    assert {k: str(v) for k, v in requests_of(workload).items()} == {"cpu": "6", "nvidia.com/gpu": "8"}


def test_a_holder_of_a_dag_the_viewer_may_not_read_is_not_named():
    why = explain_queued(
        pending("8"),
        A,
        holdings=holdings_of([SERVE]),
        cluster_queues=(A, B),
        describe=lambda _w: "DAG secret",
        conceal=lambda _w: "a workload of a DAG you cannot read",
    )
    assert why.stuck
    text = " ".join(why.sentences())
    assert "a workload of a DAG you cannot read" in text
    assert "raycluster-serve" not in text and "secret" not in text


def test_the_examples_in_the_docstrings_hold():
    import doctest

    from kueue_ray import holdings, why_queued

    assert doctest.testmod(holdings).failed == 0
    assert doctest.testmod(why_queued).failed == 0
