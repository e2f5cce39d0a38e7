"""The strict layout rules, on every tree of the project's code: no module longer than
``TOOLS_MAX_LINES``, no import cycle between modules and none between packages, counting every import
(module-level, inside functions, and under ``if TYPE_CHECKING:``). The plugin's and kubesim's own layout
tests add their particular rules (what may import what)."""

import ast
from pathlib import Path

import pytest

from tests.layout import STRICT as EVERY_IMPORT
from tests.layout import cycle, import_graph, modules, package_graph, too_long

ROOT = Path(__file__).resolve().parents[2]
TREES = {
    "bench": (ROOT, ROOT / "bench"),
    "devtools": (ROOT, ROOT / "devtools"),
    "kueue_ray": (ROOT / "plugins", ROOT / "plugins" / "kueue_ray"),
    "kubesim": (ROOT, ROOT / "kubesim"),
}
"""Each tree: the folder on ``sys.path`` and the package's folder."""
STRICT = ("bench", "devtools", "kubesim", "kueue_ray")
"""The trees held to these rules: all of them."""
TOOLS_MAX_LINES = 500


def _modules(tree: str) -> dict[str, Path]:
    return modules(*TREES[tree])


@pytest.mark.parametrize("tree", STRICT)
def test_no_module_is_longer_than_a_reader_takes_in(tree: str) -> None:
    assert too_long(_modules(tree), TOOLS_MAX_LINES) == {}, "split each by concern"


@pytest.mark.parametrize("tree", STRICT)
def test_no_module_imports_another_in_a_cycle_counting_every_import(tree: str) -> None:
    assert cycle(import_graph(_modules(tree), **EVERY_IMPORT)) is None


@pytest.mark.parametrize("tree", STRICT)
def test_no_package_imports_another_in_a_cycle(tree: str) -> None:
    assert cycle(package_graph(import_graph(_modules(tree), **EVERY_IMPORT))) is None


HARNESS_USES = {"bench.kube", "bench.stats"}
"""What the benchmarks' harness may import from bench/: the HTTP client and the percentiles; never a
benchmark or a worker."""
WORKERS = ("bench.trigger_worker", "bench.polling_worker")
"""The measured child processes: of bench/ they import only the harness's line protocol."""


def test_the_harness_imports_no_benchmark_and_the_benchmarks_share_it() -> None:
    packages = package_graph(import_graph(_modules("bench"), **EVERY_IMPORT))
    assert packages["bench.harness"] <= HARNESS_USES
    assert {"bench.trigger_scale", "bench.refused_watch", "bench.service_waits", "bench.outage"} <= {
        name for name, targets in packages.items() if "bench.harness" in targets
    }


def test_the_workers_share_the_harness_protocol_and_import_nothing_else_of_bench() -> None:
    graph = import_graph(_modules("bench"), **EVERY_IMPORT)
    for worker in WORKERS:
        assert graph[worker] == {"bench.harness.protocol"}, worker


@pytest.mark.parametrize("tree", ["bench", "devtools"])
def test_no_module_imports_another_ones_private_names(tree: str) -> None:
    found = _modules(tree)
    for name, path in found.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == tree:
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{name} imports {private} from {node.module}: make them public there"


def _plant(root: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return modules(root, root / "pkg")


@pytest.mark.parametrize(
    "closing",
    [
        "def later():\n    from pkg import a\n",
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from pkg.a import A\n",
    ],
    ids=["inside a function", "type-only"],
)
def test_the_strict_graph_sees_a_cycle_an_import_inside_a_function_or_for_types_closes(
    tmp_path: Path, closing: str
) -> None:
    found = _plant(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg import b\n", "pkg/b.py": closing})
    assert cycle(import_graph(found, module_level=True)) is None, "the looser mode misses it"
    assert cycle(import_graph(found, **EVERY_IMPORT)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_the_package_check_sees_two_packages_importing_each_other_through_different_modules(
    tmp_path: Path,
) -> None:
    found = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/batch/__init__.py": "",
            "pkg/batch/job.py": "from pkg.kuberay import pods\n",
            "pkg/batch/kubelet.py": "",
            "pkg/kuberay/__init__.py": "",
            "pkg/kuberay/pods.py": "",
            "pkg/kuberay/rayjob.py": "def run():\n    from pkg.batch.kubelet import start\n",
        },
    )
    graph = import_graph(found, **EVERY_IMPORT)
    assert cycle(graph) is None, "no two modules import each other"
    assert cycle(package_graph(graph)) == ["pkg.batch", "pkg.kuberay", "pkg.batch"]


def test_a_package_using_its_parents_modules_is_no_package_cycle(tmp_path: Path) -> None:
    found = _plant(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/store.py": "",
            "pkg/api/__init__.py": "",
            "pkg/api/server.py": "from pkg import store\n",
            "pkg/main.py": "from pkg.api import server\n",
        },
    )
    assert cycle(package_graph(import_graph(found, **EVERY_IMPORT))) is None


def test_the_length_check_names_a_module_over_the_limit(tmp_path: Path) -> None:
    found = _plant(
        tmp_path, {"pkg/__init__.py": "", "pkg/long.py": "x = 1\n" * 501, "pkg/short.py": "x = 1\n"}
    )
    assert too_long(found, 500) == {"pkg.long": 501}
