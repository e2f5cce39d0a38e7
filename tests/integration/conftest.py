"""Shared kubesim servers for integration tests.

`kubesim` is the whole simulated cluster (CRDs, KubeRay and Kueue controllers) that integration tests
share for the session; each test should use its own namespace or unique names. `kubesim_api` is the bare
API server (CRDs, no controllers) for tests of the HTTP layer itself, where nothing else may touch the
objects under test. Both run in a thread of the test process, so `.cluster` is available.
"""

from __future__ import annotations

import os
import uuid

import pytest

from kubesim.testing import run_kubesim

TIME_SCALE = float(os.environ.get("KUBESIM_TIME_SCALE", "20"))
"""Simulated seconds per real second in the shared cluster: a 30 s RayJob takes 1.5 s."""
REAL_TIME_SCALE = float(os.environ.get("REAL_TIME_SCALE", "5"))
"""The same for the Ray jobs of the real stack's dashboards. Slower than kubesim's: the real KubeRay
polls a running job's status every few seconds, so a job running for less than that is seen going from
PENDING straight to SUCCEEDED, as on a real cluster (at 20, a requeued 40 s job was, now and then)."""


@pytest.fixture(scope="session")
def kubesim(request):
    """The shared cluster: kubesim, or with ``--cluster=real`` the real control plane (skipped, saying
    why, when its binaries are not built); both with Kueue's shipped frameworks (a RayService is admitted
    as one Workload)."""
    if request.config.getoption("cluster") == "real":
        from devtools.realcluster_kueue import SHIPPED_FRAMEWORKS
        from tests.integration.real_backend import real_backend

        with real_backend(time_scale=REAL_TIME_SCALE, kueue_frameworks=SHIPPED_FRAMEWORKS) as real:
            yield real
        return
    with run_kubesim(time_scale=TIME_SCALE) as sim:
        yield sim


@pytest.fixture(scope="session")
def kubesim_api():
    with run_kubesim(controllers=()) as sim:
        yield sim


@pytest.fixture
def unique_name():
    """A fresh DNS-1123 name, so tests sharing a session cluster never collide."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def api_client(kubesim_api):
    """A `kubernetes` (sync) ApiClient for `kubesim_api`, loaded from its kubeconfig."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=kubesim_api.kubeconfig)
    yield client
    client.close()


@pytest.fixture
def api_faults(kubesim_api):
    """`kubesim_api` for a test that injects faults; they are reset afterwards (the server is shared)."""
    kubesim_api.reset_faults()
    yield kubesim_api
    kubesim_api.reset_faults()
