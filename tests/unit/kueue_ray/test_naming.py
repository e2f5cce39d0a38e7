"""Deterministic RayJob names and label sanitising."""

import re

import pytest
from kueue_ray.naming import (
    MANAGED_BY_LABEL,
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


def test_retries_find_the_same_name_but_other_runs_and_map_indexes_do_not():
    first = AirflowIdentity("dag", "task", "run-1", map_index=-1, try_number=1)
    retry = AirflowIdentity("dag", "task", "run-1", map_index=-1, try_number=2)
    assert first.rayjob_name() == retry.rayjob_name()
    assert rayjob_name("dag", "task", "run-2") != first.rayjob_name()
    assert rayjob_name("dag", "task", "run-1", 0) != rayjob_name("dag", "task", "run-1", 1)
    assert rayjob_name("dag", "task", "run-1", 0) != first.rayjob_name()


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
    identity = AirflowIdentity("dag", "grp.task", "manual__2026-12-01T10:00:00+00:00", 3, 2)
    annotations = identity.annotations()
    assert annotations[TRY_NUMBER_ANNOTATION] == "2"
    assert AirflowIdentity.from_annotations(annotations) == identity
    assert AirflowIdentity.from_annotations({"unrelated": "x"}) is None
    assert identity.labels()[MANAGED_BY_LABEL] == "airflow-kueue-ray"
    assert identity.same_task(AirflowIdentity("dag", "grp.task", identity.run_id, 3, 5))
    assert not identity.same_task(AirflowIdentity("dag", "grp.task", identity.run_id, 4, 2))


def test_waiter_stamp_round_trips_even_with_slashes_in_the_task_id():
    sensor_try = AirflowIdentity(dag_id="d", task_id="group/wait", run_id="r", map_index=2, try_number=3)
    stamp = Waiter.of(sensor_try).stamp()
    assert stamp == "group/wait/2/3"
    assert Waiter.from_annotations({WAITER_ANNOTATION: stamp}) == Waiter("group/wait", 2, 3)


@pytest.mark.parametrize("stamp", ["garbled", "wait/x/1", "/1/2", ""])
def test_garbled_waiter_stamps_read_as_no_waiter(stamp):
    assert Waiter.from_annotations({WAITER_ANNOTATION: stamp}) is None
