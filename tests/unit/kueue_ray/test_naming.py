"""Deterministic RayJob names and label sanitising."""

import re

import pytest
from kueue_ray.naming import (
    DEPLOYMENT_LABEL,
    MANAGED_BY_LABEL,
    TASK_INSTANCE_LABEL,
    TRY_NUMBER_ANNOTATION,
    WAITER_ANNOTATION,
    AirflowIdentity,
    Waiter,
    is_label_value,
    label_value,
    rayjob_name,
)

DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def test_name_is_readable_and_stable():
    name = rayjob_name("ml_pipeline", "train_model", "manual__2026-12-01T10:00:00+00:00")
    assert name.startswith("ml-pipeline-train-model-")
    assert name == rayjob_name("ml_pipeline", "train_model", "manual__2026-12-01T10:00:00+00:00")


def test_every_deployment_run_map_index_and_try_gets_a_name_of_its_own():
    first = AirflowIdentity("dag", "task", "run-1", map_index=-1, try_number=1, deployment="prod")
    names = {
        first.rayjob_name(),
        AirflowIdentity("dag", "task", "run-1", -1, 2, "prod").rayjob_name(),  # a retry or a Clear
        AirflowIdentity("dag", "task", "run-1", -1, 1, "staging").rayjob_name(),  # same DAG and run id
        AirflowIdentity("dag", "task", "run-2", -1, 1, "prod").rayjob_name(),
        AirflowIdentity("dag", "task", "run-1", 0, 1, "prod").rayjob_name(),
        AirflowIdentity("dag", "task", "run-1", 1, 1, "prod").rayjob_name(),
    }
    assert len(names) == 6


def test_every_try_of_a_task_instance_shares_one_selector_and_no_other_deployment_does():
    first = AirflowIdentity("dag", "task", "run-1", -1, 1, "prod")
    retry = AirflowIdentity("dag", "task", "run-1", -1, 3, "prod")
    staging = AirflowIdentity("dag", "task", "run-1", -1, 1, "staging")
    assert first.task_instance_selector() == retry.task_instance_selector()
    assert first.labels()[TASK_INSTANCE_LABEL] == retry.labels()[TASK_INSTANCE_LABEL]
    assert staging.task_instance_selector() != first.task_instance_selector()
    assert first.same_task(retry) and not first.same_task(staging)


def test_a_legacy_name_is_the_name_rayjobs_had_before_deployments():
    identity = AirflowIdentity("dag", "task", "run-1", -1, 2, "prod")
    # the formula every RayJob was named by before names carried the deployment and the try
    assert identity.legacy_rayjob_name() == rayjob_name("dag", "task", "run-1", -1)
    assert (
        identity.legacy_rayjob_name()
        == "dag-task-" + __import__("hashlib").sha256(b'["dag", "run-1", "task", -1]').hexdigest()[:10]
    )
    assert DEPLOYMENT_LABEL not in AirflowIdentity("dag", "task", "run-1").labels()


@pytest.mark.parametrize(
    ("dag_id", "task_id"),
    [
        ("a" * 200, "b" * 200),
        ("weather_forecasting_aurora_finetune_and_serve_pipeline", "t"),
        ("d", "finetune_the_aurora_weather_foundation_model_on_era5_reanalysis"),
        ("2024_backfill", "Task.With.Dots"),
        ("___", "---"),
        ("DAG ID With Spaces", "group.inner_task"),
    ],
)
def test_names_are_dns1035_and_at_most_47_chars(dag_id, task_id):
    name = rayjob_name(dag_id, task_id, "scheduled__2026-12-01T00:00:00+00:00", 7)
    assert len(name) <= 47
    assert DNS_1035.match(name), name


def test_long_ids_sharing_a_prefix_still_differ():
    base = "x" * 100
    assert rayjob_name(base + "1", "t", "r") != rayjob_name(base + "2", "t", "r")


def test_label_value_keeps_valid_values_and_fixes_others():
    assert label_value("ml_pipeline") == "ml_pipeline"
    assert label_value("group.task-1") == "group.task-1"
    assert label_value("manual__2026-12-01T10:00:00+00:00") == "manual__2026-12-01T10_00_00_00_00"
    assert label_value("_private_") == "private"


def test_long_label_values_are_truncated_with_a_hash():
    long_a, long_b = "a" * 80 + "1", "a" * 80 + "2"
    assert is_label_value(label_value(long_a))
    assert len(label_value(long_a)) == 63
    assert label_value(long_a) != label_value(long_b)
    assert is_label_value(label_value("%%%"))


def test_identity_round_trips_through_annotations():
    identity = AirflowIdentity("dag", "grp.task", "manual__2026-12-01T10:00:00+00:00", 3, 2, "prod")
    annotations = identity.annotations()
    assert annotations[TRY_NUMBER_ANNOTATION] == "2"
    assert AirflowIdentity.from_annotations(annotations) == identity
    assert AirflowIdentity.from_annotations({"unrelated": "x"}) is None
    assert identity.labels()[MANAGED_BY_LABEL] == "airflow-kueue-ray"
    assert identity.same_task(AirflowIdentity("dag", "grp.task", identity.run_id, 3, 5, "prod"))
    assert not identity.same_task(AirflowIdentity("dag", "grp.task", identity.run_id, 4, 2, "prod"))
    assert not identity.same_task(AirflowIdentity("dag", "grp.task", identity.run_id, 3, 2, "staging"))


def test_waiter_stamp_round_trips_even_with_slashes_in_the_task_id():
    sensor_try = AirflowIdentity(dag_id="d", task_id="group/wait", run_id="r", map_index=2, try_number=3)
    stamp = Waiter.of(sensor_try).stamp()
    assert stamp == "group/wait/2/3"
    assert Waiter.from_annotations({WAITER_ANNOTATION: stamp}) == Waiter("group/wait", 2, 3)


@pytest.mark.parametrize("stamp", ["garbled", "wait/x/1", "/1/2", ""])
def test_garbled_waiter_stamps_read_as_no_waiter(stamp):
    assert Waiter.from_annotations({WAITER_ANNOTATION: stamp}) is None
