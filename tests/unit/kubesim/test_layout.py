"""kubesim's layout stays layered: every module imports, none imports another in a cycle, none imports the
plugin, the domain never imports the HTTP layer, and no module grows past what one reader takes in."""

import ast
import importlib
from pathlib import Path

import pytest

from tests.layout import MAX_LINES, cycle, import_graph, imports, modules

KUBESIM = Path(__file__).resolve().parents[3] / "kubesim"
HTTP_LAYER = "kubesim.apiserver"
ENTRY_POINTS = {"kubesim.__main__", "kubesim.testing"}  # they start the server; nothing imports them
MODULES = modules(KUBESIM.parent, KUBESIM)


def _graph() -> dict[str, set[str]]:
    """Every import, local ones too: kubesim imports inside functions only for speed, never to break a
    cycle, so a local import back is a cycle all the same."""
    return import_graph(MODULES, module_level=False)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_no_module_imports_another_in_a_cycle() -> None:
    assert cycle(_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_module_imports_the_plugin() -> None:
    for name, path in MODULES.items():
        imported = imports(ast.parse(path.read_text()), name, set(MODULES), module_level=False)
        assert not {m for m in imported if m.split(".")[0] in ("kueue_ray", "plugins")}, name


def test_the_domain_never_imports_the_http_layer() -> None:
    for name, targets in _graph().items():
        if name.startswith(HTTP_LAYER) or name in ENTRY_POINTS:  # the HTTP layer itself, and its starters
            continue
        assert not {t for t in targets if t.startswith(HTTP_LAYER)}, f"{name} imports the HTTP layer"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_longer_than_a_reader_takes_in(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]} has {lines} lines: split it by concern"
