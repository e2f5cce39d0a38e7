"""A small run of the trigger benchmark (N=50), so that `make bench` does not rot between runs.

It checks what the benchmark is built to show, never how fast: every trigger fires exactly once with
success, the process waits on two watch streams whatever N is, waiting costs no requests while the
polling baseline pays one GET per poll, and a resync costs a bounded number of reads per trigger.
"""

from __future__ import annotations

import pytest

from bench import trigger_scale

N = 50


@pytest.fixture(scope="module")
def result():
    return trigger_scale.run_one(N, windows=(1.0, 2.0), poll_window=6.0, resync_probe_s=4.0, time_scale=10.0)


def test_every_trigger_fires_once_with_success(result):
    trigger = result["trigger"]
    assert trigger["events"] == {"success": N}
    assert trigger["latency_samples"] == N


def test_the_waiting_process_holds_two_watch_streams(result):
    assert result["trigger"]["watch_streams_open_while_waiting"] == 2


def test_waiting_costs_no_requests_and_polling_costs_one_per_poll(result):
    assert [w["requests"] for w in result["trigger"]["waiting_windows"]] == [0, 0]
    assert result["polling"]["polls"] > 0
    assert result["polling"]["requests_per_poll"] >= 1.0  # polls still in flight at the end add requests


def test_a_resync_reads_each_trigger_s_objects_a_bounded_number_of_times(result):
    assert 0 < result["trigger"]["resync_probe"]["requests_per_trigger_per_resync"] <= 3
