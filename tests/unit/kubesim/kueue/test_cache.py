"""The controller's Workload index: queue status comes from running sums, so they must match every change."""

from kubesim.kueue.cache import WorkloadIndex
from kubesim.kueue.queue_status import cluster_queue_status


def workload(name: str, *, admitted: bool = False, finished: bool = False) -> dict:
    conditions = []
    status: dict = {"conditions": conditions}
    if admitted:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "head", "flavors": {"cpu": "f"}, "resourceUsage": {"cpu": "2"}, "count": 1}
            ],
        }
        conditions.append({"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"})
        conditions.append({"type": "Admitted", "status": "True", "reason": "Admitted"})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
        "spec": {"queueName": "lq", "active": True},
        "status": status,
    }


CQ = {
    "metadata": {"name": "cq"},
    "spec": {
        "resourceGroups": [{"flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "3"}]}]}]
    },
}


def test_usage_follows_admission_and_finish():
    index = WorkloadIndex()
    pending = workload("a")
    index.update(("ns", "a"), None, pending)
    index.update(("ns", "b"), None, workload("b", admitted=True))
    assert index.queued_count[("ns", "lq")] == 1

    admitted = workload("a", admitted=True)
    index.update(("ns", "a"), pending, admitted)
    status = cluster_queue_status(CQ, index.cluster_queue_tally["cq"], index.queued_count[("ns", "lq")])
    assert (status["pendingWorkloads"], status["reservingWorkloads"], status["admittedWorkloads"]) == (
        0,
        2,
        2,
    )
    assert status["flavorsUsage"] == [
        {"name": "f", "resources": [{"name": "cpu", "total": "4", "borrowed": "1"}]}
    ]

    index.update(("ns", "a"), admitted, workload("a", admitted=True, finished=True))
    index.update(("ns", "b"), index.by_uid["uid-b"], None)
    status = cluster_queue_status(CQ, index.cluster_queue_tally["cq"], 0)
    assert (status["reservingWorkloads"], status["admittedWorkloads"]) == (0, 0)
    assert status["flavorsReservation"][0]["resources"][0]["total"] == "0"
    assert index.holders["cq"] == {}
    assert index.owned_by("uid-b") is None


def test_the_configuration_generation_ignores_the_queues_status_alone():
    """Every admission rewrites its queues' status: that must not make the admission cycle read every
    pending Workload again, while any change a decision reads must."""
    from kubesim.clock import Clock
    from kubesim.kueue.cache import ClusterView
    from kubesim.kueue.world import AC_KEY, CQ_KEY, WATCHED_KEYS
    from kubesim.resources import CRDS_DIR, Registry
    from kubesim.store import Store

    store = Store(Registry(CRDS_DIR), Clock())
    view = ClusterView(store, WATCHED_KEYS, lambda *_: None)
    view.open()
    group = {**CQ["spec"]["resourceGroups"][0], "coveredResources": ["cpu"]}
    queue = {**CQ, "spec": {"resourceGroups": [group]}}
    store.create(CQ_KEY, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", **queue})
    created = view.config_generation
    store.patch(CQ_KEY, "cq", {"status": {"pendingWorkloads": 3}}, subresource="status")
    assert view.config_generation == created, "a status write alone"
    store.patch(CQ_KEY, "cq", {"spec": {"stopPolicy": "Hold"}})
    assert view.config_generation == created + 1, "the spec"
    store.patch(CQ_KEY, "cq", {"metadata": {"labels": {"team": "a"}}})
    assert view.config_generation == created + 2, "the metadata"
    store.create(
        AC_KEY,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {"name": "ac"},
            "spec": {"controllerName": "x"},
        },
    )
    store.patch(AC_KEY, "ac", {"status": {"conditions": []}}, subresource="status")
    assert view.config_generation == created + 4, "an AdmissionCheck's status makes a queue active or not"
    store.delete(CQ_KEY, "cq")
    assert view.config_generation == created + 5, "a deletion"
