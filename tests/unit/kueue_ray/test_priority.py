"""The run-type priority policy."""

import enum

import pytest
from kueue_ray.errors import PolicyError
from kueue_ray.priority import normalize_run_type, resolve_priority

ALLOWED = ["dev-priority", "prod-priority"]  # lowest first


def decide(run_type, params=None, **kwargs):
    kwargs.setdefault("default_priority", "prod-priority")
    kwargs.setdefault("allowed", ALLOWED)
    return resolve_priority(run_type=run_type, params=params or {}, **kwargs)


@pytest.mark.parametrize(
    ("run_type", "params", "extra", "expected", "source"),
    [
        ("scheduled", {}, {}, "prod-priority", "default"),
        ("scheduled", {"priority": "dev-priority"}, {}, "prod-priority", "default"),
        ("manual", {"priority": "dev-priority"}, {}, "dev-priority", "params"),
        ("manual", {}, {}, "prod-priority", "default"),
        ("manual", {"priority": None}, {}, "prod-priority", "default"),
        ("backfill", {}, {}, "dev-priority", "backfill-policy"),
        ("backfill", {"priority": "prod-priority"}, {}, "dev-priority", "backfill-policy"),
        (
            "backfill",
            {"priority": "prod-priority"},
            {"allow_backfill_priority": True},
            "prod-priority",
            "params",
        ),
        ("backfill", {}, {"allow_backfill_priority": True}, "prod-priority", "default"),
        ("operator_triggered", {"priority": "dev-priority"}, {}, "dev-priority", "params"),
        ("asset_materialization", {}, {}, "prod-priority", "default"),
    ],
)
def test_policy_table(run_type, params, extra, expected, source):
    decision = decide(run_type, params, **extra)
    assert (decision.priority_class, decision.source) == (expected, source)
    assert run_type in decision.note


def test_backfill_note_says_it_was_clamped_and_how_to_allow_it():
    note = decide("backfill", {"priority": "prod-priority"}).note
    assert "clamped to dev-priority" in note
    assert "requested prod-priority" in note
    assert "allow_backfill_priority" in note


@pytest.mark.parametrize(
    ("extras", "expected", "source"),
    [
        ([{"priority": "dev-priority"}], "dev-priority", "asset-event"),
        ([{"priority": "dev-priority"}, {"priority": "prod-priority"}, {}], "prod-priority", "asset-event"),
        ([{"rows": 42}, None], "prod-priority", "default"),
        ([], "prod-priority", "default"),
        ([{"priority": "urgent"}], "prod-priority", "default"),
    ],
)
def test_asset_triggered_runs_inherit_the_highest_upstream_priority(extras, expected, source):
    decision = decide("asset_triggered", default_priority="prod-priority", asset_events_extra=extras)
    assert (decision.priority_class, decision.source) == (expected, source)


def test_asset_inheritance_with_priority_values():
    values = {"high": 1000, "low": 100, "mid": 500}
    decision = resolve_priority(
        run_type="asset_triggered",
        params={},
        default_priority="low",
        allowed=values,
        asset_events_extra=[{"priority": "mid"}, {"priority": "high"}, {"priority": "low"}],
    )
    assert decision.priority_class == "high"


def test_unknown_priority_names_param_and_allowed_values():
    with pytest.raises(PolicyError) as err:
        decide("manual", {"priority": "urgent"})
    assert err.value.field == "params.priority"
    assert "urgent" in str(err.value)
    assert "dev-priority" in str(err.value) and "prod-priority" in str(err.value)


def test_misconfigured_defaults_are_policy_errors():
    with pytest.raises(PolicyError) as err:
        decide("scheduled", default_priority="gold")
    assert err.value.field == "default_priority"
    with pytest.raises(PolicyError) as err:
        decide("backfill", backfill_priority="batch")
    assert err.value.field == "backfill_priority"


def test_run_type_enum_and_str_forms():
    class DagRunType(str, enum.Enum):  # noqa: UP042 - shaped like Airflow's DagRunType
        BACKFILL_JOB = "backfill"
        MANUAL = "manual"

    assert normalize_run_type(DagRunType.BACKFILL_JOB) == "backfill"
    assert normalize_run_type("DagRunType.MANUAL") == "manual"
    assert normalize_run_type("BACKFILL_JOB") == "backfill"
    assert decide(DagRunType.MANUAL, {"priority": "dev-priority"}).priority_class == "dev-priority"


def test_a_backfill_run_without_conf_is_told_it_runs_the_defaults_and_how_to_pass_params():
    from types import SimpleNamespace

    from kueue_ray.priority import backfill_without_conf

    run = SimpleNamespace(run_type="backfill", conf={}, dag_id="text_classifier_finetune")
    warning = backfill_without_conf(run, {"priority": "dev-priority", "epochs": 3})
    assert "runs with the DAG's defaults (priority='dev-priority', epochs=3)" in warning
    assert "Override parameters on existing runs" in warning
    assert "airflow backfill create --dag-id text_classifier_finetune" in warning
    assert "--dag-run-conf" in warning and "/api/v2/backfills" in warning
    assert backfill_without_conf(SimpleNamespace(run_type="backfill", conf=None, dag_id="d"), {}) is not None
    # A backfill that carries params, and any other run, is left alone.
    assert (
        backfill_without_conf(SimpleNamespace(run_type="backfill", conf={"epochs": 2}, dag_id="d"), {})
        is None
    )
    assert backfill_without_conf(SimpleNamespace(run_type="manual", conf={}, dag_id="d"), {}) is None
    assert backfill_without_conf(SimpleNamespace(run_type="scheduled", conf=None, dag_id="d"), {}) is None
