"""The machine-pace probe and its factor (chaos/observe/pace.py)."""

from __future__ import annotations

import time

from chaos.observe.pace import REFERENCE_SECONDS, pace_factor, probe


def test_the_probe_takes_measurable_time_and_more_for_more_work() -> None:
    short, long = min(probe(10_000) for _ in range(5)), min(probe(200_000) for _ in range(5))
    assert 0 < short < long
    before = time.perf_counter()
    measured = probe(10_000)
    assert measured <= time.perf_counter() - before  # the probe's own wall time, no more


def test_a_probe_of_zero_seconds_is_no_measurement() -> None:
    assert pace_factor([0.0, 0.0, 3 * REFERENCE_SECONDS])[0] == 3.0


def test_the_factor_is_the_median_against_the_reference_never_below_one() -> None:
    assert pace_factor([3 * REFERENCE_SECONDS, 3 * REFERENCE_SECONDS, 100 * REFERENCE_SECONDS])[0] == 3.0
    assert pace_factor([0.5 * REFERENCE_SECONDS] * 3)[0] == 1.0


def test_without_probes_the_factor_is_one_and_says_so() -> None:
    factor, derivation = pace_factor([None, "x", -1.0])
    assert factor == 1.0 and derivation["probes"] == 0 and derivation["median_seconds"] is None
