"""answers checker: one literal history + final read per category, passing and failing.

Every failing history starts with valid ops (``prelude``): a scan that stops at the
first op it skips, instead of going on, must not pass them.
"""

from __future__ import annotations

import json

from typing import Any

from checker_builders import HistoryBuilder, answer, answer_row, attempt_row

from chaos.checkers.answers import check_answers, fingerprint
from chaos.checkers import CheckOptions
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
    "receipt_mismatch": 0,
    "idempotency_key_mismatch": 0,
    "student_mismatch": 0,
    "recovered": 0,
    "absent_info": 0,
}
PRELUDE = {"attempted": 2, "acknowledged": 2, "rows": 2}


def prelude(h: HistoryBuilder) -> list[dict[str, Any]]:
    """Valid ops first: a sign-in, a start, two kept answers of attempt a0. Returns their rows."""
    h.call(0, "session", {"student_id": "s1"}, status=201)
    h.call(0, "start", {"student_id": "s1", "idempotency_key": "start-s1"}, status=201)
    h.call(0, "answer", answer("a0", "q1", "A"), status=201)
    h.call(0, "answer", answer("a0", "q2", "B"), status=201)
    return [answer_row("a0", "q1", "A"), answer_row("a0", "q2", "B")]


def check(history: HistoryBuilder, rows: list[dict]) -> dict:
    attempts = [attempt_row(aid) for aid in sorted({row["attempt_id"] for row in rows})]
    return check_answers(history.ops, Ledgers.from_exports(answers=rows, attempts=attempts), OPTIONS).to_dict()


def expected(valid: Any, counts: dict, violations: list[str], examples: dict, notes: list[str] | None = None) -> dict:
    totals = {**ZERO, **{k: PRELUDE.get(k, 0) + counts.get(k, 0) for k in ZERO}}
    return {"name": "answers", "valid": valid, "counts": totals, "violations": violations, "examples": examples, "notes": notes or []}


def test_every_acknowledged_answer_kept_is_valid() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), status=201, receipt_id="r-a1-q1")
    h.call(1, "answer", answer("a1", "q2", "C"), status=201)
    rows += [answer_row("a1", "q1", "B"), answer_row("a1", "q2", "C")]
    assert check(h, rows) == expected(True, {"attempted": 2, "acknowledged": 2, "rows": 2}, [], {})


def test_acknowledged_answer_missing_is_lost() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"))
    h.call(1, "answer", answer("a1", "q2", "C"))
    h.call(1, "answer", answer("a1", "q3", "D"))
    result = check(h, rows + [answer_row("a1", "q1", "B"), answer_row("a1", "q3", "D")])
    assert result == expected(
        False,
        {"attempted": 3, "acknowledged": 3, "rows": 2, "lost": 1},
        ["lost"],
        {"lost": [{"attempt_id": "a1", "question": "q2", "content": fingerprint("C")}]},
    )


def test_stored_content_differs_from_acknowledged_is_mismatch() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"))
    result = check(h, rows + [answer_row("a1", "q1", "D")])
    assert result == expected(
        False,
        {"attempted": 1, "acknowledged": 1, "rows": 1, "content_mismatch": 1},
        ["content_mismatch"],
        {"content_mismatch": [{"attempt_id": "a1", "question": "q1", "acknowledged": [fingerprint("B")], "stored": [fingerprint("D")]}]},
    )


def test_two_rows_for_one_question_is_duplicated() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), receipt_id="r1")
    rows += [answer_row("a1", "q1", "B", receipt_id="r1"), answer_row("a1", "q1", "B", receipt_id="r2")]
    result = check(h, rows)
    assert result["valid"] is False
    assert result["violations"] == ["duplicated", "receipt_mismatch"]  # r2 is a receipt the client was never given
    assert result["examples"]["duplicated"] == [{"attempt_id": "a1", "question": "q1", "rows": 2, "receipt_ids": ["r1", "r2"]}]


def test_one_receipt_id_on_two_rows_is_duplicated() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), receipt_id="r1")
    h.call(1, "answer", answer("a1", "q2", "C"), receipt_id="r1")
    rows += [answer_row("a1", "q1", "B", receipt_id="r1"), answer_row("a1", "q2", "C", receipt_id="r1")]
    result = check(h, rows)
    assert result["violations"] == ["duplicated"]
    assert result["counts"]["duplicated"] == 1
    assert result["examples"] == {"duplicated": [{"receipt_id": "r1", "rows": 2}]}


def test_failed_answer_that_happened_is_invalid() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="fail", status=422)
    result = check(h, rows + [answer_row("a1", "q1", "B")])
    assert result == expected(
        False,
        {"attempted": 1, "rows": 1, "failed_but_present": 1},
        ["failed_but_present"],
        {"failed_but_present": [{"attempt_id": "a1", "question": "q1", "stored": [fingerprint("B")], "receipt_ids": ["r-a1-q1"]}]},
    )


def test_failed_answer_absent_is_valid() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="fail", status=422)
    assert check(h, rows) == expected(True, {"attempted": 1}, [], {})


def test_row_nobody_sent_is_unexpected() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"))
    result = check(h, rows + [answer_row("a1", "q1", "B"), answer_row("a9", "q3", "A")])
    assert result == expected(
        False,
        {"attempted": 1, "acknowledged": 1, "rows": 2, "unexpected": 1},
        ["unexpected"],
        {"unexpected": [{"attempt_id": "a9", "question": "q3", "receipt_id": "r-a9-q3", "content": fingerprint("A")}]},
    )


def test_info_answers_are_recovered_or_absent_not_errors() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="info", error="ReadTimeout")
    h.call(2, "answer", answer("a1", "q2", "C"), outcome="info", error="ReadTimeout")
    h.call(3, "answer", answer("a1", "q3", "D"), outcome=None)  # run ended mid-call: indeterminate
    result = check(h, rows + [answer_row("a1", "q1", "B")])
    assert result == expected(
        True,
        {"attempted": 3, "rows": 1, "recovered": 1, "absent_info": 2},
        [],
        {
            "recovered": [{"attempt_id": "a1", "question": "q1", "stored": [fingerprint("B")]}],
            "absent_info": [{"attempt_id": "a1", "question": "q2"}, {"attempt_id": "a1", "question": "q3"}],
        },
    )


def test_info_then_retry_ok_counts_once_as_acknowledged() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B", key="k1"), outcome="info")
    h.call(2, "answer", answer("a1", "q1", "B", key="k1"), status=200)
    row = {**answer_row("a1", "q1", "B"), "idempotency_key": "k1"}
    assert check(h, rows + [row]) == expected(True, {"attempted": 1, "acknowledged": 1, "rows": 1}, [], {})


def test_recovered_row_with_content_nobody_sent_is_mismatch() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), outcome="info")
    result = check(h, rows + [answer_row("a1", "q1", "Z")])
    assert result["valid"] is False
    assert result["violations"] == ["content_mismatch"]
    assert result["examples"]["content_mismatch"] == [{"attempt_id": "a1", "question": "q1", "sent": [fingerprint("B")], "stored": [fingerprint("Z")]}]


def test_receipt_other_than_the_one_acknowledged_is_caught() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"))
    h.call(1, "answer", answer("a1", "q2", "C"), receipt_id="r-told")
    result = check(h, rows + [answer_row("a1", "q1", "B"), answer_row("a1", "q2", "C", receipt_id="r-forged")])
    assert result["violations"] == ["receipt_mismatch"]
    assert result["examples"]["receipt_mismatch"] == [
        {"attempt_id": "a1", "question": "q2", "receipt_id": "r-forged", "acknowledged": ["r-told"]}]


def test_idempotency_key_nobody_sent_is_caught() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"))
    h.call(1, "answer", answer("a1", "q2", "C"))
    forged = {**answer_row("a1", "q2", "C"), "idempotency_key": "k-other"}
    result = check(h, rows + [answer_row("a1", "q1", "B"), forged])
    assert result["violations"] == ["idempotency_key_mismatch"]
    assert result["examples"]["idempotency_key_mismatch"] == [
        {"attempt_id": "a1", "question": "q2", "receipt_id": "r-a1-q2", "idempotency_key": "k-other", "sent": ["k-a1-q2"]}]


def test_answer_filed_under_another_student_is_caught() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "session", {"student_id": "s2"})
    h.call(1, "start", {"student_id": "s2", "idempotency_key": "start-s2"})
    h.call(1, "answer", answer("a1", "q1", "B"))
    h.call(1, "answer", answer("a1", "q2", "C"))
    stolen = {**answer_row("a1", "q2", "C"), "student_id": "s1"}
    attempts = [attempt_row("a0"), {**attempt_row("a1"), "student_id": "s2"}]
    ledgers = Ledgers.from_exports(answers=rows + [{**answer_row("a1", "q1", "B"), "student_id": "s2"}, stolen], attempts=attempts)
    result = check_answers(h.ops, ledgers, OPTIONS).to_dict()
    assert result["violations"] == ["student_mismatch"]
    assert [(e["question"], e["student_id"], e["expected"]) for e in result["examples"]["student_mismatch"]] == [("q2", "s1", "s2")]


def test_the_history_names_the_student_even_when_the_attempt_row_was_changed() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    attempts = [{**attempt_row("a0"), "student_id": "s9"}]
    ledgers = Ledgers.from_exports(answers=[{**row, "student_id": "s9"} for row in rows], attempts=attempts)
    result = check_answers(h.ops, ledgers, OPTIONS).to_dict()
    assert result["counts"]["student_mismatch"] == 2


def test_malformed_answer_invokes_make_it_unknown_and_answers_after_them_are_still_judged() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", {"attempt_id": "a1", "question": "q1"})  # no content nor key: cannot be judged
    h.call(1, "answer", "not an object")
    h.call(1, "answer", answer("a1", "q2", "C"))  # acknowledged, and lost
    result = check(h, rows)
    assert result["valid"] is False and result["violations"] == ["lost"]
    assert result["notes"][0] == "2 answer invoke(s) lack one of attempt_id, question, content, idempotency_key: they cannot be judged"


def test_every_answer_malformed_and_no_rows_is_unknown_not_valid() -> None:
    h = HistoryBuilder()
    h.call(0, "session", {"student_id": "s1"})
    for n in range(3):
        h.call(0, "answer", {"attempt_id": "a1", "question": f"q{n}", "content": "B"})
    result = check(h, [])
    assert result["valid"] == "unknown"
    assert result["counts"]["attempted"] == 0


def test_ok_answer_without_receipt_or_unverifiable_student_is_unknown() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    h.call(1, "answer", answer("a1", "q1", "B"), receipt_id=None)
    ledgers = Ledgers.from_exports(answers=rows + [answer_row("a1", "q1", "B")], attempts=[attempt_row("a0")])
    result = check_answers(h.ops, ledgers, OPTIONS).to_dict()
    assert result["valid"] == "unknown"
    assert result["notes"] == [
        "1 ok answer(s) carry no receipt_id: the receipt cannot be checked",
        "1 answer row(s) whose student cannot be verified (no student_id, or no start in the history nor attempt row)",
    ]


def test_examples_are_bounded_but_counts_are_not() -> None:
    h = HistoryBuilder()
    rows = prelude(h)
    for n in range(20):
        h.call(1, "answer", answer("a1", f"q{n:02}", "B"))
    result = check(h, rows)
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


def test_examples_never_carry_answer_text() -> None:
    """Reports are not evidence files: a lost or mismatched answer shows a fingerprint only."""
    secret = "canary-answer-7f3a"
    h = HistoryBuilder()
    h.call(0, "answer", answer("a1", "q1", "B"))
    h.call(1, "answer", answer("a1", "q2", secret))
    h.call(2, "answer", answer("a1", "q3", secret), outcome="fail")
    rows = [answer_row("a1", "q1", "B"), answer_row("a1", "q3", secret)]
    result = check(h, rows)
    assert result["valid"] is False and result["counts"]["lost"] == 1 and result["counts"]["failed_but_present"] == 1
    assert secret not in json.dumps(result) and fingerprint(secret) in json.dumps(result)
