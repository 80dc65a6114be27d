"""Checker options declared beside each checker, composed into CheckOptions; the report
renders options and checker details without naming them (that it imports no stack code:
test_offline_check.py, apart because it starts an interpreter)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import get_type_hints

import pytest

import chaos.analyze as analyze_module
import stack.config
from chaos.checkers import CHECKERS, DETAIL_SECTIONS, CheckOptions, OptionsError
from chaos.checkers.ailane import AiLaneOptions
from chaos.checkers.base import CheckerOptions, option, parse_limit
from chaos.checkers.connections import ConnectionsOptions
from chaos.checkers.effects import EffectsOptions
from chaos.checkers.egress import EgressOptions
from chaos.checkers.logship import LogshipOptions
from chaos.checkers.faults import FaultsOptions
from chaos.checkers.jobs import JobsOptions, PendingOptions
from chaos.checkers.latency import LatencyOptions
from chaos.checkers.stats import StatsOptions
from chaos.report import case_durations, render_markdown

OWN_OPTIONS = (StatsOptions, FaultsOptions, PendingOptions, EffectsOptions, JobsOptions, LatencyOptions, ConnectionsOptions,
               AiLaneOptions, EgressOptions, LogshipOptions)
# Plain fields filled from scenario.json's other keys by CheckOptions.from_scenario, not "options" keys:
FROM_SCENARIO = {"declared_faults", "time_scale", "ai_calls_per_minute", "in_flight_recovery"}


def own_keys(cls: type) -> set[str]:
    """Keys a class declares itself (not inherited)."""
    inherited = {f.name for base in cls.__bases__ if base is not CheckerOptions for f in fields(base)}
    return {f.name for f in fields(cls)} - inherited


def test_each_key_is_declared_by_exactly_one_checker_and_composed_once() -> None:
    declared = [key for cls in OWN_OPTIONS for key in own_keys(cls)]
    assert len(declared) == len(set(declared))  # no key declared twice
    assert set(declared) == {f.name for f in fields(CheckOptions)}
    assert set(CheckOptions().to_dict()) == set(declared) - FROM_SCENARIO


@pytest.mark.parametrize("name", sorted(CHECKERS))
def test_every_checker_accepts_the_composed_options(name: str) -> None:
    hint = get_type_hints(CHECKERS[name])["options"]
    assert hint is object or issubclass(CheckOptions, hint)


def test_a_new_checkers_options_need_no_code_beyond_their_fields() -> None:
    @dataclass(frozen=True)
    class ToyOptions(CheckerOptions):
        max_widgets: int | None = option(None, parse_limit)
        names: dict = option({}, lambda value, where: dict(value))

    assert ToyOptions.from_dict({"max_widgets": 3}).to_dict() == {"max_widgets": 3, "names": {}}
    assert ToyOptions().names is not ToyOptions().names  # a mutable default is copied, never shared
    with pytest.raises(OptionsError, match=r"options\.max_widgets=-1: expected a whole number"):
        ToyOptions.from_dict({"max_widgets": -1})
    with pytest.raises(OptionsError, match=r"unknown keys \['max_widget'\]"):
        ToyOptions.from_dict({"max_widget": 1})
    assert ToyOptions.report_lines({"max_widgets": None, "names": {}}, str) == ["- max_widgets: not set", "- names: {}"]


def test_report_lines_show_every_option_in_checker_order() -> None:
    options = CheckOptions.from_dict({"outcome_deadline_seconds": 5, "slo": {"answer": {"p99": 1}, "merit": {"max": 2}},
                                      "allow_pending": ["sms"], "max_rejected_connections": 0})
    lines = CheckOptions.report_lines(options.to_dict(), lambda real: f"<{real}>")
    assert lines == [
        "- expect_ops: answer, finish",
        "- allow_pending: sms",
        "- allow_failed_for_review: (none)",
        "- outcome_deadline_seconds: <5.0>",
        "- slo answer: p99 <1.0>",
        "- slo merit: max <2.0>",
        "- max_rejected_connections: 0",
        "- max_component_connection_errors: not set",
        "- max_connects_per_process: not set",
        "- fresh_components: (none)",
        "- pooled_components: (none)",
        "- min_fresh_timeout_ratio: not set",
        "- egress_address: not set",
        "- log_canaries: not set",
    ]


def test_detail_sections_belong_to_checkers() -> None:
    assert set(DETAIL_SECTIONS) == {"latency", "connections"} and set(DETAIL_SECTIONS) <= set(CHECKERS)
    assert DETAIL_SECTIONS["connections"]({}) == []
    rows = DETAIL_SECTIONS["connections"]({"components": {
        "web_1": {"connections_now": 2, "client_ids_seen": 3, "reconnects": 1, "connects": 4, "error_total": 2,
                  "errors": {"reset": 1, "eof": 1}},
        "proctor-churn": {"harness": True}}})
    assert rows[-2:] == ["| web_1 | 2 | 3 | 1 | 4 | 2 | eof 1, reset 1 | 0 | - |",
                         "| proctor-churn (harness) | 0 | 0 | 0 | 0 | 0 | - | 0 | - |"]
    quantiles = {"count": 2, "p50": 0.05, "p95": 0.05, "p99": 2.0, "max": 300}
    rows = DETAIL_SECTIONS["latency"]({"ops": {"answer": quantiles},
                                       "lanes": {"merit": {**quantiles, "wait": {"p99": 0.5}, "oldest_age": 1.5}}})
    assert rows[-4:-2] == ["| op answer | 2 | 50 ms | 50 ms | 2 s | 5 min | | |",
                           "| lane merit (finish to done) | 2 | 50 ms | 50 ms | 2 s | 5 min | 500 ms | 1.5 s |"]
    assert rows[-1] == "Machine pace: no probe in the history; client SLOs applied as stated."


def test_case_durations_come_from_the_run_not_the_stack() -> None:
    rows = case_durations({"CASE_AI_CALL_SECONDS": 10.0, "CASE_PROVIDER_CALLS_PER_MINUTE": 8, "OTHER": 1}, 0.01)
    assert rows == [{"name": "CASE_AI_CALL_SECONDS", "case_seconds": 10.0, "real_seconds": 0.1},
                    {"name": "CASE_PROVIDER_CALLS_PER_MINUTE (interval)", "case_seconds": 7.5, "real_seconds": 0.075}]


def test_a_run_without_case_constants_still_renders() -> None:
    report = {"name": "old", "verdict": "VALID", "summary": {}, "checkers": {}, "time_scale": 0.01,
              "case_durations": [], "options": CheckOptions().to_dict()}
    md = render_markdown(report)
    assert "(scenario.json records no case_constants: the seed's durations are not shown)" in md
    assert "- outcome_deadline_seconds: none" in md


def test_the_assumed_time_scale_is_the_stacks_default() -> None:
    assert analyze_module._ASSUMED_TIME_SCALE == stack.config.DEFAULT_TIME_SCALE
