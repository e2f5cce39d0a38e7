"""The import graph of a package, read from its source with ``ast``, for the layout tests of kubesim
(tests/unit/kubesim/test_layout.py) and of the plugin (tests/unit/kueue_ray/test_layout.py): which module
imports which, and whether any of them import each other in a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 550
"""No module longer than what one reader takes in at once."""


def modules(root: Path, package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``package_dir`` (``root`` is on sys.path)."""

    def name(path: Path) -> str:
        parts = path.relative_to(root).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    return {name(path): path for path in sorted(package_dir.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(tree: ast.AST, package: str, known: set[str], *, module_level: bool) -> set[str]:
    """Every module an import statement names, leaving out the imports under ``if TYPE_CHECKING:`` (they
    never run) and, with ``module_level``, the ones inside functions (they run only when called, after
    every module has loaded). ``from pkg import module`` counts as importing ``pkg.module`` when that is
    one of the ``known`` modules."""
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
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {base})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def import_graph(found: dict[str, Path], *, module_level: bool) -> dict[str, set[str]]:
    """Module -> the modules of ``found`` it imports."""
    graph = {}
    for name, path in found.items():
        imported = imports(
            ast.parse(path.read_text()), package_of(name, path), set(found), module_level=module_level
        )
        graph[name] = {target for target in imported if target in found and target != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
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
