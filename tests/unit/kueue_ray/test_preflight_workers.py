"""The preflight on a MultiKueue manager judges the worker clusters too (``Preflight.check_workers``): it
refuses only when every worker of the check's MultiKueueConfig was read and none can ever admit the RayJob;
anything it cannot read or cannot be sure of leaves the RayJob to Kueue."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowNotFoundException
from kubernetes.client.exceptions import ApiException
from kueue_ray.errors import PreflightError
from kueue_ray.preflight import Preflight

NS, QUEUE = "ray", "mk-queue"


class Cluster:
    """A cluster's Kueue objects as the hook reads them: (plural, namespace, name) -> object."""

    def __init__(self, objects: list[tuple[str, str | None, dict]], refuse: int | None = None) -> None:
        self.objects = {(plural, ns, obj["metadata"]["name"]): obj for plural, ns, obj in objects}
        self.refuse = refuse
        self.reads: list[tuple[str, str]] = []

    def get_kueue_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        self.reads.append((plural, name))
        if self.refuse:
            raise ApiException(status=self.refuse, reason="Forbidden")
        return self.objects.get((plural, namespace, name))

    def list_kueue_objects(self, plural: str, namespace: str | None = None) -> list[dict]:
        return [obj for (p, ns, _), obj in self.objects.items() if p == plural and ns == namespace]

    def raise_explained(self, exc: ApiException, namespace: str | None) -> None:
        raise exc


def named(name: str, **body) -> dict:
    return {"metadata": {"name": name}, **body}


def queues(cpu: str, *, check: dict | None = None, local_queue: bool = True) -> list:
    flavors = [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": cpu}]}]
    spec: dict = {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": flavors}]}
    if check is not None:
        spec["admissionChecksStrategy"] = {"admissionChecks": [check]}
    objects = [
        ("clusterqueues", None, named("cq", spec=spec)),
        ("workloadpriorityclasses", None, named("dev")),
    ]
    if local_queue:
        objects.append(("localqueues", NS, named(QUEUE, spec={"clusterQueue": "cq"})))
    return objects


def manager(*, check: dict | None = None, workers: tuple[str, ...] = ("w1", "w2")) -> Cluster:
    config = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "gpu-workers"}
    return Cluster(
        queues("16", check=check or {"name": "mk"})
        + [
            (
                "admissionchecks",
                None,
                named("mk", spec={"controllerName": "kueue.x-k8s.io/multikueue", "parameters": config}),
            ),
            (
                "admissionchecks",
                None,
                named("prov", spec={"controllerName": "kueue.x-k8s.io/provisioning-request"}),
            ),
            ("multikueueconfigs", None, named("gpu-workers", spec={"clusters": list(workers)})),
        ]
    )


def rayjob(cpu: str) -> SimpleNamespace:
    pod_sets = [{"name": "head", "count": 1, "requests": {"cpu": cpu}}]
    return SimpleNamespace(pod_sets=pod_sets, total_request={"cpu": cpu})


def preflight(on: Cluster, workers: dict[str, Cluster | None]) -> Preflight:
    def worker_hook(name: str) -> Cluster:
        cluster = workers[name]
        if cluster is None:
            raise AirflowNotFoundException(f"The conn_id `kueue_worker_{name}` isn't defined")
        return cluster

    return Preflight(on, worker_hook)


def test_a_rayjob_no_worker_has_the_quota_for_is_refused_naming_each_worker():
    small = {"w1": Cluster(queues("2")), "w2": Cluster(queues("4"))}
    with pytest.raises(PreflightError) as refused:
        preflight(manager(), small).run(rayjob("6"), NS, QUEUE, "dev")
    error = refused.value
    assert (error.field, error.value) == ("resources[cpu]", "6")
    assert "no MultiKueue worker cluster of ClusterQueue cq (w1, w2) can ever admit it" in error.problem
    assert "on w1, RayJob needs 6 CPU (head 6) but ClusterQueue cq provides at most 2" in error.problem
    assert "on w2, RayJob needs 6 CPU (head 6) but ClusterQueue cq provides at most 4" in error.problem
    assert error.fix == "on w1 or w2, raise nominalQuota or request less CPU"


def test_a_worker_without_the_local_queue_cannot_admit_it_either():
    workers = {"w1": Cluster(queues("2")), "w2": Cluster(queues("64", local_queue=False))}
    with pytest.raises(PreflightError) as refused:
        preflight(manager(), workers).run(rayjob("6"), NS, QUEUE, "dev")
    assert "on w2, LocalQueue 'mk-queue' does not exist in namespace 'ray'" in refused.value.problem
    assert "on w2, create a LocalQueue in namespace 'ray'" in refused.value.fix


def test_one_worker_with_room_is_enough():
    workers = {"w1": Cluster(queues("2")), "w2": Cluster(queues("8"))}
    assert preflight(manager(), workers).run(rayjob("6"), NS, QUEUE, "dev").cluster_queue == "cq"


@pytest.mark.parametrize(
    "unjudged",
    [
        pytest.param(None, id="no-airflow-connection"),
        pytest.param(Cluster(queues("2"), refuse=403), id="refused"),
        pytest.param(Cluster(queues("2"), refuse=503), id="unavailable"),
    ],
)
def test_a_worker_that_cannot_be_read_may_admit_it(unjudged, caplog):
    workers = {"w1": Cluster(queues("2")), "w2": unjudged}
    preflight(manager(), workers).run(rayjob("6"), NS, QUEUE, "dev")
    assert "w2" in caplog.text


def test_a_check_on_some_flavors_only_or_another_controller_leaves_the_workers_alone():
    small = {"w1": Cluster(queues("2")), "w2": Cluster(queues("2"))}
    for check in ({"name": "mk", "onFlavors": ["default"]}, {"name": "prov"}):
        on = manager(check=check)
        preflight(on, small).run(rayjob("6"), NS, QUEUE, "dev")
        assert ("multikueueconfigs", "gpu-workers") not in on.reads
    assert not small["w1"].reads


def test_a_queue_without_admission_checks_reads_nothing_more():
    on = Cluster(queues("16"))
    preflight(on, {}).run(rayjob("6"), NS, QUEUE, "dev")
    assert [plural for plural, _ in on.reads] == ["localqueues", "workloadpriorityclasses", "clusterqueues"]


class Silent(Cluster):
    """A worker that never answers (a connection out of Airflow's reach): every read blocks."""

    def __init__(self, objects: list, released: threading.Event) -> None:
        super().__init__(objects)
        self.released = released

    def get_kueue_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        self.released.wait()
        return super().get_kueue_object(plural, name, namespace)


def test_a_worker_that_never_answers_is_left_to_kueue_after_the_deadline(monkeypatch, caplog):
    monkeypatch.setattr("kueue_ray.preflight.WORKER_DEADLINE", 0.5)
    released = threading.Event()
    try:
        workers = {"w1": Cluster(queues("2")), "w2": Silent(queues("2"), released)}
        assert preflight(manager(), workers).run(rayjob("6"), NS, QUEUE, "dev").cluster_queue == "cq"
    finally:
        released.set()
    assert "w2 did not answer within 0.5s" in caplog.text
