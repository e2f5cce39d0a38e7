"""A triggerer serves one Airflow deployment's waits, so its RayJob and RayService watches select that
deployment's objects only; waits of tasks that predate deployments keep the watch of every RayJob."""

from kueue_ray.hub.resources import RAYJOBS, RAYSERVICES, WORKLOADS, of_deployment
from kueue_ray.hub.subscriptions import Subscription
from kueue_ray.naming import AirflowIdentity
from kueue_ray.trigger import _watched


def rayjob(deployment: str) -> dict:
    identity = AirflowIdentity("dag", "submit", "manual__1", -1, 1, deployment)
    return {"metadata": {"name": "x", "labels": identity.labels(), "annotations": identity.annotations()}}


def test_a_deployments_watch_selects_its_own_rayjobs_and_services_only():
    prod = of_deployment(RAYJOBS, "prod")
    assert prod.label_selector == (
        "app.kubernetes.io/managed-by=airflow-kueue-ray,kueue-ray.airflow.apache.org/deployment=prod"
    )
    assert (
        prod.selects(rayjob("prod")) and not prod.selects(rayjob("staging")) and not prod.selects(rayjob(""))
    )
    assert of_deployment(RAYSERVICES, "prod").selects(rayjob("prod"))
    assert of_deployment(WORKLOADS, "prod") is WORKLOADS, "Workloads carry no labels of ours"
    assert of_deployment(RAYJOBS, "") is RAYJOBS


def test_a_wait_on_another_deployments_rayjob_reads_it_itself():
    assert _watched(rayjob("prod"), "prod")
    assert not _watched(rayjob("staging"), "prod"), "outside prod's watch: the trigger re-reads it"
    assert _watched(rayjob("staging"), "") and _watched(rayjob(""), "")


def test_waits_of_two_deployments_do_not_share_watch_loops():
    prod = Subscription(None, "k8s", "ray", "a", "ua", 300.0, "prod")
    staging = Subscription(None, "k8s", "ray", "b", "ub", 300.0, "staging")
    assert prod.scope == ("k8s", "ray", "prod") and prod.scope != staging.scope
