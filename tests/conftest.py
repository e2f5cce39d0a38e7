"""Test-wide setup: Airflow without its examples; mark tests by the folder they live in (unit /
integration / browser / e2e), and put the browser and e2e tests in four xdist groups that run side by side
(`make test`: ``pytest -n 4 --dist loadgroup tests/browser tests/e2e``)."""

import os
import re
from pathlib import Path

import pytest

# As the project's Airflow runs (devtools.airflow): without Airflow's example DAGs and example plugins.
# The example plugins install a listener, and a listener makes every task resume on a worker.
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Operators run in-process by the unit and integration tests belong to this deployment (no Variable
# store without an Airflow). Every Airflow a test starts (devtools.airflow) drops it and keeps the
# default: a deployment identity generated in its own metadata database.
os.environ.setdefault("AIRFLOW__KUEUE_RAY__DEPLOYMENT", "tests")
# Triggers the unit and integration tests run in-process resume no task through Airflow's scheduler, whose
# race the settle time avoids (kueue_ray.trigger_base.DEFAULT_RESUME_SETTLE_SECONDS): no hold there. Every
# Airflow a test starts drops it and holds as shipped.
os.environ.setdefault("AIRFLOW__KUEUE_RAY__RESUME_SETTLE_SECONDS", "0")

ROOT = Path(__file__).resolve().parent.parent

CLUSTER_REQUEST_LOGS = pytest.StashKey[list]()
"""kubesim request-log records of test packages that run a kubesim of their own (tests/browser), so the
RBAC test (tests/e2e/test_99_security.py) judges every call the project made in the session. The browser
package writes them to ``BROWSER_REQUEST_LOG`` in ``run_directory`` when it ends: the RBAC test may run in
another xdist worker."""

BROWSER_REQUEST_LOG = "browser-cluster-requests.json"

BROWSER_AIRFLOW = "browser-airflow"
MAKE_RUN = "make-run"
SHARED_AIRFLOW = "shared-e2e-airflow"
SECOND_SHARED_AIRFLOW = "second-shared-e2e-airflow"
"""The groups of the browser and e2e tests under `--dist loadgroup`, one xdist worker each (`make test`:
``-n 4``; test_99 waits for the other groups' hand-overs), each group's modules in file order in its
worker:

* ``BROWSER_AIRFLOW``: tests/browser, with a kubesim and an Airflow of their own;
* ``MAKE_RUN``: test_00 (`make run`'s starts, one at a time) and test_20 (the walkthrough on the real
  stack; `make test` runs it in `make test-real` instead, once the other real-stack tests have stopped
  their control plane);
* ``SHARED_AIRFLOW``: the e2e modules up to test_11, and test_99, whose RBAC audit judges what this
  session's modules did, and what the other groups' did as they hand it over when they end;
* ``SECOND_SHARED_AIRFLOW``: the e2e modules from test_12 on, with a kubesim and an Airflow of the same
  setup as the first's.

The shared Airflow's modules were one group until a warm CI measured them at ~1,090 s of tests, the
longest chain of the run (the browser tests and test_00 ~1,010 s together): split where each half holds
~550 s. Most of an e2e test's time is waiting for simulated time and Airflow's loops (an idle Airflow
costs ~0.1 core); with four groups the two cores are busy for most of the run (realcluster/README.md, CI)."""

GROUPS_RUN = pytest.StashKey[set]()
"""The groups whose modules this session ran (tests/e2e/conftest.py records them)."""

SECOND_SHARED_FROM = 12
"""The first e2e module (by its number) of ``SECOND_SHARED_AIRFLOW``."""


def xdist_group(nodeid: str) -> str | None:
    """The group of a browser or e2e test (by its path, e.g. ``tests/e2e/test_00_make_run.py::test_x``)."""
    parts = Path(nodeid.split("::", 1)[0]).parts
    if parts[:2] == ("tests", "browser"):
        return BROWSER_AIRFLOW
    if parts[:2] != ("tests", "e2e") or len(parts) != 3:
        return None
    number = int(parts[2][5:7]) if re.match(r"test_\d\d_", parts[2]) else None
    if number in (0, 20):
        return MAKE_RUN
    if number is not None and SECOND_SHARED_FROM <= number < 99:
        return SECOND_SHARED_AIRFLOW
    return SHARED_AIRFLOW


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` with the groups of ``xdist_group``, given by path. (xdist 3.8 names an item by
    its ``xdist_group`` mark through ``Node._nodeid``, which pytest 9 no longer reads: its own loadgroup
    would scatter a group over both workers, each starting the group's Airflows.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class PathGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or super()._split_scope(nodeid)

    return PathGroupScheduling(config, log)


def handover_path(run_dir: Path, group: str) -> Path:
    """Where a group's session leaves what tests/e2e/test_99_security.py judges of it, in another worker."""
    return run_dir / f"{group}-handover.json"


def run_directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every process of this pytest run shares: its base temp directory (an xdist worker's
    own base temp is a subdirectory of it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def pytest_addoption(parser):
    parser.addoption(
        "--cluster",
        choices=("kubesim", "real"),
        default="kubesim",
        help="backend of the integration tests' `kubesim` fixture: kubesim, or the real control plane of "
        "devtools/realcluster.py (etcd, kube-apiserver, Kueue, KubeRay; built by `make realcluster`)",
    )


def pytest_collection_modifyitems(config, items):
    real = config.getoption("cluster") == "real"
    for item in items:
        only = item.get_closest_marker("kubesim_only")
        if real and only:
            item.add_marker(pytest.mark.skip(reason=f"kubesim-only: {only.args[0]}"))
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts and parts[0] in ("unit", "integration", "browser", "e2e"):
            item.add_marker(getattr(pytest.mark, parts[0]))
