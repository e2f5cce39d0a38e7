"""DAG parse cost (issue 7 §3): each dags/*.py against an empty DAG file.

Each file is parsed in a fresh interpreter that has already imported Airflow and ``DagBag``, as a
dag-processor child has, so the figures are what the DAG file itself adds:

* ``cold_ms``: the first ``DagBag.process_file`` in that process, including every module the file pulls
  in (our plugin, the cncf provider pieces, ...);
* ``warm_ms``: the median of five re-parses once those modules are cached (what every later parse of an
  unchanged import set costs);
* ``import_ms`` / ``new_modules``: from ``python -X importtime``, the summed self time and the count of
  modules first imported by the DAG file; ``kubernetes_modules`` lists any ``kubernetes`` /
  ``kubernetes_asyncio`` module among them (the target is none: the client belongs in the worker and
  triggerer, not in the parser).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = "BENCH-PARSE-START"

EMPTY_DAG = '''"""An empty DAG: the parse-cost baseline."""
from datetime import datetime

from airflow.sdk import DAG

with DAG("empty_baseline", schedule=None, start_date=datetime(2026, 1, 1)):
    pass
'''

CHILD = f"""
import json, statistics, sys, time
from airflow.models.dagbag import DagBag
path = sys.argv[1]
bag = DagBag(dag_folder=path, collect_dags=False)
before = set(sys.modules)
sys.stderr.write("{MARKER}\\n"); sys.stderr.flush()
start = time.perf_counter()
dags = bag.process_file(path, only_if_updated=False)
cold = time.perf_counter() - start
new = sorted(set(sys.modules) - before)
warm = []
for _ in range(5):
    start = time.perf_counter()
    bag.process_file(path, only_if_updated=False)
    warm.append(time.perf_counter() - start)
print(json.dumps({{"dags": [d.dag_id for d in dags], "errors": {{k: str(v)[:300] for k, v in bag.import_errors.items()}},
    "cold_ms": cold * 1000, "warm_ms": statistics.median(warm) * 1000, "new_modules": new}}))
"""


def _imports(stderr: str) -> tuple[float, list[str]]:
    """From the ``-X importtime`` lines after the marker: summed self time (ms), and the five direct
    imports of the DAG file with the largest cumulative time (``name (ms)``), to say where it goes."""
    total_us = 0
    direct: list[tuple[int, str]] = []
    after = False
    for line in stderr.splitlines():
        if line.strip() == MARKER:
            after = True
            continue
        if not (after and line.startswith("import time:") and line.count("|") == 2):
            continue
        self_us, cumulative_us, name = line.split(":", 1)[1].split("|")
        if not self_us.strip().isdigit():
            continue
        total_us += int(self_us)
        if len(name) - len(name.lstrip()) <= 2:  # imported by the DAG file itself (or its first hop)
            direct.append((int(cumulative_us), name.strip()))
    top = [f"{name} ({us / 1000:.0f})" for us, name in sorted(direct, reverse=True)[:5]]
    return total_us / 1000, top


def measure_file(path: Path) -> dict:
    """Parse one DAG file in a fresh interpreter; return its parse times and import footprint."""
    env_path = f"{ROOT / 'plugins'}:{ROOT}"
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**_base_env(), "PYTHONPATH": env_path},
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        return {"file": path.name, "error": completed.stderr.strip().splitlines()[-1:]}
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    modules = result.pop("new_modules")
    import_ms, top_imports = _imports(completed.stderr)
    return {
        "file": path.name,
        **{k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()},
        "import_ms": round(import_ms, 1),
        "top_imports_ms": top_imports,
        "new_modules": len(modules),
        "kubernetes_modules": [m for m in modules if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio")],
    }


def _base_env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    return env


def run(dags_dir: Path = ROOT / "dags") -> dict:
    """Every DAG file next to the empty baseline, with its ratio to the baseline's cold and warm parse."""
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as directory:
        empty = Path(directory) / "empty_dag.py"
        empty.write_text(EMPTY_DAG)
        baseline = measure_file(empty)
    rows = [measure_file(path) for path in sorted(dags_dir.glob("*.py"))]
    for row in rows:
        if "cold_ms" in row and "cold_ms" in baseline:
            row["cold_ratio"] = round(row["cold_ms"] / baseline["cold_ms"], 2)
            row["warm_ratio"] = round(row["warm_ms"] / baseline["warm_ms"], 2)
    return {"baseline": baseline, "dags": rows, "target_ratio": 1.5}
