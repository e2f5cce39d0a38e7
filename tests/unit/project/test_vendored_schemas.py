"""tests/schemas/ holds upstream schemas verbatim: each file matches the checksum recorded when it was
fetched (tests/schemas/refresh.sh), and the README names its source, version and licence."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def recorded() -> dict[str, str]:
    sums = {}
    for line in (SCHEMAS / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name] = digest
    return sums


@pytest.mark.parametrize("name", sorted(recorded()))
def test_vendored_schema_is_unmodified(name):
    assert hashlib.sha256((SCHEMAS / name).read_bytes()).hexdigest() == recorded()[name]


def test_every_schema_file_is_recorded_and_described():
    files = {p.name for p in SCHEMAS.glob("*.json")}
    assert files == set(recorded()), "a schema without a checksum, or a checksum without its file"
    readme = (SCHEMAS / "README.md").read_text()
    for name in files:
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}`"))
        assert "Apache License 2.0" in row and "github.com" in row
