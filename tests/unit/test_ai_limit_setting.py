"""PROCTOR_AI_CALLS_PER_MINUTE sets the shared AI limiter of the deployed lane (#12 lifts it)."""

import pytest

from stack.lanes.ai.job import LaneConfig
from stack.config import CASE_PROVIDER_CALLS_PER_MINUTE, Settings, SettingsError, load_settings
from chaos.scenarios.isolation import AI_LIMIT_LIFTED, ISOLATION_SCENARIOS


def test_the_lane_keeps_the_providers_limit_by_default() -> None:
    assert LaneConfig.from_settings(load_settings({})).calls_per_minute == CASE_PROVIDER_CALLS_PER_MINUTE


def test_the_setting_reaches_the_lane_and_child_processes() -> None:
    settings = load_settings({"PROCTOR_AI_CALLS_PER_MINUTE": "5000"})
    assert LaneConfig.from_settings(settings).calls_per_minute == 5000
    assert load_settings(settings.to_env()).ai_calls_per_minute == 5000


@pytest.mark.parametrize("raw", ["0", "-3", "many"])
def test_a_bad_limit_names_the_variable(raw: str) -> None:
    with pytest.raises(SettingsError, match="PROCTOR_AI_CALLS_PER_MINUTE"):
        load_settings({"PROCTOR_AI_CALLS_PER_MINUTE": raw})


def test_both_isolation_runs_lift_the_limiter_above_what_their_ai_workers_can_call() -> None:
    for scenario in ISOLATION_SCENARIOS:
        assert scenario.settings["ai_calls_per_minute"] == AI_LIMIT_LIFTED
    # two workers of 10 case-second calls make 12 calls per case-minute: the default 8 would bind
    assert AI_LIMIT_LIFTED > 2 * 60 / 10 > Settings().ai_calls_per_minute
