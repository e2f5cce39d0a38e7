"""The shared Trigger-form Params: they offer what the cluster's Kueue manifests define, refuse anything
else before a run exists, and are cheap to import from a DAG file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from airflow.sdk.definitions.param import ParamValidationError
from kueue_ray.params import (
    LOCAL_QUEUES,
    NAMESPACE,
    PRIORITY_CLASSES,
    PRIORITY_EXPLAINED,
    bounded_int,
    integer_range,
    priority_param,
    queue_param,
)

ROOT = Path(__file__).resolve().parents[3]
KUEUE_DIR = ROOT / "include" / "manifests" / "kueue"


def manifests(kind: str) -> list[dict]:
    return [
        doc
        for path in sorted(KUEUE_DIR.rglob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == kind
    ]


def test_priority_classes_and_their_values_are_the_installed_workload_priority_classes():
    installed = {doc["metadata"]["name"]: doc["value"] for doc in manifests("WorkloadPriorityClass")}
    assert installed == PRIORITY_CLASSES
    assert list(PRIORITY_CLASSES) == sorted(PRIORITY_CLASSES, key=PRIORITY_CLASSES.get), "lowest first"


def test_the_form_explains_each_class_with_its_real_value():
    assert set(PRIORITY_EXPLAINED) == set(PRIORITY_CLASSES)
    for name, value in PRIORITY_CLASSES.items():
        assert PRIORITY_EXPLAINED[name].startswith(f"{name} ({value}): ")


def test_local_queues_are_the_installed_ones_in_the_dags_namespace():
    queues = manifests("LocalQueue")
    assert set(LOCAL_QUEUES) == {doc["metadata"]["name"] for doc in queues}
    assert {doc["metadata"]["namespace"] for doc in queues} == {NAMESPACE}


def test_priority_param_accepts_only_installed_classes():
    param = priority_param("why")
    assert param.resolve() == "dev-priority"
    assert param.resolve("prod-priority") == "prod-priority"
    with pytest.raises(ParamValidationError):
        param.resolve("urgent-priority")


def test_priority_param_shows_what_each_class_means_unless_told_not_to():
    explained = priority_param("why", title="Fine-tune priority").schema
    assert explained["values_display"] == PRIORITY_EXPLAINED
    assert explained["title"] == "Fine-tune priority"
    assert "section" not in explained, "in the form's always-open first section"
    plain = priority_param("why", default="prod-priority", explained=False)
    assert "values_display" not in plain.schema
    assert plain.resolve() == "prod-priority"


def test_queue_param_accepts_only_installed_queues_and_keeps_each_dags_default():
    param = queue_param("team-a", "where")
    assert param.resolve() == "team-a"
    assert param.description == "where"
    assert "section" not in param.schema
    with pytest.raises(ParamValidationError):
        param.resolve("team-c")
    with pytest.raises(ParamValidationError):
        queue_param("team-c", "a default the cluster does not have").resolve()


def test_queue_param_can_say_which_setup_each_queue_belongs_to():
    assert "values_display" not in queue_param("user-queue", "where").schema
    display = queue_param("user-queue", "where", explained=True).schema["values_display"]
    assert display == {
        "user-queue": "user-queue (single-queue setup)",
        "team-a": "team-a (team-queues setup)",
        "team-b": "team-b (team-queues setup)",
        "multikueue-queue": "multikueue-queue (MultiKueue setup: runs on a worker cluster)",
    }


def test_one_forms_labels_cannot_leak_into_another():
    """The explanations are copied into each Param: a DAG that edits its form leaves the others alone."""
    first = priority_param("why")
    first.schema["values_display"]["dev-priority"] = "edited"
    assert priority_param("why").schema["values_display"] == PRIORITY_EXPLAINED


def test_importing_the_params_adds_nothing_beyond_airflows_param():
    """Airflow's own ``Param`` already brings jinja2, yaml and httpx; the shared Params must add no
    module of their own on top (no Kubernetes client, no hook, no manifests): every DAG file pays for it."""
    code = (
        "import sys; from airflow.sdk import Param; before = set(sys.modules); import kueue_ray.params; "
        "print(','.join(sorted(set(sys.modules) - before)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "plugins"), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().split(",") == ["kueue_ray", "kueue_ray.params"]


def test_bounded_int_accepts_its_range_and_refuses_the_rest_instead_of_clamping():
    param = bounded_int(3, 1, 50, title="Epochs", description="Passes over the data.")
    assert integer_range(param) == (1, 50)
    assert param.description == "Passes over the data. Allowed: 1 to 50."
    assert [param.resolve(value) for value in (1, 50)] == [1, 50]
    with pytest.raises(ParamValidationError, match="100 is greater than the maximum of 50"):
        param.resolve(100)
    with pytest.raises(ParamValidationError, match="0 is less than the minimum of 1"):
        param.resolve(0)
    assert "maximum" not in param.schema, "Airflow's number field would clamp 100 to 50"


def test_bounded_int_refuses_a_default_outside_its_own_range():
    with pytest.raises(ValueError, match="Epochs: default 0 is outside 1 to 50"):
        bounded_int(0, 1, 50, title="Epochs", description="Passes.")
