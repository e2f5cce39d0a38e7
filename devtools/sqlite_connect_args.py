"""SQLite connect args for every Airflow process that `make run`, `make demo` and the e2e tests start.

Why: on SQLite the scheduler, dag-processor, triggerer, api-server, task workers and the `airflow` CLI
all write one file. Python's sqlite3 gives up after 5 s of "database is locked", which a loaded machine
exceeds (e.g. `airflow backfill create` while the scheduler commits). Airflow applies
`[database] sql_alchemy_connect_args` (an import path to a dict) to its SQLite engine, so each writer
waits its turn instead of failing.
"""

CONNECT_ARGS = {"timeout": 60}
"""sqlite3.connect(timeout=...): seconds a connection waits for another writer's lock."""

ASYNC_CONNECT_ARGS = {"timeout": 60}
"""The same for Airflow's async (aiosqlite) engine; a separate dict because Airflow adds
`check_same_thread` to the sync one in place."""
