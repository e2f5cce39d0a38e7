"""Test-wide setup: Airflow without its examples; mark tests by the folder they live in (unit /
integration / browser / e2e)."""

import os
from pathlib import Path

import pytest

# As the project's Airflow runs (devtools.airflow): without Airflow's example DAGs and example plugins.
# The example plugins install a listener, and a listener makes every task resume on a worker.
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

ROOT = Path(__file__).resolve().parent.parent

CLUSTER_REQUEST_LOGS = pytest.StashKey[list]()
"""kubesim request-log records of test packages that run a kubesim of their own (tests/browser), so the
RBAC test (tests/e2e/test_08_security.py) judges every call the project made in the session."""


def pytest_collection_modifyitems(items):
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("unit", "integration", "browser", "e2e"):
            item.add_marker(getattr(pytest.mark, parts[0]))
