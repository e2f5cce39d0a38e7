"""A small run of the trigger benchmark (N=50), so that `make bench` does not rot between runs.

It checks what the benchmark is built to show, never how fast: every trigger fires exactly once with
success, the process waits on two watch streams whatever N is, waiting costs no requests while the
polling baseline pays one GET per poll, a resync costs a bounded number of reads per trigger, every watch
end is explained, and each target gets a verdict. The watch-end classification is also checked on its own,
since it is what tells a client-side timeout from kubesim ending a stream.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import trigger_scale

N = 50


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return trigger_scale.run_one(
        N,
        windows=(1.0, 2.0),
        poll_window=5.0,
        poll_interval=5.0,  # a fresh ApiClient per poll costs tens of CPU-ms: keep the poller light here
        resync_probe_s=2.0,
        time_scale=10.0,
        log_dir=tmp_path_factory.mktemp("bench-trigger"),
    )


def test_every_trigger_fires_once_with_success(result):
    trigger = result["trigger"]
    assert trigger["events"] == {"success": N}
    assert trigger["latency_samples"] == N


def test_the_waiting_process_holds_two_watch_streams(result):
    assert result["trigger"]["watch_streams_open_while_waiting"] == 2


def test_waiting_costs_no_requests_and_polling_costs_one_per_poll(result):
    assert [w["requests"] for w in result["trigger"]["waiting_windows"]] == [0, 0]
    polling = result["polling"]
    assert polling["polls"] > 0
    assert polling["requests_per_poll"] == 1.0  # over the poller's life, which ends between polls


def test_a_resync_reads_each_trigger_s_objects_a_bounded_number_of_times(result):
    assert 0 < result["trigger"]["resync_probe"]["requests_per_trigger_per_resync"] <= 3


def test_the_trigger_log_is_kept_and_every_watch_end_is_explained(result):
    trigger = result["trigger"]
    assert "Waiting for RayJob" in Path(trigger["log"]).read_text()
    assert trigger["watch_ends"], "the worker stopped, so its watches ended"
    assert all(end["why"] and end["phase"] for end in trigger["watch_ends"])


def test_each_target_gets_a_verdict(result):
    trigger_scale.compare(result, [])
    verdicts = trigger_scale.verdicts(result)
    assert len(verdicts) == 5
    by_target = {v["target"]: v["ok"] for v in verdicts}
    assert by_target["≤ 4 open watch streams"] is True
    assert by_target["requests grow with state transitions, not with waiting time"] is True


@pytest.mark.parametrize(
    ("lasted_s", "ended", "why"),
    [
        (60.6, "returned", "client request timeout"),
        (286.2, "returned", "kubesim ended it at timeoutSeconds"),
        (301.5, "returned", "the hub's own deadline"),
        (12.0, "returned", "the stream ended early"),
        (12.0, "CancelledError: ", "cancelled: the worker stopped"),
    ],
)
def test_a_watch_end_is_told_apart_by_its_duration(lasted_s, ended, why):
    end = {"timeout_s": 286, "grace_s": 15.0, "client_timeout_s": 60, "lasted_s": lasted_s, "ended": ended}
    assert trigger_scale.classify_watch_end(end).startswith(why)
