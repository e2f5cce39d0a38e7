"""Test-wide setup: Airflow without its examples; mark tests by the folder they live in (unit /
integration / browser / e2e), and put the browser and e2e tests in two xdist groups that can run side by
side (`make test`: ``pytest -n 2 --dist loadgroup tests/browser tests/e2e``)."""

import os
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

OWN_AIRFLOWS = "airflows-of-their-own"
SHARED_AIRFLOW = "shared-e2e-airflow"
"""The two groups of the browser and e2e tests under `--dist loadgroup`. The browser tests, test_00
(`make run`) and test_20 (the walkthrough on the real stack) each start Airflows of their own, one after
another; every other e2e module shares the e2e session's Airflow. Each group runs in one worker, in file
order, so at most two Airflows run at once. Most of an e2e test's time is waiting for simulated time and
Airflow's loops, so the two groups fit on two cores. (`make test` runs test_20 in `make test-real`
instead, after the other real-stack tests, so that one real control plane runs at a time.)"""


def xdist_group(nodeid: str) -> str | None:
    """The group of a browser or e2e test (by its path, e.g. ``tests/e2e/test_00_make_run.py::test_x``)."""
    parts = Path(nodeid.split("::", 1)[0]).parts
    if parts[:2] == ("tests", "browser") or parts[:3] in (
        ("tests", "e2e", "test_00_make_run.py"),
        ("tests", "e2e", "test_20_real_walkthrough.py"),
    ):
        return OWN_AIRFLOWS
    if parts[:2] == ("tests", "e2e"):
        return SHARED_AIRFLOW
    return None


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
