"""The benchmarks' PostgreSQL: a server Airflow can use through both drivers it derives, gone after stop."""

import asyncio

import pytest
import sqlalchemy
from sqlalchemy.ext.asyncio import create_async_engine

from devtools.airflow import airflow_environment
from devtools.postgres import PostgresUnavailable, start_postgres


@pytest.fixture(scope="module")
def postgres():
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    yield server
    server.stop()


def test_airflow_reaches_it_with_the_sync_and_the_derived_async_driver(postgres):
    from airflow.settings import _get_async_conn_uri_from_sync

    engine = sqlalchemy.create_engine(postgres.sqlalchemy_url)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE probe (n int)")
        connection.exec_driver_sql("INSERT INTO probe VALUES (1)")
    engine.dispose()

    async def read() -> int:
        engine = create_async_engine(_get_async_conn_uri_from_sync(postgres.sqlalchemy_url))
        async with engine.connect() as connection:
            value = (await connection.exec_driver_sql("SELECT n FROM probe")).scalar()
        await engine.dispose()
        return value

    assert asyncio.run(read()) == 1


def test_airflow_on_it_gets_no_sqlite_connect_args(postgres, tmp_path):
    """SQLite's lock-wait args would be passed to psycopg2, which rejects them."""
    env = airflow_environment(tmp_path, port=8080, kubeconfig=None, database_url=postgres.sqlalchemy_url)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == postgres.sqlalchemy_url
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS" not in env
    sqlite = airflow_environment(tmp_path, port=8080, kubeconfig=None)
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in sqlite
    assert (
        sqlite["AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS"] == "devtools.sqlite_connect_args.CONNECT_ARGS"
    )


def test_stop_removes_the_server_and_its_files():
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    server.stop()
    assert not server.directory.exists()
    with pytest.raises(sqlalchemy.exc.OperationalError):
        sqlalchemy.create_engine(server.sqlalchemy_url).connect()
