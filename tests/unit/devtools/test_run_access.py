"""`make run`'s teams: every shipped DAG belongs to exactly one team's bundle, the restricted user's DAG to
theirs, and the users' string is what Airflow's simple auth manager reads."""

from __future__ import annotations

from devtools.airflow import ROOT
from devtools.run_access import (
    OTHER_TEAM,
    RESTRICTED_DAGS,
    RESTRICTED_TEAM,
    multi_team_environment,
    team_bundles,
    users,
)


def test_every_shipped_dag_is_in_one_teams_bundle_and_the_restricted_dag_alone_in_its_own(tmp_path):
    bundles = team_bundles(ROOT / "dags", tmp_path / "bundles")
    linked = {team: sorted(p.stem for p in path.glob("*.py")) for team, path in bundles.items()}
    assert linked[RESTRICTED_TEAM] == sorted(RESTRICTED_DAGS)
    shipped = sorted(p.stem for p in (ROOT / "dags").glob("*.py"))
    assert sorted(linked[RESTRICTED_TEAM] + linked[OTHER_TEAM]) == shipped
    link = bundles[RESTRICTED_TEAM] / f"{RESTRICTED_DAGS[0]}.py"
    assert link.is_symlink() and link.read_text() == (ROOT / "dags" / link.name).read_text()


def test_the_users_and_bundles_are_configured_as_airflows_multi_team_mode_reads_them(tmp_path, monkeypatch):
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.configuration import conf

    env = multi_team_environment(team_bundles(ROOT / "dags", tmp_path / "bundles"))
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == users()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert conf.getboolean("core", "multi_team")
    found = {user.username: (user.role, user.teams) for user in SimpleAuthManager.get_users()}
    assert found == {
        "admin": ("admin", []),
        "viewer": ("viewer", [OTHER_TEAM, RESTRICTED_TEAM]),
        "nlp": ("user", [RESTRICTED_TEAM]),
    }
