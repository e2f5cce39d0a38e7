"""The benchmark's RayJobs carry what the plugin's operator stamps, so a triggerer caches as much of each as
it would of a real one."""

from __future__ import annotations

from kueue_ray.naming import AirflowIdentity

from bench.harness.cluster import DEPLOYMENT, MANAGED, rayjob


def test_a_managed_rayjob_carries_the_operators_labels_and_annotations():
    body = rayjob("job-00007", managed=True, duration="inf")
    metadata = body["metadata"]
    identity = AirflowIdentity(
        dag_id="bench",
        task_id="wait",
        run_id=metadata["annotations"]["airflow.apache.org/run-id"],
        deployment=DEPLOYMENT,
    )
    assert metadata["labels"] == {**MANAGED, **identity.labels()}
    assert {k: v for k, v in metadata["annotations"].items() if not k.startswith("kubesim.dev/")} == (
        identity.annotations()
    )
    assert "job-00007" in identity.run_id, "a run of its own per RayJob"


def test_the_blocker_is_not_the_plugins():
    assert (
        "app.kubernetes.io/managed-by"
        not in rayjob("blocker", managed=False, duration="inf")["metadata"]["labels"]
    )
