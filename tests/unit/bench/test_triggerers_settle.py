"""The three-triggerer benchmark goes on when kubesim does not go quiet after the waves: a slow aftermath
is reported, not a run's every figure lost (bench/README.md, run AG: 3 × 10,000 ended without figures)."""

from __future__ import annotations

import asyncio

from bench import triggerers


class _Api:
    """What ``settle`` asks kubesim: ``quiet`` (which gives up with TimeoutError) and ``stats``."""

    def __init__(self, *, quiet: bool) -> None:
        self._quiet = quiet
        self.timeouts: list[float] = []

    async def quiet(self, *, quiet_s: float, timeout_s: float) -> dict:
        self.timeouts.append(timeout_s)
        if not self._quiet:
            raise TimeoutError(f"kubesim never went quiet within {timeout_s}s")
        return {"requests": 7, "when": "quiet"}

    async def stats(self) -> dict:
        return {"requests": 9, "when": "timeout"}


def test_a_quiet_kubesim_settles_with_its_stats_then():
    api = _Api(quiet=True)
    assert asyncio.run(triggerers.settle(api, 12.0)) == ({"requests": 7, "when": "quiet"}, True)
    assert api.timeouts == [12.0]


def test_a_kubesim_never_quiet_gives_its_stats_at_the_timeout_and_says_so():
    api = _Api(quiet=False)
    assert asyncio.run(triggerers.settle(api, 0.5)) == ({"requests": 9, "when": "timeout"}, False)
