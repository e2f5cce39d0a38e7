"""Test-wide setup: Airflow without its examples; mark tests by the folder they live in (unit /
integration / e2e)."""

import os
from pathlib import Path

import pytest

# As the project's Airflow runs (devtools.airflow): without Airflow's example DAGs and example plugins.
# The example plugins install a listener, and a listener makes every task resume on a worker.
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items):
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, parts[0]))
