"""A small run of the namespace-memory benchmark (5 waits in a namespace of 20 RayJobs), so that it does
not rot: every checkout's worker starts, settles and reports its RSS in each round, and the table shows
them. It checks what the benchmark reports, never how much."""

from __future__ import annotations

from bench import namespace_memory
from bench.harness.workers import ROOT


def test_each_round_of_each_checkout_reports_its_rss_after_imports_after_startup_and_its_peak(tmp_path):
    result = namespace_memory.run(20, [5], {"this": ROOT / "plugins"}, log_dir=tmp_path)

    rows = result["rows"]
    assert [(row["own"], row["plugins"], row["round"]) for row in rows] == [(5, "this", 0), (5, "this", 1)]
    for row in rows:
        # no order between them: the kernel's peak lags the current RSS by a few pages
        assert (
            row["rss_mib_after_imports"] > 0 and row["rss_mib_after_startup"] > 0 and row["peak_rss_mib"] > 0
        )
    table = namespace_memory.render(result)
    assert table[2].startswith("| 5 | this | ")
    assert str(rows[1]["rss_mib_after_startup"]) in table[2] and str(rows[1]["peak_rss_mib"]) in table[2]
