"""kubesim's layout stays layered: every module imports, none imports another in a cycle, none imports the
plugin, the domain never imports the HTTP layer, and no module grows past what one reader takes in."""

import ast
import importlib
from pathlib import Path

import pytest

KUBESIM = Path(__file__).resolve().parents[3] / "kubesim"
MAX_LINES = 550
HTTP_LAYER = "kubesim.apiserver"
ENTRY_POINTS = {"kubesim.__main__", "kubesim.testing"}  # they start the server; nothing imports them


def _module_name(path: Path) -> str:
    parts = path.relative_to(KUBESIM.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(KUBESIM.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST, package: str) -> set[str]:
    """Every module an import statement names, at module level or in a function (a local import does not
    hide a cycle), leaving out the imports under ``if TYPE_CHECKING:`` (they never run)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            # ``from pkg import module`` depends on the module; ``from module import name`` on the module.
            submodules = {f"{base}.{alias.name}" for alias in node.names} & MODULES.keys()
            found.update(submodules or {base})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = _runtime_imports(ast.parse(path.read_text()), package)
        graph[name] = {target for target in imported if target in MODULES and target != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the list of modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_no_module_imports_another_in_a_cycle() -> None:
    assert _cycle(_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_module_imports_the_plugin() -> None:
    for name, path in MODULES.items():
        imported = _runtime_imports(ast.parse(path.read_text()), name)
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
