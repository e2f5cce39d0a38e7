"""The kubesim server the HTTP tests of one module share: the whole simulated cluster (KubeRay, Kueue and
the Job controller) at 200 simulated seconds per real second, and a ``kubernetes`` client for it. A module
that needs another cluster (no controllers, another time scale) defines its own ``sim``."""

from __future__ import annotations

import pytest
from kubernetes import config

from kubesim.testing import run_kubesim


@pytest.fixture(scope="module")
def sim():
    with run_kubesim(time_scale=200) as sim:
        yield sim


@pytest.fixture(scope="module")
def api(sim):
    api_client = config.new_client_from_config(config_file=sim.kubeconfig)
    yield api_client
    api_client.close()
