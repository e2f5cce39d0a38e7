"""A small run of the three-triggerer benchmark (3 × 40 waits), so that `make bench` does not rot.

It checks what the benchmark is built to show, never how fast: each triggerer holds its own two watch
streams, waiting costs no request, the waves fire every RayJob that completed in the triggerer holding it,
and a killed triggerer's replacement reads no single object, lists no more than a first start, and fires
for every one of its RayJobs that completed while it was down.
"""

from __future__ import annotations

import copy
import doctest

import pytest
from kueue_ray.hub.settings import HubSettings

from bench import report, triggerers

PENDING_WORKLOADS_TTL_S = HubSettings().pending_workloads_ttl_seconds

N = 40
"""Per triggerer: enough that each still waits on some after the waves and the restart's completions (a
triggerer whose every trigger fired holds no watch)."""


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    return triggerers.run_one(
        N,
        window_s=1.0,
        detect_n=9,
        restart_n=6,
        restart_window_s=5.0,
        time_scale=10.0,
        log_dir=tmp_path_factory.mktemp("bench-triggerers"),
    )


def test_each_triggerer_holds_two_watch_streams_and_waiting_costs_nothing(result):
    assert [t["streams"] for t in result["per_triggerer"]] == [2, 2, 2]
    assert result["waiting"]["streams_open"] == 6
    assert result["waiting"]["requests"] == 0


def test_the_waves_fire_in_every_triggerer(result):
    assert result["waves"]["fired"] >= 9
    assert all(t["fired_in_waves"] > 0 for t in result["per_triggerer"])
    assert result["waves"]["detection_latency"]["count"] == result["waves"]["fired"]
    # Each event's detection splits where its triggerer's hub first saw the RayJob terminal.
    assert (
        result["waves"]["delivery"]["count"]
        == result["waves"]["trigger_part"]["count"]
        == result["waves"]["fired"]
    )


def test_a_restarted_triggerer_lists_instead_of_reading_each_task_and_catches_up(result):
    restart = result["restart"]
    assert restart["object_reads_first_minute"] == 0, restart["first_minute_by_verb"]
    # Like with like: the lists of a start, by resource, no more than a first start's. Its requests are
    # its own (a token of its own in kubesim's request log); everyone's in that minute are at least those.
    # The queue reads repeat with time: held to one per triggerer per interval, which 31 triggers reading
    # each for itself would exceed.
    assert restart["all_requests_first_minute"] >= restart["requests_first_minute"] > 0
    assert 2 <= restart["watches_opened_first_minute"] <= 2 + len(restart["watch_ends_first_minute"])
    first = triggerers.beyond_queue_reads(result["per_triggerer"][0]["by_verb"])
    again = triggerers.beyond_queue_reads(restart["startup_by_verb"])
    assert all(count <= first.get(key, 0) for key, count in again.items()), (again, first)
    rounds = triggerers.TRIGGERERS * (1 + int(restart["startup_s"] // PENDING_WORKLOADS_TTL_S))
    queue_reads = {k: n for k, n in restart["startup_by_verb"].items() if k in triggerers.QUEUE_READS}
    assert max(queue_reads.values()) <= rounds < restart["triggers"], (queue_reads, restart["startup_s"])
    assert restart["its_own_completed_while_down"] > 0
    assert restart["its_own_fired_after_restart"] == restart["its_own_completed_while_down"]
    assert restart["log_warnings"]["count"] == 0, restart["log_warnings"]["lines"]


def test_each_target_gets_a_verdict_and_the_report_renders(result):
    result["verdicts"] = triggerers.verdicts(result)
    by_target = {v["target"]: v["ok"] for v in result["verdicts"]}
    assert by_target["≤ 2 watch streams per triggerer (one namespace)"] is True
    assert by_target["< 300 MiB per triggerer at 10,000"] is None  # no target at N = 40
    assert by_target["a restart costs O(resources), not O(tasks): no read of a single object"] is True
    text = "\n".join(report.render_triggerers({"rows": [result]}))
    assert "Targets at N = 40 per triggerer:" in text
    assert result["waves"]["quiet_after"] is True and result["restart"]["quiet_before"] is True
    assert "not quiet" not in text


def test_a_settle_that_timed_out_is_reported_beside_its_phase(result):
    slow = copy.deepcopy(result)
    slow["waves"]["quiet_after"] = False
    slow.setdefault("verdicts", triggerers.verdicts(slow))
    text = "\n".join(report.render_triggerers({"rows": [slow]}))
    assert "kubesim was not quiet at the end of waves_settle" in text
    assert "end of down" not in text
    assert doctest.testmod(triggerers).failed == 0
