"""`make airflow`: the CLI runs with `make run`'s environment, and on SQLite a command that met "database is
locked" runs again (Airflow rolled it back)."""

from __future__ import annotations

import json
import stat

import pytest

from devtools import cli


@pytest.fixture
def state(tmp_path, monkeypatch):
    path = tmp_path / "airflow-cli.json"
    monkeypatch.setattr(cli, "CLI_STATE", path)
    monkeypatch.setattr(cli, "LOCK_PAUSE", 0.01)
    return path


def fake_airflow(tmp_path, failures: int, message: str):
    """An `airflow` that fails ``failures`` times with ``message``, then prints its environment's home."""
    counter = tmp_path / "calls"
    script = tmp_path / "airflow"
    script.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}\n"
        f'if [ $n -le {failures} ]; then echo "{message}"; exit 1; fi\n'
        'echo "home=$AIRFLOW_HOME args=$*"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), counter


def test_without_make_run_it_says_to_start_it(state, capsys):
    assert cli.main(["dags", "list"]) == 2
    assert "`make run` is not running in this checkout" in capsys.readouterr().err


def test_it_runs_with_make_runs_environment(state, tmp_path, capfd):
    state.write_text(json.dumps({"pid": 1, "env": {"AIRFLOW_HOME": "/run/airflow"}}))
    airflow, _ = fake_airflow(tmp_path, 0, "")
    assert cli.main(["dags", "list"], airflow=airflow) == 0
    assert "home=/run/airflow args=dags list" in capfd.readouterr().out


def test_on_sqlite_a_locked_database_is_retried(state, tmp_path, capfd):
    state.write_text(json.dumps({"pid": 1, "env": {"AIRFLOW_HOME": "/run/airflow"}}))
    airflow, counter = fake_airflow(tmp_path, 2, "sqlite3.OperationalError: database is locked")
    assert cli.main(["backfill", "create"], airflow=airflow) == 0
    assert counter.read_text().strip() == "3"
    assert "running it again (attempt 3 of 3)" in capfd.readouterr().err


def test_other_failures_and_postgresql_are_not_retried(state, tmp_path):
    state.write_text(json.dumps({"pid": 1, "env": {"AIRFLOW_HOME": "/run/airflow"}}))
    airflow, counter = fake_airflow(tmp_path, 1, "DAG not found")
    assert cli.main(["dags", "trigger", "nope"], airflow=airflow) == 1
    assert counter.read_text().strip() == "1"
    env = {"AIRFLOW_HOME": "/run/airflow", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://x"}
    state.write_text(json.dumps({"pid": 1, "env": env}))
    counter.unlink()
    airflow, counter = fake_airflow(tmp_path, 1, "database is locked")
    assert cli.main(["dags", "trigger", "x"], airflow=airflow) == 1
    assert counter.read_text().strip() == "1"
