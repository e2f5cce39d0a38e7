"""A small run of the refused-watch benchmark (N=20), so that it does not rot between runs.

It checks what the benchmark is built to show, never how fast: under a permanent 403 on watch every
trigger still fires with success, no watch stream stays open, and waiting costs one list per polling
interval per watched resource, whatever N is.
"""

from __future__ import annotations

import pytest

from bench import refused_watch

N = 20


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return refused_watch.run_one(
        N, window_s=20.0, poll_window_s=None, log_dir=tmp_path_factory.mktemp("bench")
    )


def test_every_trigger_still_fires_with_success(result):
    assert result["trigger"]["events"] == {"success": N}


def test_waiting_lists_each_watched_resource_once_per_interval(result):
    trigger = result["trigger"]
    assert trigger["watch_streams_open_while_waiting"] == 0
    assert trigger["refused_watches"] == 2, "one refused watch per resource, then lists"
    assert set(trigger["waiting_by_verb"]) <= {"list rayjobs.ray.io", "list workloads.kueue.x-k8s.io"}
    per_resource_per_window = trigger["window_s"] / result["degraded_list_interval_s"]
    assert trigger["waiting_requests"] <= 2 * (per_resource_per_window + 1)
