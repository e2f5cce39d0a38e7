"""A small run of the RayService wait benchmark (N=10), so that it does not rot between runs.

It checks what the benchmark is built to show, never how fast: N deferred RayService waits hold the two
shared watch streams and make no request while nothing changes, and every one fires once its service
serves.
"""

from __future__ import annotations

import pytest

from bench import service_waits

N = 10


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return service_waits.run(N, window_s=10.0, log_dir=tmp_path_factory.mktemp("bench"))


def test_waiting_holds_two_streams_and_asks_nothing(result):
    assert result["watch_streams_open_while_waiting"] == 2
    assert result["waiting_requests"] == 0, result["waiting_by_verb"]


def test_every_wait_fires_once_its_service_serves(result):
    assert result["events"] == {"success": N}
