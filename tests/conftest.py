"""Test-wide setup: mark tests by the folder they live in (unit / integration / e2e)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items):
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("unit", "integration", "e2e"):
            item.add_marker(getattr(pytest.mark, parts[0]))
