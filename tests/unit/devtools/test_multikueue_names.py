"""`make run CLUSTER=multikueue` names each worker's Airflow connection as the plugin looks it up: a worker
whose connection the plugin cannot find shows no driver log."""

from __future__ import annotations

import pytest
from kueue_ray import multikueue as plugin

from devtools import multikueue as run


@pytest.mark.parametrize("cluster", ["worker1", "gpu-east", "gpu.east-2", "GPU_West"])
def test_make_run_names_a_workers_connection_as_the_plugin_looks_it_up(cluster):
    assert run.worker_connection_id(cluster) == plugin.worker_connection_id(cluster)
