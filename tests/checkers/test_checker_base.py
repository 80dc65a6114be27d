"""Result, compose, check_safe, options; and every checker module's __all__."""

from __future__ import annotations

import importlib

import pytest

from chaos.checkers import CHECKERS, CheckOptions, run_checkers
from chaos.checkers.base import (
    UNKNOWN,
    OptionsError,
    Result,
    build_result,
    check_safe,
    compose,
    merge_validity,
    summarize,
)
from chaos.ledgers import Ledgers


def test_compose_ranks_false_over_unknown_over_true() -> None:
    ok, unsure, bad = Result("a", True), Result("b", UNKNOWN), Result("c", False)
    assert compose([ok, unsure, bad]).valid is False
    assert compose([ok, unsure]).valid == UNKNOWN
    assert compose([ok]).valid is True
    composed = compose([ok, unsure, bad]).to_dict()
    assert composed["counts"] == {"valid": 1, "invalid": 1, "unknown": 1, "n/a": 0}
    assert composed["notes"] == ["b: unknown", "c: invalid"]
    assert list(composed["checks"]) == ["a", "b", "c"]


def test_nothing_checked_is_unknown() -> None:
    assert merge_validity([]) == UNKNOWN
    assert compose([]).notes == ["no checker ran"]


def test_check_safe_turns_a_crash_into_unknown() -> None:
    def broken(history, ledgers, options):  # type: ignore[no-untyped-def]
        raise KeyError("attempt_id")

    result = check_safe("broken", broken, [], Ledgers(), CheckOptions())
    assert result.valid == UNKNOWN
    assert result.notes == ["checker crashed: KeyError: 'attempt_id'"]
    assert "KeyError" in result.details["traceback"]


def test_build_result_counts_every_category_and_bounds_examples() -> None:
    result = build_result("x", bad={"lost": list(range(10)), "dup": []}, info={"recovered": [1]}, counts={"seen": 3})
    assert result.valid is False
    assert result.counts == {"seen": 3, "lost": 10, "dup": 0, "recovered": 1}
    assert result.examples == {"lost": list(range(8)), "recovered": [1]}
    assert result.violations == ["lost"]


def test_summarize_nearest_rank() -> None:
    assert summarize([]) == {"count": 0, "p50": None, "p95": None, "p99": None, "max": None}
    assert summarize([3.0, 1.0, 2.0]) == {"count": 3, "p50": 2.0, "p95": 3.0, "p99": 3.0, "max": 3.0}


def test_options_defaults_are_strict() -> None:
    assert CheckOptions.from_dict(None).to_dict() == {
        "allow_pending": [],
        "allow_failed_for_review": [],
        "outcome_deadline_seconds": None,
        "slo": {},
        "expect_ops": ["answer", "finish"],
        "max_rejected_connections": None,
        "max_component_connection_errors": None,
        "max_connects_per_process": None,
        "fresh_components": [],
        "pooled_components": [],
        "min_fresh_timeout_ratio": None,
        "egress_address": None,
        "log_canaries": None,
    }


@pytest.mark.parametrize(
    "options, match",
    [
        ({"allow_pendng": []}, "unknown keys"),
        ({"allow_pending": ["ai"]}, "not outbox kinds"),
        ({"allow_pending": "narrative"}, "list of strings"),
        ({"outcome_deadline_seconds": 0}, "outcome_deadline_seconds"),
        ({"outcome_deadline_seconds": True}, "outcome_deadline_seconds"),
        ({"egress_address": "127.0.0.300"}, "egress_address"),
    ],
)
def test_bad_options_name_the_key(options: dict, match: str) -> None:
    with pytest.raises(OptionsError, match=match):
        CheckOptions.from_dict(options)


def test_run_checkers_composes_every_checker_even_on_empty_input() -> None:
    result = run_checkers([], Ledgers(), CheckOptions())
    assert list(result.checks) == list(CHECKERS)
    assert result.valid is False  # stats: vacuous
    assert {n: c.valid for n, c in result.checks.items()} == {
        "stats": False,
        "faults": UNKNOWN,  # no declared faults: cannot tell whether the chaos happened
        "answers": UNKNOWN,
        "revisions": True,  # no revise op: nothing to check (stats' expect_ops guards a run that needs them)
        "final_answers": True,
        "answer_reads": True,
        "effects": UNKNOWN,
        "jobs": UNKNOWN,
        "payloads": UNKNOWN,
        "latency": True,
        "connections": True,  # no limits set: it only measures
        "provider_limit": UNKNOWN,  # the AI lane's ledgers were never read
        "duplicate_charges": UNKNOWN,
        "billing": UNKNOWN,
        "paused_calls": UNKNOWN,
        "retry_after": UNKNOWN,
        "egress": True,  # no egress address: n/a
        "logship": True,  # no canaries: not a log-shipping run, n/a
    }


EXPORTS = {
    "chaos.checkers": [
        "CHECKERS", "CheckOptions", "Checker", "DETAIL_SECTIONS", "OptionsError", "Result", "UNKNOWN", "check_answers",
        "check_connections",
        "check_ai_billing", "check_ai_paused_calls", "check_ai_provider_limit", "check_duplicate_charges", "check_retry_after",
        "check_egress", "check_logship",
        "check_effects", "check_faults", "check_jobs", "check_payloads", "check_latency", "check_safe", "check_stats", "compose", "mark_vacuous", "run_checkers",
        "check_answer_reads", "check_final_answers", "check_revisions",
    ],
    "chaos.checkers.base": [
        "CheckerOptions", "Checker", "MAX_EXAMPLES", "OptionsError", "Result", "Show", "UNKNOWN", "Validity",
        "build_result", "check_safe", "compose", "format_seconds", "merge_validity", "option", "parse_kinds", "parse_limit",
        "parse_seconds", "parse_strings", "show_plain", "show_seconds", "summarize", "unknown_unless_invalid",
    ],
    "chaos.checkers.options": ["CheckOptions"],
    "chaos.checkers.connections": ["ConnectionsOptions", "NAME", "SEED_CONNECTION_TIMEOUTS", "check_connections",
                                   "counter_increase", "render_details", "timeout_rule"],
    "chaos.checkers.acknowledged": ["acknowledged_finishes", "attempt_students"],
    "chaos.checkers.faults": ["DeclaredFault", "FaultsOptions", "NAME", "check_faults", "declared_faults"],
    "chaos.checkers.payloads": ["NAME", "check_payloads", "score_of", "sms_body"],
    "chaos.checkers.answers": ["NAME", "check_answers", "fingerprint", "fingerprints"],
    "chaos.checkers.effects": ["EffectsOptions", "NAME", "check_effects"],
    "chaos.checkers.logship": ["LogshipOptions", "NAME", "REDACTED_MARK", "RELP_WINDOW", "check_logship", "shipping_delays"],
    "chaos.checkers.egress": ["EgressOptions", "NAME", "check_egress", "declared_recovery", "derive_sms_bound", "host_losses",
                              "parse_address"],
    "chaos.checkers.jobs": ["IN_PROGRESS", "JobsOptions", "NAME", "PendingOptions", "check_jobs", "completion_seconds",
                            "enqueue_wait_seconds", "in_progress", "pending_reason", "queue_evidence"],
    "chaos.checkers.latency": ["LANES", "LatencyOptions", "NAME", "SLO_THRESHOLDS", "check_latency", "op_latencies",
                               "render_details", "resolve_slo_key"],
    "chaos.checkers.stats": ["NAME", "StatsOptions", "check_stats", "outcome_counts"],
    "chaos.checkers.revisions": ["NAME", "check_revisions", "visibility_latencies"],
    "chaos.checkers.final_answers": ["NAME", "check_final_answers"],
    "chaos.checkers.answer_reads": ["NAME", "check_answer_reads"],
    "chaos.checkers.retry_after": ["NAME", "PROVIDERS", "check_retry_after", "early_retries"],
    "chaos.checkers.ailane": ["AI_CALLS_PER_CASE_MINUTE", "AiLaneOptions", "check_ai_billing", "check_ai_paused_calls",
                              "check_ai_provider_limit", "declared_ai_limit", "declared_time_scale"],
}


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_all_is_exact(module: str) -> None:
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == sorted(EXPORTS[module])
    assert all(hasattr(mod, name) for name in mod.__all__)


def test_nothing_to_check_is_counted_apart_and_never_inflates_the_headline() -> None:
    from chaos.checkers.base import Result

    ok = Result("answers", True, {"acknowledged": 3})
    empty = Result.not_applicable("revisions", "no answer revisions in the history: nothing to check")
    composed = compose([ok, empty])
    assert composed.valid is True and composed.counts == {"valid": 1, "invalid": 0, "unknown": 0, "n/a": 1}
    assert composed.to_dict()["checks"]["revisions"]["na"].startswith("no answer revisions")
    # Only n/a: nothing was proven, so the run is unknown, not valid.
    alone = compose([empty])
    assert alone.valid == "unknown" and "nothing was proven" in alone.notes[0]
    # A violation still wins: false > unknown > true.
    assert compose([empty, Result("jobs", False, {"lost": 1})]).valid is False


def test_a_valid_result_that_counted_nothing_is_n_a() -> None:
    from chaos.checkers import mark_vacuous
    from chaos.checkers.base import Result

    assert mark_vacuous(Result("retry_after", True, {"refusals": 0, "early_retry": 0})).na
    assert mark_vacuous(Result("retry_after", True, {"refusals": 2, "early_retry": 0})).na is None
    assert mark_vacuous(Result("jobs", False, {"stuck": 0})).na is None  # a verdict is never hidden
