"""Scenario: a 100-job AI backlog drains under the shared 8 calls/case-minute limit (issue #11).

The verdict is causal: the provider's own ledger shows no sliding case-minute with more
than 8 calls, no operation charged twice, and every charge reserved. The drain ratio is
printed (a benchmark figure), never asserted. The negative control gives each of two
workers its own limiter: the provider then sees more than the limit, and the same
checker must say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.ailane_storm import run_storm

pytestmark = [pytest.mark.chaos]

TIME_SCALE = 0.01  # one case-minute = 0.6 s; 100 jobs at 8/min = 7.5 s theoretical


def test_shared_limiter_keeps_the_provider_under_its_limit(tmp_path: Path) -> None:
    result = run_storm(tmp_path, n=100, workers=2, threads=4, time_scale=TIME_SCALE, shared=True)
    print(json.dumps(result.summary()))
    assert {name: check.valid for name, check in result.checks.items()} == {
        "provider_limit": True, "duplicate_charges": True, "billing": True}
    assert result.checks["billing"].counts["completed"] == 100 == result.checks["billing"].counts["charges"]


@pytest.mark.negative_control
def test_per_worker_limiters_go_over_the_shared_limit(tmp_path: Path) -> None:
    result = run_storm(tmp_path, n=100, workers=2, threads=4, time_scale=TIME_SCALE, shared=False)
    print(json.dumps(result.summary()))
    assert result.checks["provider_limit"].valid is False
    assert result.checks["provider_limit"].violations == ["over_limit"]
