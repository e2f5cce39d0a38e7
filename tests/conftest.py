"""Test-wide setup: mark tests by the folder they live in (unit / integration / browser / e2e)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CLUSTER_REQUEST_LOGS = pytest.StashKey[list]()
"""kubesim request-log records of test packages that run a kubesim of their own (tests/browser), so the
RBAC test (tests/e2e/test_08_security.py) judges every call the project made in the session."""


def pytest_collection_modifyitems(items):
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("unit", "integration", "browser", "e2e"):
            item.add_marker(getattr(pytest.mark, parts[0]))
