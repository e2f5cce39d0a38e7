"""The harness's request accounting: one worker's requests told from the others' by who made them."""

import doctest

from bench.harness import accounting


def test_the_accounting_examples_hold():
    assert doctest.testmod(accounting).failed == 0
