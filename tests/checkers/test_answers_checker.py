"""answers checker: one literal history + final read per category, passing and failing."""

from __future__ import annotations

from checker_builders import HistoryBuilder, answer, answer_row

from chaos.checkers.answers import check_answers
from chaos.checkers.base import CheckOptions
from chaos.ledgers import Ledgers

OPTIONS = CheckOptions()

ZERO = {
    "attempted": 0,
    "acknowledged": 0,
    "rows": 0,
    "lost": 0,
    "content_mismatch": 0,
    "failed_but_present": 0,
    "unexpected": 0,
    "duplicated": 0,
    "recovered": 0,
    "absent_info": 0,
}


def check(history: HistoryBuilder, rows: list[dict]) -> dict:
    return check_answers(history.ops, Ledgers.from_exports(answers=rows), OPTIONS).to_dict()


def expected(valid: bool, counts: dict, violations: list[str], examples: dict) -> dict:
    return {"name": "answers", "valid": valid, "counts": {**ZERO, **counts}, "violations": violations, "examples": examples, "notes": []}


def test_every_acknowledged_answer_kept_is_valid() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"), status=201, receipt_id="r-a1-q1")
    h.call(1, "answer", answer("a1", "q2", "C"), status=201)
    rows = [answer_row("a1", "q1", "B"), answer_row("a1", "q2", "C")]
    assert check(h, rows) == expected(True, {"attempted": 2, "acknowledged": 2, "rows": 2}, [], {})


def test_acknowledged_answer_missing_is_lost() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"))
    h.call(1, "answer", answer("a1", "q2", "C"))
    result = check(h, [answer_row("a1", "q2", "C")])
    assert result == expected(
        False,
        {"attempted": 2, "acknowledged": 2, "rows": 1, "lost": 1},
        ["lost"],
        {"lost": [{"attempt_id": "a1", "question": "q1", "content": "B"}]},
    )


def test_stored_content_differs_from_acknowledged_is_mismatch() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"))
    result = check(h, [answer_row("a1", "q1", "D")])
    assert result == expected(
        False,
        {"attempted": 1, "acknowledged": 1, "rows": 1, "content_mismatch": 1},
        ["content_mismatch"],
        {"content_mismatch": [{"attempt_id": "a1", "question": "q1", "acknowledged": ["B"], "stored": ["D"]}]},
    )


def test_two_rows_for_one_question_is_duplicated() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"))
    rows = [answer_row("a1", "q1", "B", receipt_id="r1"), answer_row("a1", "q1", "B", receipt_id="r2")]
    result = check(h, rows)
    assert result == expected(
        False,
        {"attempted": 1, "acknowledged": 1, "rows": 2, "duplicated": 1},
        ["duplicated"],
        {"duplicated": [{"attempt_id": "a1", "question": "q1", "rows": 2, "receipt_ids": ["r1", "r2"]}]},
    )


def test_one_receipt_id_on_two_rows_is_duplicated() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"))
    h.call(1, "answer", answer("a1", "q2", "C"))
    rows = [answer_row("a1", "q1", "B", receipt_id="r1"), answer_row("a1", "q2", "C", receipt_id="r1")]
    result = check(h, rows)
    assert result["valid"] is False
    assert result["counts"]["duplicated"] == 1
    assert result["examples"] == {"duplicated": [{"receipt_id": "r1", "rows": 2}]}


def test_failed_answer_that_happened_is_invalid() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="fail", status=422)
    result = check(h, [answer_row("a1", "q1", "B")])
    assert result == expected(
        False,
        {"attempted": 1, "rows": 1, "failed_but_present": 1},
        ["failed_but_present"],
        {"failed_but_present": [{"attempt_id": "a1", "question": "q1", "stored": ["B"], "receipt_ids": ["r-a1-q1"]}]},
    )


def test_failed_answer_absent_is_valid() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="fail", status=422)
    assert check(h, []) == expected(True, {"attempted": 1}, [], {})


def test_row_nobody_sent_is_unexpected() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"))
    result = check(h, [answer_row("a1", "q1", "B"), answer_row("a9", "q3", "A")])
    assert result == expected(
        False,
        {"attempted": 1, "acknowledged": 1, "rows": 2, "unexpected": 1},
        ["unexpected"],
        {"unexpected": [{"attempt_id": "a9", "question": "q3", "receipt_id": "r-a9-q3", "content": "A"}]},
    )


def test_info_answers_are_recovered_or_absent_not_errors() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="info", error="ReadTimeout")
    h.call(2, "answer", answer("a1", "q2", "C"), outcome="info", error="ReadTimeout")
    h.call(3, "answer", answer("a1", "q3", "D"), outcome=None)  # run ended mid-call: indeterminate
    result = check(h, [answer_row("a1", "q1", "B")])
    assert result == expected(
        True,
        {"attempted": 3, "rows": 1, "recovered": 1, "absent_info": 2},
        [],
        {
            "recovered": [{"attempt_id": "a1", "question": "q1", "stored": ["B"]}],
            "absent_info": [{"attempt_id": "a1", "question": "q2"}, {"attempt_id": "a1", "question": "q3"}],
        },
    )


def test_info_then_retry_ok_counts_once_as_acknowledged() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B", key="k1"), outcome="info")
    h.call(2, "answer", answer("a1", "q1", "B", key="k1"), status=200)
    assert check(h, [answer_row("a1", "q1", "B")]) == expected(True, {"attempted": 1, "acknowledged": 1, "rows": 1}, [], {})


def test_recovered_row_with_content_nobody_sent_is_mismatch() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="info")
    result = check(h, [answer_row("a1", "q1", "Z")])
    assert result["valid"] is False
    assert result["violations"] == ["content_mismatch"]
    assert result["examples"]["content_mismatch"] == [{"attempt_id": "a1", "question": "q1", "sent": ["B"], "stored": ["Z"]}]


def test_examples_are_bounded_but_counts_are_not() -> None:
    h = HistoryBuilder()
    for n in range(20):
        h.call(1, "answer", answer("a1", f"q{n:02}", "B"))
    result = check(h, [])
    assert result["counts"]["lost"] == 20
    assert len(result["examples"]["lost"]) == 8


def test_no_answers_export_is_unknown() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", answer("a1", "q1", "B"))
    result = check_answers(h.ops, Ledgers(problems={"answers": "HTTP 503"}), OPTIONS).to_dict()
    assert result == {
        "name": "answers",
        "valid": "unknown",
        "counts": {},
        "violations": [],
        "examples": {},
        "notes": ["ledger answers was not read: HTTP 503", "answers were never read: cannot tell lost from kept"],
    }
