"""`make bench` prints the floor comparison (bench.run's ``floor`` step): ours, the floor, their difference
beside its target, and the first success apart."""

from __future__ import annotations

from bench.report import render


def summary(p50: float, p99: float) -> dict:
    return {"count": 10, "p50_ms": p50, "p99_ms": p99, "max_ms": p99}


def test_the_floor_step_prints_ours_the_floor_and_their_difference_beside_the_target():
    floor = {
        "runs": 11,
        "airflow_startup_s": 61.2,
        "finished": 11,
        "states": {"success": 11},
        "late": 0,
        "flag_to_success": summary(550.0, 995.0),
        "flag_to_event": summary(5.0, 9.0),
        "event_to_success": summary(540.0, 990.0),
        "ours": summary(712.0, 1573.0),
        "floor": summary(550.0, 995.0),
        "difference": summary(15.0, 1011.0),
        "p50_difference_ms": 162.0,
        "p99_difference_ms": 578.0,
        "first_success": {"run": "manual__x", "ours_ms": 5711.0, "floor_ms": 5193.0},
        "elapsed_s": 190.0,
        "load_average_after": (1.0, 1.0, 1.0),
    }
    results = {
        "profile": "quick",
        "started": "2026-12-05T15:00:00+00:00",
        "machine": {
            "nproc": 2,
            "cpu": "Xeon",
            "memory": "23Gi",
            "python": "3.11.7",
            "load_average_at_start": (0.5, 0.5, 0.5),
        },
        "floor": floor,
    }
    text = render(results)
    section = text.split("### Complete → task success against Airflow's floor (issue 33)", 1)[1]
    assert (
        "11 runs of ours (`bench_end_in_triggerer`) and of the floor in one Airflow, started in 61.2 s"
        in section
    )
    assert "| ours − the floor (p50 − p50, p99 − p99) | 162.0 | 578.0 | | p50 < 100, p99 < 250 |" in section
    assert "| the triggerer's first success (manual__x): ours, its floor | 5711.0 | 5193.0 |" in section
    assert "(elapsed 190.0 s;" in section
    # the steps that did not run say so instead of printing nothing
    assert "### Three triggerers (issue 33)\n\nNot measured: not run" in text
