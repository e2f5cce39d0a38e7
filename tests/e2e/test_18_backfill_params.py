"""A backfill trains with the params its user chose, by the path the README documents; one that carries no
params says in its submit log that it runs the DAG's defaults, and how to pass them.

The requests are the ones Airflow 3.3.2's backfill dialog sends (``POST /api/v2/backfills``; read from its
UI bundle, ``createBackfill``): the form's params go out as ``dag_run_conf`` only when "Override parameters
on existing runs" is ticked, and then to the runs the backfill creates too; unticked (the default), the
dialog sends ``dag_run_conf: null`` and every run's conf is empty, whatever the form showed.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import wait_until

pytestmark = pytest.mark.timeout(480)

DAG = "text_classifier_finetune"
FORM = {"priority": "dev-priority", "queue": "user-queue", "epochs": 2, "batch_size": 16, "num_workers": 1}
"""The dialog's params with Epochs set to 2, as its Configuration JSON shows them."""


def dialog_request(day: str, *, override_ticked: bool) -> dict:
    """The body of the dialog's Run button for one day (its "to" date picker sends the end of the day)."""
    return {
        "dag_id": DAG,
        "from_date": f"{day}T00:00:00.000Z",
        "to_date": f"{day}T23:59:59.999Z",
        "max_active_runs": 1,
        "reprocess_behavior": "none",
        "run_backwards": False,
        "run_on_latest_version": True,
        "dag_run_conf": dict(FORM) if override_ticked else None,
    }


def backfill_run(e2e, day: str) -> dict:
    """The run a one-day backfill made for ``day``."""

    def made() -> dict | None:
        runs = [
            r for r in e2e.runs(DAG, run_type="backfill") if (r.get("logical_date") or "").startswith(day)
        ]
        return runs[0] if runs else None

    return wait_until(made, timeout=60, what=f"the backfill run of {day}")


def no_active_backfill(e2e) -> None:
    """Airflow runs one backfill of a DAG at a time (409 otherwise); it completes shortly after its runs."""

    def done() -> bool:
        response = e2e.airflow.api("GET", "/backfills", params={"dag_id": DAG})
        return response.is_success and all(b["completed_at"] for b in response.json()["backfills"])

    wait_until(done, timeout=120, what=f"the earlier backfills of {DAG} to complete")


def test_a_backfill_with_override_ticked_trains_with_the_chosen_epochs(e2e):
    e2e.unpause(DAG)  # the dialog's "unpause" box, ticked by default
    no_active_backfill(e2e)
    backfill, _ = e2e.airflow.create_backfill(dialog_request("2026-10-05", override_ticked=True))
    assert backfill["dag_run_conf"] == FORM
    run = backfill_run(e2e, "2026-10-05")
    assert run["conf"] == FORM

    finished = e2e.wait_run(DAG, run["dag_run_id"], timeout=300)

    assert finished["state"] == "success", e2e.all_logs(DAG, run["dag_run_id"])[-3000:]
    driver = e2e.task_log(DAG, run["dag_run_id"], "wait")
    assert "epoch 2/2" in driver and "epoch 3/3" not in driver, driver[-2000:]
    assert "has no conf" not in e2e.task_log(DAG, run["dag_run_id"], "submit")


def test_a_backfill_without_params_warns_that_it_runs_the_dags_defaults(e2e):
    e2e.unpause(DAG)
    no_active_backfill(e2e)
    backfill, _ = e2e.airflow.create_backfill(dialog_request("2026-10-06", override_ticked=False))
    assert not backfill["dag_run_conf"]
    run = backfill_run(e2e, "2026-10-06")
    assert not run["conf"], "Airflow 3.3 gives the runs of a backfill without dag_run_conf an empty conf"

    finished = e2e.wait_run(DAG, run["dag_run_id"], timeout=300)

    assert finished["state"] == "success", e2e.all_logs(DAG, run["dag_run_id"])[-3000:]
    submit = e2e.task_log(DAG, run["dag_run_id"], "submit")
    warning = next((line for line in submit.splitlines() if "This backfill run has no conf" in line), "")
    assert "WARNING" in warning.upper(), submit[-3000:]
    assert "epochs=3" in warning and "Override parameters on existing runs" in warning
    assert "--dag-run-conf" in warning and "/api/v2/backfills" in warning
    assert "epoch 3/3" in e2e.task_log(DAG, run["dag_run_id"], "wait")
