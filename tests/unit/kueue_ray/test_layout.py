"""The plugin's layout stays layered: every module imports, none imports another in a cycle, none imports
kubesim (the plugin must run against a real cluster, with kubesim nowhere in sight), and no module grows
past what one reader takes in.

That the DAG files' imports load no Kubernetes client is checked where the DAG files are parsed
(``tests/unit/project/test_dags.py``), in a fresh interpreter, as the dag-processor does."""

import ast
import importlib
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
PACKAGE = PLUGINS / "kueue_ray"
MAX_LINES = 550


def _module_name(path: Path) -> str:
    parts = path.relative_to(PLUGINS).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, package: str, *, module_level: bool) -> set[str]:
    """Every module an import statement names, leaving out the imports under ``if TYPE_CHECKING:`` (they
    never run) and, with ``module_level``, the ones inside functions (they run only when called, after
    every module has loaded, which is how the plugin keeps Kubernetes clients out of a DAG parse)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if module_level and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
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


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _graph() -> dict[str, set[str]]:
    """Module-level imports among the plugin's modules: the order Python loads them in."""
    graph = {}
    for name, path in MODULES.items():
        imported = _imports(ast.parse(path.read_text()), _package_of(name), module_level=True)
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


def test_no_module_imports_another_in_a_cycle_at_module_level() -> None:
    assert _cycle(_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_a_package_importing_its_submodules_is_no_cycle() -> None:
    """``kueue_ray.hub`` imports ``kueue_ray.hub.scope``, which imports ``WatchHub`` from it for type
    hints only: that must not read as a cycle, and a module-level import back would."""
    graph = _graph()
    assert "kueue_ray.hub.scope" in graph["kueue_ray.hub"]
    assert "kueue_ray.hub" not in graph["kueue_ray.hub.scope"]


def test_the_plugin_imports_nothing_from_kubesim() -> None:
    for path in [*MODULES.values(), *PLUGINS.glob("*.py")]:
        tree = ast.parse(path.read_text())
        imported = _imports(tree, "kueue_ray", module_level=False)
        assert not {m for m in imported if m.split(".")[0] == "kubesim"}, path


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_longer_than_a_reader_takes_in(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]} has {lines} lines: split it by concern"
