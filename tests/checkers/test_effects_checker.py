"""effects checker: exactly one outcome per finished attempt and kind, side effects at most once."""

from __future__ import annotations

import pytest
from checker_builders import HistoryBuilder, attempt_row, effect, good_exports, ledgers_from, outbox_rows, outcome_rows

from chaos.checkers import CheckOptions
from chaos.checkers.effects import check_effects
from chaos.ledgers import Ledgers

BAD = (
    "missing_merit",
    "missing_narrative",
    "missing_sms",
    "duplicated_sms_effects",
    "sms_effect_missing",
    "unexpected_sms_effects",
    "duplicated_ai_effects",
    "ai_effect_missing",
    "unexpected_ai_effects",
    "duplicated_outcomes",
    "unexpected_outcomes",
    "finish_lost",
)
INFO = ("pending_allowed", "pending", "failed_for_review_allowed", "effect_without_ready_outcome", "replayed_from_review")


def counts(finished: int = 1, outcomes: int = 3, sms: int = 1, ai: int = 1, **problems: int) -> dict:
    base = {"finished_attempts": finished, "outcomes": outcomes, "sms_effects": sms, "ai_effects": ai}
    totals = {
        "duplicated": sum(n for k, n in problems.items() if k.startswith("duplicated_")),
        "missing": sum(n for k, n in problems.items() if k.startswith("missing_") or k.endswith("_effect_missing")),
    }
    return {**base, **totals, **{k: 0 for k in BAD + INFO}, **problems}


def run(exports: dict, history: HistoryBuilder | None = None, **options) -> dict:
    result = check_effects((history or HistoryBuilder()).ops, ledgers_from(exports), CheckOptions.from_dict(options))
    return result.to_dict()


def test_every_effect_exactly_once_is_valid() -> None:
    result = run(good_exports("a1", "a2"))
    assert result == {
        "name": "effects",
        "valid": True,
        "counts": counts(finished=2, outcomes=6, sms=2, ai=2),
        "violations": [],
        "examples": {},
        "notes": [],
    }


def test_missing_merit_card_reports_the_outbox_state() -> None:
    exports = good_exports("a1")
    exports["outcomes"] = outcome_rows("a1", kinds=("narrative", "sms"))
    exports["outbox"] = outbox_rows("a1", kinds=("narrative", "sms")) + outbox_rows("a1", status="enqueued", kinds=("merit",))
    result = run(exports)
    assert result["valid"] is False
    assert result["counts"] == counts(outcomes=2, missing_merit=1)
    assert (result["counts"]["duplicated"], result["counts"]["missing"]) == (0, 1)
    assert result["violations"] == ["missing_merit"]
    assert result["examples"] == {
        "missing_merit": [
            {"operation_id": "merit-a1", "outcomes": [], "outbox_status": "enqueued", "job_attempts": 1, "last_error": None}
        ]
    }


def test_missing_outcome_without_outbox_row_says_so() -> None:
    exports = good_exports("a1")
    exports["outcomes"] = outcome_rows("a1", kinds=("merit", "narrative"))
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "narrative"))
    exports["sms_effects"] = []
    result = run(exports)
    assert result["violations"] == ["missing_sms"]
    assert result["examples"]["missing_sms"] == [{"operation_id": "sms-a1", "outcomes": [], "outbox_status": "no outbox row"}]


def test_duplicate_merit_outcome_is_invalid() -> None:
    exports = good_exports("a1")
    exports["outcomes"] += outcome_rows("a1", kinds=("merit",))
    result = run(exports)
    assert result["valid"] is False
    assert result["counts"] == counts(outcomes=4, duplicated_outcomes=1)
    assert result["examples"] == {"duplicated_outcomes": [{"operation_id": "merit-a1", "count": 2, "statuses": ["ready", "ready"]}]}


@pytest.mark.parametrize("replays, duplicated", [(1, 0), (0, 1), (2, 1)])
def test_a_review_record_then_a_ready_outcome_is_one_outcome_only_with_one_audited_replay(
    replays: int, duplicated: int
) -> None:
    exports = good_exports("a1", "a2")
    ready = next(row for row in exports["outcomes"] if row["operation_id"] == "narrative-a2")
    exports["outcomes"].append({**ready, "id": "o-review-a2", "status": "failed_for_review", "created_at": 100.2})
    exports["audit_log"] = [{"id": 1, "at": 100.3, "action": "review_replay", "actor": "operator",
                             "detail": {"operation_id": "narrative-a2"}}] * replays
    result = run(exports)
    assert result["valid"] is (duplicated == 0)
    assert result["counts"]["duplicated_outcomes"] == duplicated
    assert result["counts"]["replayed_from_review"] == 1 - duplicated


def test_duplicate_sms_at_gateway_is_invalid() -> None:
    exports = good_exports("a1")
    exports["sms_effects"].append({**effect("sms-a1", 2), "idempotency_key": None})
    result = run(exports)
    assert result["valid"] is False
    assert result["counts"] == counts(sms=2, duplicated_sms_effects=1)
    assert (result["counts"]["duplicated"], result["counts"]["missing"]) == (1, 0)
    assert result["examples"] == {
        "duplicated_sms_effects": [{"operation_id": "sms-a1", "count": 2, "effect_ids": [1, 2], "idempotency_keys": ["sms-a1", None]}]
    }


def test_ai_charged_twice_is_invalid() -> None:
    exports = good_exports("a1")
    exports["ai_effects"].append(effect("narrative-a1", 7))
    result = run(exports)
    assert result["valid"] is False
    assert result["violations"] == ["duplicated_ai_effects"]
    assert result["examples"]["duplicated_ai_effects"][0]["count"] == 2


def test_ready_sms_outcome_without_gateway_effect_is_invalid() -> None:
    result = run({**good_exports("a1"), "sms_effects": []})
    assert result["valid"] is False
    assert result["counts"] == counts(sms=0, sms_effect_missing=1)
    assert result["examples"] == {"sms_effect_missing": [{"operation_id": "sms-a1"}]}


def test_effect_for_attempt_that_never_finished_is_unexpected() -> None:
    exports = good_exports("a1")
    exports["attempts"].append(attempt_row("a2", status="open"))
    exports["sms_effects"].append(effect("sms-a2", 2))
    exports["outcomes"] += outcome_rows("a2", kinds=("merit",))
    result = run(exports)
    assert result["violations"] == ["unexpected_sms_effects", "unexpected_outcomes"]
    assert result["examples"]["unexpected_sms_effects"] == [{"operation_id": "sms-a2", "effect_ids": [2], "idempotency_keys": ["sms-a2"]}]
    assert result["examples"]["unexpected_outcomes"] == [{"operation_id": "merit-a2", "attempt_id": "a2", "kind": "merit"}]


def finished_in_history(*attempt_ids: str) -> HistoryBuilder:
    """Valid ops first: other calls, then an acknowledged finish per attempt."""
    h = HistoryBuilder()
    h.call(1, "session", {"student_id": "s1"}, status=201)
    for attempt_id in attempt_ids:
        h.call(1, "finish", {"attempt_id": attempt_id}, status=202)
    return h


def test_acknowledged_finish_whose_attempt_row_vanished_is_lost_and_still_owes_its_work() -> None:
    h = finished_in_history("a1")
    h.call(1, "answer", {"attempt_id": "a2", "question": "q1"}, status=201)
    h.call(1, "finish", {"attempt_id": "a2"}, status=202)
    h.call(1, "finish", {"attempt_id": "a2"}, status=202)  # a replay: still one lost finish
    result = run(good_exports("a1"), h)
    assert result["violations"] == ["missing_merit", "missing_narrative", "missing_sms", "finish_lost"]
    assert result["examples"]["finish_lost"] == [{"attempt_id": "a2", "index": 7}]
    assert result["counts"]["finished_attempts"] == 2


def test_vanished_attempt_row_with_its_outcomes_left_is_only_finish_lost() -> None:
    exports = good_exports("a1", "a2")
    exports["attempts"] = exports["attempts"][:1]
    result = run(exports, finished_in_history("a1", "a2"))
    assert result["violations"] == ["finish_lost"]  # its outcomes and effects are owed, so not unexpected


def test_malformed_finish_makes_it_unknown_and_later_finishes_are_still_judged() -> None:
    h = finished_in_history("a1")
    h.call(1, "finish", {"idempotency_key": "f"}, status=202)
    h.call(1, "finish", {"attempt_id": "a3"}, status=202)
    result = run(good_exports("a1"), h)
    assert result["valid"] is False and "finish_lost" in result["violations"]
    assert result["notes"] == ["1 finish invoke(s) without attempt_id: cannot tell which attempts finished"]
    assert run(good_exports("a1"), finished_in_history("a1"))["valid"] is True
    h = finished_in_history("a1")
    h.call(1, "finish", None, status=202)
    assert run(good_exports("a1"), h)["valid"] == "unknown"


@pytest.mark.parametrize("allowed", [True, False])
def test_pending_narrative_is_accounted_for_only_when_allowed(allowed: bool) -> None:
    exports = good_exports("a1")
    exports["outcomes"] = outcome_rows("a1", kinds=("merit", "sms"))
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "sms")) + outbox_rows("a1", status="pending", kinds=("narrative",))
    exports["ai_effects"] = []
    result = run(exports, allow_pending=["narrative"] if allowed else [])
    example = {"operation_id": "narrative-a1", "outcomes": [], "outbox_status": "pending", "job_attempts": 1, "last_error": None}
    if allowed:
        assert result["valid"] is True
        assert result["counts"] == counts(outcomes=2, ai=0, pending_allowed=1)
        assert result["examples"] == {"pending_allowed": [example]}
    else:
        assert result["valid"] is False
        assert result["counts"] == counts(outcomes=2, ai=0, missing_narrative=1)
        assert result["examples"] == {"missing_narrative": [example]}


@pytest.mark.parametrize("allowed", [True, False])
def test_failed_for_review_is_accounted_for_only_when_allowed(allowed: bool) -> None:
    exports = good_exports("a1")
    exports["outcomes"] = outcome_rows("a1", kinds=("merit", "narrative")) + outcome_rows("a1", status="failed_for_review", kinds=("sms",))
    exports["outbox"] = outbox_rows("a1", kinds=("merit", "narrative")) + outbox_rows("a1", status="failed", kinds=("sms",))
    result = run(exports, allow_failed_for_review=["sms"] if allowed else [])
    # The gateway did send once (say, the reply was lost): reported, never a duplicate.
    assert result["examples"]["effect_without_ready_outcome"] == [{"operation_id": "sms-a1", "provider": "sms"}]
    assert result["valid"] is allowed
    assert result["violations"] == ([] if allowed else ["missing_sms"])
    assert result["counts"]["failed_for_review_allowed"] == (1 if allowed else 0)


def test_any_unread_ledger_makes_it_unknown() -> None:
    exports = good_exports("a1")
    del exports["ai_effects"]
    result = check_effects([], Ledgers.from_exports(**exports), CheckOptions()).to_dict()
    assert result["valid"] == "unknown"
    assert result["counts"] == {}
    assert result["notes"] == ["ledger ai_effects was not read: not exported", "cannot account for every effect"]


def test_ready_narrative_without_ai_call_is_invalid() -> None:
    result = run({**good_exports("a1"), "ai_effects": []})
    assert result["valid"] is False
    assert result["counts"] == counts(ai=0, ai_effect_missing=1)
    assert result["examples"] == {"ai_effect_missing": [{"operation_id": "narrative-a1"}]}


def test_ai_effect_nobody_owes_is_unexpected() -> None:
    exports = good_exports("a1")
    exports["ai_effects"].append(effect("narrative-zz", 9))
    exports["ai_effects"].append(effect("merit-a1", 10))  # wrong provider for this kind
    result = run(exports)
    assert result["violations"] == ["unexpected_ai_effects"]
    assert result["examples"]["unexpected_ai_effects"] == [
        {"operation_id": "merit-a1", "effect_ids": [10], "idempotency_keys": ["merit-a1"]},
        {"operation_id": "narrative-zz", "effect_ids": [9], "idempotency_keys": ["narrative-zz"]},
    ]



def test_finishes_that_failed_or_never_completed_owe_nothing() -> None:
    h = finished_in_history("a1")
    h.call(1, "finish", {"attempt_id": "a2"}, outcome="fail", status=409)
    h.call(2, "finish", {"attempt_id": "a3"}, outcome="info")
    h.call(3, "finish", {"attempt_id": "a4"}, outcome=None)
    assert run(good_exports("a1"), h)["valid"] is True


def _open_narrative(a: str) -> dict:
    """a1 complete (the valid prefix), then ``a``'s narrative still enqueued, no outcome, no AI call."""
    exports = good_exports("a1", a)
    exports["outcomes"] = [r for r in exports["outcomes"] if r["operation_id"] != f"narrative-{a}"]
    exports["outbox"] = [r for r in exports["outbox"] if r["operation_id"] != f"narrative-{a}"]
    exports["outbox"] += outbox_rows(a, status="enqueued", kinds=("narrative",))
    exports["ai_effects"] = [e for e in exports["ai_effects"] if e["operation_id"] != f"narrative-{a}"]
    return exports


@pytest.mark.parametrize("state, verdict", [("running", "unknown"), ("queued", "unknown"), ("abandoned", False),
                                            ("absent", False)])
def test_an_outcome_not_written_yet_is_pending_only_with_the_queues_showing_its_job_in_progress(state: str,
                                                                                                verdict: object) -> None:
    exports = _open_narrative("a2")
    exports["queues"] = {"table": "queues", "exported_at": 160.0, "rows": [
        {"operation_id": "narrative-a2", "kind": "narrative", "lane": "ai", "status": "enqueued",
         "job_id": "narrative-a2-1", "state": state}]}
    result = run(exports)
    assert result["valid"] == verdict
    assert result["counts"]["pending"] == (verdict == "unknown")
    assert result["counts"]["missing_narrative"] == (verdict is False)
    if verdict == "unknown":
        assert result["examples"]["pending"][0]["evidence"] == state


def test_an_outcome_missing_without_the_queue_read_stays_missing() -> None:
    result = run(_open_narrative("a2"))
    assert result["valid"] is False and result["counts"]["missing_narrative"] == 1
