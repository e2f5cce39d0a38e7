"""The plugin's layout stays layered: every module imports, none imports another in a cycle, none imports
kubesim (the plugin must run against a real cluster, with kubesim nowhere in sight), and no module grows
past what one reader takes in.

That the DAG files' imports load no Kubernetes client is checked where the DAG files are parsed
(``tests/unit/project/test_dags.py``), in a fresh interpreter, as the dag-processor does."""

import ast
import importlib
from pathlib import Path

import pytest

from tests.layout import MAX_LINES, cycle, import_graph, imports, modules

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
MODULES = modules(PLUGINS, PLUGINS / "kueue_ray")


def _graph() -> dict[str, set[str]]:
    """Module-level imports among the plugin's modules: the order Python loads them in. Imports inside
    functions are left out: they run only when called, after every module has loaded, which is how the
    plugin keeps Kubernetes clients out of a DAG parse."""
    return import_graph(MODULES, module_level=True)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_imports(name: str) -> None:
    importlib.import_module(name)


def test_no_module_imports_another_in_a_cycle_at_module_level() -> None:
    assert cycle(_graph()) is None


def _every_import_graph() -> dict[str, set[str]]:
    """Every import among the plugin's modules: module-level, inside functions, and under ``if
    TYPE_CHECKING:`` (``imports`` leaves those out, so their bodies are read as modules of their own)."""
    graph = import_graph(MODULES, module_level=False)
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                body = ast.Module(body=node.body, type_ignores=[])
                graph[name] |= imports(body, package, set(MODULES), module_level=False) & set(MODULES) - {
                    name
                }
    return graph


def test_no_module_imports_another_in_a_cycle_counting_every_import() -> None:
    """A cycle closed by an import inside a function or for type hints only is still two modules that
    cannot be read, or moved, one without the other: the shared piece gets a home both import."""
    assert cycle(_every_import_graph()) is None


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_a_package_importing_its_submodules_is_no_cycle() -> None:
    """``kueue_ray.hub`` names what its submodules define (``kueue_ray.hub.watchhub``'s ``HUB``): that must
    not read as a cycle, and none of them imports the package back."""
    graph = _graph()
    assert "kueue_ray.hub.watchhub" in graph["kueue_ray.hub"]
    assert not {
        name for name in graph if name.startswith("kueue_ray.hub.") and "kueue_ray.hub" in graph[name]
    }


def test_the_triggerers_watch_hub_imports_no_hook() -> None:
    """The hub is handed what reads a wait's objects (``Subscription.reader``, the trigger's hook): it
    shares watches and reads, and knows nothing of how a RayJob or a RayService is read."""
    graph = _every_import_graph()
    hooks = {"kueue_ray.hook", "kueue_ray.async_hook", "kueue_ray.rayservice.hook"}
    hub = {name for name in graph if name == "kueue_ray.hub" or name.startswith("kueue_ray.hub.")}
    assert hub and not {(name, hook) for name in hub for hook in graph[name] & hooks}


def test_the_plugin_imports_nothing_from_kubesim() -> None:
    for path in [*MODULES.values(), *PLUGINS.glob("*.py")]:
        tree = ast.parse(path.read_text())
        imported = imports(tree, "kueue_ray", set(MODULES), module_level=False)
        assert not {m for m in imported if m.split(".")[0] == "kubesim"}, path


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_longer_than_a_reader_takes_in(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[name]} has {lines} lines: split it by concern"
