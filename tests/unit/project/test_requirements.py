"""The image installs the runtime lock only (requirements-runtime.txt), never the development one: no test
tools in production, every module the plugin and the DAGs import is in it, and its pins are the ones
`make test` tests (requirements.txt)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
RUNTIME_IN, RUNTIME_LOCK = ROOT / "requirements-runtime.in", ROOT / "requirements-runtime.txt"
DEV_IN, DEV_LOCK = ROOT / "requirements.in", ROOT / "requirements.txt"
TEST_TOOLS = {"pytest", "pytest-xdist", "pytest-timeout", "ruff", "selenium", "iniconfig"}
"""pluggy is not among them: Airflow itself depends on it (listeners)."""


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line (environment markers dropped)."""
    found = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==([^ ;]+)", line)
        if match:
            found[normalise(match.group(1))] = match.group(2)
    return found


def requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(normalise(re.match(r"[A-Za-z0-9_.-]+", line).group(0)))
    return names


def test_the_image_installs_the_runtime_lock_and_nothing_else():
    dockerfile = (ROOT / "include/docker/Dockerfile").read_text()
    installs = re.findall(r"pip install [^\n]*", dockerfile)
    assert installs == ["pip install --no-cache-dir -r /tmp/requirements-runtime.txt"]
    assert "COPY requirements-runtime.txt /tmp/requirements-runtime.txt" in dockerfile
    assert "requirements.txt" not in dockerfile.replace("requirements-runtime.txt", "")


def test_no_test_tool_is_in_the_runtime_lock():
    runtime = pins(RUNTIME_LOCK)
    dev_only = requirement_names(DEV_IN) - requirement_names(RUNTIME_IN)
    assert {"pytest", "ruff", "selenium"} <= dev_only, "the development set lost its test tools"
    assert (TEST_TOOLS | dev_only - {"msgspec"}) & set(runtime) == set()


def test_the_development_set_is_the_runtime_set_plus_tools_with_the_same_pins():
    assert "-r requirements-runtime.in" in DEV_IN.read_text().splitlines()
    dev, runtime = pins(DEV_LOCK), pins(RUNTIME_LOCK)
    assert requirement_names(RUNTIME_IN) <= set(runtime)
    differing = {
        name: (version, dev[name])
        for name, version in runtime.items()
        if name in dev and dev[name] != version
    }
    assert differing == {}, "the image would run versions the tests never ran"
    assert pins(RUNTIME_LOCK)["apache-airflow"] == "3.3.2"


def test_the_runtime_lock_is_resolved_for_every_platform():
    """--universal: linux x86_64 and aarch64 (the official image's platforms), with markers where they differ."""
    header = RUNTIME_LOCK.read_text().splitlines()[1]
    assert "--universal" in header and "--python-version 3.11" in header and "-c requirements.txt" in header


def imported_distributions(folders: list[Path]) -> set[str]:
    """The installed distributions the modules under ``folders`` import at any level (function-local too)."""
    local = {p.name for folder in folders for p in folder.iterdir()} | {"kueue_ray"}
    tops = set()
    for folder in folders:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    tops |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    tops.add(node.module.split(".")[0])
    tops = {t for t in tops if t not in sys.stdlib_module_names and f"{t}.py" not in local and t not in local}
    by_module = importlib.metadata.packages_distributions()
    missing = tops - set(by_module)
    assert not missing, f"imports no installed distribution provides: {missing}"
    return {normalise(dist) for top in tops for dist in by_module[top]}


@pytest.mark.parametrize("folders", [["plugins", "dags"]])
def test_everything_the_plugin_and_dags_import_is_in_the_runtime_lock(folders):
    distributions = imported_distributions([ROOT / f for f in folders])
    assert {"apache-airflow-core", "kubernetes", "kubernetes-asyncio", "httpx"} <= distributions
    assert distributions - set(pins(RUNTIME_LOCK)) == set()
