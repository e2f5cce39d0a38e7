"""The import graph of a package, read from its source with ``ast``, for the layout tests of kubesim
(tests/unit/kubesim/test_layout.py), of the plugin (tests/unit/kueue_ray/test_layout.py) and of the
tools (tests/unit/test_layout_tools.py): which module imports which, whether any of them import each
other in a cycle, and whether any of its packages do."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 500
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


def imports(
    tree: ast.AST, package: str, known: set[str], *, module_level: bool, type_checking: bool = False
) -> set[str]:
    """Every module an import statement names, leaving out the imports under ``if TYPE_CHECKING:`` (they
    never run) unless ``type_checking``, and, with ``module_level``, the ones inside functions (they run
    only when called, after every module has loaded). ``from pkg import module`` counts as importing
    ``pkg.module`` when that is one of the ``known`` modules.

    ``STRICT`` (``module_level=False, type_checking=True``) counts every import: a cycle a function-level
    or type-only import closes is still two modules that cannot be understood (or moved) one without the
    other."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
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


STRICT = {"module_level": False, "type_checking": True}
"""The ``import_graph`` mode that counts every import: module-level, inside functions, and type-only."""


def import_graph(
    found: dict[str, Path], *, module_level: bool, type_checking: bool = False
) -> dict[str, set[str]]:
    """Module -> the modules of ``found`` it imports."""
    graph = {}
    for name, path in found.items():
        imported = imports(
            ast.parse(path.read_text()),
            package_of(name, path),
            set(found),
            module_level=module_level,
            type_checking=type_checking,
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


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph one level up: each import between two modules becomes an import between the two
    siblings that hold them, the children of the deepest package both are in (a subpackage, or a module
    directly in that package). ``a.b.x`` importing ``a.c.y`` is ``a.b`` importing ``a.c``; ``a.b.x``
    importing ``a.y`` is ``a.b`` importing ``a.y``. An import between a package and a module inside it
    relates no siblings and is left to the module graph.

    >>> package_graph({"a.b.x": {"a.c.y"}, "a.c.y": {"a.z"}, "a.z": set()})
    {'a.b': {'a.c'}, 'a.c': {'a.z'}, 'a.z': set()}
    """
    found: dict[str, set[str]] = {}
    for source, targets in graph.items():
        for target in targets:
            a, b = source.split("."), target.split(".")
            common = 0
            while common < min(len(a), len(b)) and a[common] == b[common]:
                common += 1
            if common in (len(a), len(b)):  # one holds the other
                continue
            found.setdefault(".".join(a[: common + 1]), set()).add(".".join(b[: common + 1]))
    for node in [*found.values()]:
        for target in node:
            found.setdefault(target, set())
    return dict(sorted(found.items()))


def too_long(found: dict[str, Path], max_lines: int = MAX_LINES) -> dict[str, int]:
    """The modules longer than ``max_lines``, with their length."""
    lengths = {name: len(path.read_text().splitlines()) for name, path in found.items()}
    return {name: lines for name, lines in lengths.items() if lines > max_lines}
