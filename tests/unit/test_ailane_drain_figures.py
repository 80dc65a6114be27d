"""The pause the provider demanded, as the drain benchmark adds it to N / 8 case-minutes
(chaos/scenarios/ai_lane.py ``demanded_pause_seconds``)."""

from __future__ import annotations

import pytest

from chaos.scenarios.ai_lane import demanded_pause_seconds


def test_overlapping_pauses_count_once_and_gaps_not_at_all() -> None:
    # Two workers refused together (overlap), then a later refusal after a gap of 1 s.
    pauses = [(10.0, 16.0), (10.1, 16.1), (17.1, 23.1)]
    assert demanded_pause_seconds(pauses, since=9.0) == pytest.approx(6.1 + 6.0)


def test_a_pause_inside_another_adds_nothing_and_time_before_since_is_not_counted() -> None:
    assert demanded_pause_seconds([(5.0, 15.0), (6.0, 8.0), (20.0, 21.0)], since=10.0) == pytest.approx(5.0 + 1.0)
    assert demanded_pause_seconds([], since=10.0) == 0.0
