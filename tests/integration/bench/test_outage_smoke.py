"""A small run of the outage benchmark (N=30, this checkout's code only), so that it does not rot between
runs. It checks what the benchmark is built to show, never how fast: triggers started into an outage or
a slow first list send no read of their own, and both loops watch again afterwards."""

from __future__ import annotations

import pytest

from bench import outage
from bench.harness.workers import ROOT

N = 30


@pytest.fixture(scope="module", params=[("outage", 5.0), ("slow_first_list", 3.0)], ids=lambda p: p[0])
def run(request, tmp_path_factory):
    kind, seconds = request.param
    result = outage.run_condition(
        N, {"kind": kind, "seconds": seconds}, {"after": ROOT / "plugins"}, tmp_path_factory.mktemp("bench")
    )
    [run] = result["runs"]
    return run


def test_no_trigger_reads_on_its_own_and_both_loops_watch_again(run):
    assert "get rayjobs.ray.io" not in run["by_verb"]
    assert run["watches_opened"] == 2
    assert run["fired"] == 0, "queued behind the blocker: nothing to fire"
    assert run["requests"] < N
