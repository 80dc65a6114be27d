"""The revision checkers on hand-written histories: one valid run, then one failing history
per category, each anomaly placed after valid ops."""

from __future__ import annotations

from typing import Any

import pytest
from checker_builders import HistoryBuilder

from chaos.checkers import UNKNOWN, CheckOptions
from chaos.checkers.answer_reads import check_answer_reads
from chaos.checkers.answers import check_answers
from chaos.checkers.final_answers import check_final_answers
from chaos.checkers.revisions import check_revisions
from chaos.ledgers import Ledgers
from chaos.ops.revisions import READ_ANSWERS, REVISE, read_call, read_revision_ops, revise_call, revision_writes

OPTIONS = CheckOptions()


def revise(h: HistoryBuilder, process: int, q: str, rev: int, content: str, at: float, outcome: str | None = "ok",
           superseded: bool = False, attempt: str = "a1") -> None:
    value = {"attempt_id": attempt, "question": q, "revision": rev, "content": content, "idempotency_key": f"k-{q}-{rev}"}
    h.op(process, "invoke", REVISE, value, at=at)
    if outcome == "ok":
        h.op(process, "ok", REVISE, {**value, "superseded": superseded}, at=at + 0.1, receipt_id=f"r-{q}-{rev}")
    elif outcome is not None:
        h.op(process, outcome, REVISE, value, at=at + 0.1)


def read(h: HistoryBuilder, process: int, at: float, took: float = 0.1, attempt: str = "a1", **shown: Any) -> None:
    answers = {q: [rev, f"r-{q}-{rev}", content] for q, (rev, content) in shown.items()}
    h.op(process, "invoke", READ_ANSWERS, {"attempt_id": attempt}, at=at)
    h.op(process, "ok", READ_ANSWERS, {"attempt_id": attempt, "answers": answers}, at=at + took)


def valid_history() -> HistoryBuilder:
    """q1: revisions 1 and 3 acknowledged, 2 arrives late (superseded); q2: 1 acknowledged,
    2 unknown (it was accepted and is final). Reads follow the writes."""
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0)
    read(h, 9, at=1.2, q1=(1, "A"))
    revise(h, 1, "q1", 3, "C", at=2.0)
    revise(h, 2, "q1", 2, "B", at=2.05, superseded=True)
    revise(h, 1, "q2", 1, "D", at=3.0)
    revise(h, 3, "q2", 2, "A", at=3.5, outcome="info")
    read(h, 9, at=4.0, q1=(3, "C"), q2=(2, "A"))
    return h


def log_row(q: str, rev: int, content: str, superseded: bool = False, **over: Any) -> dict[str, Any]:
    return {"receipt_id": f"r-{q}-{rev}", "attempt_id": "a1", "question": q, "revision": rev, "content": content,
            "idempotency_key": f"k-{q}-{rev}", "node": "web_1", "created_at": 1.0, "superseded": superseded, **over}


def answer_row(q: str, rev: int, content: str, **over: Any) -> dict[str, Any]:
    return {"receipt_id": f"r-{q}-{rev}", "attempt_id": "a1", "student_id": "s1", "question": q, "content": content,
            "idempotency_key": f"k-{q}-{rev}", "revision": rev, **over}


def good_log() -> list[dict[str, Any]]:
    return [log_row("q1", 1, "A"), log_row("q1", 3, "C"), log_row("q1", 2, "B", superseded=True),
            log_row("q2", 1, "D"), log_row("q2", 2, "A")]


def good_answers() -> list[dict[str, Any]]:
    return [answer_row("q1", 3, "C"), answer_row("q2", 2, "A")]


def ledgers(log: list | None = None, answers: list | None = None) -> Ledgers:
    return Ledgers.from_exports(answer_revisions=good_log() if log is None else log,
                                answers=good_answers() if answers is None else answers)


def test_the_valid_history_passes_all_three() -> None:
    h = valid_history()
    revisions = check_revisions(h.ops, ledgers(), OPTIONS)
    final = check_final_answers(h.ops, ledgers(), OPTIONS)
    reads = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert (revisions.valid, final.valid, reads.valid) == (True, True, True), (revisions, final, reads)
    assert revisions.counts["acknowledged"] == 4 and revisions.counts["recovered"] == 1
    assert revisions.counts["superseded_acknowledged"] == 1
    assert final.counts["revisions_written"] == 5 and final.counts["reordered"] == 1 and final.counts["unknown_won"] == 1
    assert final.counts["overtaken_in_flight"] == 1  # q1/2 was sent at 2.05, before q1/3 was acknowledged at 2.1
    assert [e["question"] for e in final.examples["unknown_won"]] == ["q2"]
    assert reads.counts["reads"] == 2


def test_read_visibility_is_measured_from_the_acknowledgement() -> None:
    h = valid_history()
    details = check_revisions(h.ops, ledgers(), OPTIONS).details["read_visibility"]
    # q1/1 acked 1.1, read done 1.3; q1/3, q1/2 (shown by the higher 3) and q2/1 acked 2.1, 2.15, 3.1, read done 4.1
    # -> 0.2, 2.0, 1.95, 1.0; the unknown q2/2 has no latency
    assert details["count"] == 4 and details["max"] == pytest.approx(2.0) and details["p50"] == pytest.approx(1.0)


def test_a_revision_sent_as_the_higher_one_was_acknowledged_was_held_back() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 2, "B", at=1.0)  # acknowledged at 1.1
    revise(h, 1, "q1", 1, "A", at=1.1, superseded=True)
    final = check_final_answers(h.ops, ledgers(log=[], answers=[answer_row("q1", 2, "B")]), OPTIONS)
    assert final.counts["overtaken_in_flight"] == 0


def test_a_revision_held_back_until_the_higher_one_was_acknowledged_was_not_overtaken() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 2, "B", at=1.0)
    revise(h, 1, "q1", 1, "A", at=1.2, superseded=True)  # sent after 2 was acknowledged at 1.1
    final = check_final_answers(h.ops, ledgers(log=[], answers=[answer_row("q1", 2, "B")]), OPTIONS)
    assert final.valid is True and final.counts["reordered"] == 1 and final.counts["overtaken_in_flight"] == 0


def test_concurrent_revisions_in_order_were_not_overtaken() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0)
    revise(h, 2, "q1", 2, "B", at=1.05)  # sent before 1 was acknowledged, arrived after it
    final = check_final_answers(h.ops, ledgers(log=[], answers=[answer_row("q1", 2, "B")]), OPTIONS)
    assert final.counts["overtaken_in_flight"] == 0 and final.counts["reordered"] == 0


def test_reordering_seen_only_in_the_log_counts() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 2, "B", at=1.0)
    revise(h, 2, "q1", 1, "A", at=1.2, outcome="info")  # its superseded reply never arrived
    log = [log_row("q1", 2, "B"), log_row("q1", 1, "A", superseded=True)]
    final = check_final_answers(h.ops, ledgers(log=log, answers=[answer_row("q1", 2, "B")]), OPTIONS)
    assert final.valid is True and final.counts["reordered"] == 1


def test_read_visibility_skips_unknown_writes_and_goes_on() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0, outcome="info")
    revise(h, 2, "q1", 2, "B", at=2.0)
    read(h, 9, at=2.5, q1=(2, "B"))
    details = check_revisions(h.ops, ledgers(log=[log_row("q1", 2, "B")]), OPTIONS).details["read_visibility"]
    assert details["count"] == 1 and details["max"] == pytest.approx(0.5)


def test_read_visibility_counts_a_replayed_revision_once_from_its_first_acknowledgement() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0)
    revise(h, 2, "q1", 1, "A", at=1.5)  # sent twice under the same key: acknowledged at 1.1 and 1.6
    read(h, 9, at=2.0, q1=(1, "A"))
    details = check_revisions(h.ops, ledgers(log=[log_row("q1", 1, "A")]), OPTIONS).details["read_visibility"]
    assert details["count"] == 1 and details["max"] == pytest.approx(1.0)


def test_never_read_counts_acknowledged_revisions_no_read_showed() -> None:
    h = valid_history()
    revise(h, 1, "q3", 1, "B", at=6.0)
    result = check_revisions(h.ops, ledgers(log=good_log() + [log_row("q3", 1, "B")]), OPTIONS)
    assert result.valid is True and result.counts["never_read"] == 1


def test_the_answers_checker_leaves_revised_questions_to_the_revision_checkers() -> None:
    h = valid_history()
    result = check_answers(h.ops, Ledgers.from_exports(answers=good_answers(), attempts=[]), OPTIONS)
    assert result.counts["unexpected"] == 0 and result.counts["rows"] == 2


# --- revisions (set-full over the log) ---------------------------------------------------


def test_an_acknowledged_revision_missing_from_the_log_is_lost() -> None:
    result = check_revisions(valid_history().ops, ledgers(log=[r for r in good_log() if r["revision"] != 1 or r["question"] != "q1"]), OPTIONS)
    assert result.valid is False and result.violations == ["lost"]
    assert result.examples["lost"] == [{"attempt_id": "a1", "question": "q1", "revision": 1, "receipt_ids": ["r-q1-1"]}]


def test_a_revision_logged_twice_is_duplicated() -> None:
    log = good_log() + [log_row("q2", 1, "D", receipt_id="r-other", idempotency_key="k-other")]
    result = check_revisions(valid_history().ops, ledgers(log=log), OPTIONS)
    assert result.valid is False and "duplicated" in result.violations
    assert {"attempt_id": "a1", "question": "q2", "revision": 1, "rows": 2} in result.examples["duplicated"]


def test_one_receipt_on_two_rows_is_duplicated() -> None:
    log = good_log() + [log_row("q3", 1, "D", receipt_id="r-q1-3", idempotency_key="k-q3")]
    h = valid_history()
    revise(h, 4, "q3", 1, "D", at=5.0, outcome="info")
    result = check_revisions(h.ops, ledgers(log=log), OPTIONS)
    assert result.violations == ["duplicated"] and result.examples["duplicated"] == [{"receipt_id": "r-q1-3", "rows": 2}]


def test_one_idempotency_key_on_two_rows_is_duplicated() -> None:
    log = good_log() + [log_row("q3", 1, "D", receipt_id="r-q3", idempotency_key="k-q1-3")]
    h = valid_history()
    revise(h, 4, "q3", 1, "D", at=5.0, outcome="info")
    result = check_revisions(h.ops, ledgers(log=log), OPTIONS)
    assert result.violations == ["duplicated"]
    assert result.examples["duplicated"] == [{"attempt_id": "a1", "idempotency_key": "k-q1-3", "rows": 2}]


def test_a_log_row_nobody_sent_is_unexpected() -> None:
    result = check_revisions(valid_history().ops, ledgers(log=good_log() + [log_row("q1", 4, "D")]), OPTIONS)
    assert result.valid is False and result.violations == ["unexpected"]


def test_a_failed_revision_in_the_log_is_failed_but_present() -> None:
    h = valid_history()
    revise(h, 4, "q3", 1, "B", at=5.0, outcome="fail")
    result = check_revisions(h.ops, ledgers(log=good_log() + [log_row("q3", 1, "B")]), OPTIONS)
    assert result.valid is False and result.violations == ["failed_but_present"]


def test_a_logged_revision_with_other_content_is_a_mismatch() -> None:
    log = [r if (r["question"], r["revision"]) != ("q2", 1) else log_row("q2", 1, "Z") for r in good_log()]
    result = check_revisions(valid_history().ops, ledgers(log=log), OPTIONS)
    assert result.valid is False and result.violations == ["content_mismatch"]


def test_an_unread_log_is_unknown_and_a_malformed_revise_too() -> None:
    h = valid_history()
    assert check_revisions(h.ops, Ledgers(), OPTIONS).valid == UNKNOWN
    h.op(7, "invoke", REVISE, {"attempt_id": "a1", "question": "q1"}, at=9.0)
    assert check_revisions(h.ops, ledgers(), OPTIONS).valid == UNKNOWN


# --- final answers (register) ------------------------------------------------------------


def test_a_late_lower_revision_that_became_final_is_a_lost_update_naming_both() -> None:
    answers = [answer_row("q1", 2, "B"), answer_row("q2", 2, "A")]
    result = check_final_answers(valid_history().ops, ledgers(answers=answers), OPTIONS)
    assert result.valid is False and result.violations == ["lost_update"]
    assert result.examples["lost_update"] == [{
        "attempt_id": "a1", "question": "q1", "final_revision": 2, "final_receipt_id": "r-q1-2",
        "acknowledged_revision": 3, "acknowledged_receipt_id": "r-q1-3",
    }]
    assert result.counts["reordered"] >= 1


def test_an_acknowledged_question_with_no_final_answer_is_lost() -> None:
    result = check_final_answers(valid_history().ops, ledgers(answers=[answer_row("q2", 2, "A")]), OPTIONS)
    assert result.valid is False and result.violations == ["lost"]


def test_a_final_revision_nobody_sent_is_unexpected() -> None:
    answers = [answer_row("q1", 3, "C"), answer_row("q2", 5, "A")]
    result = check_final_answers(valid_history().ops, ledgers(answers=answers), OPTIONS)
    assert result.valid is False and result.violations == ["unexpected"]


def test_a_final_revision_that_only_failed_is_failed_but_present() -> None:
    h = valid_history()
    revise(h, 4, "q2", 4, "B", at=5.0, outcome="fail")
    answers = [answer_row("q1", 3, "C"), answer_row("q2", 4, "B")]
    result = check_final_answers(h.ops, ledgers(answers=answers), OPTIONS)
    assert result.valid is False and result.violations == ["failed_but_present"]


@pytest.mark.parametrize(("content", "over"), [("Z", {}), ("C", {"receipt_id": "r-forged"})])
def test_a_final_value_with_other_content_or_receipt_is_a_mismatch(content: str, over: dict) -> None:
    answers = [answer_row("q1", 3, content, **over), answer_row("q2", 2, "A")]
    result = check_final_answers(valid_history().ops, ledgers(answers=answers), OPTIONS)
    assert result.valid is False and result.violations == ["content_mismatch"]


def test_a_run_where_nothing_was_reordered_is_unknown() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0)
    revise(h, 1, "q1", 2, "B", at=2.0)
    result = check_final_answers(h.ops, ledgers(log=[log_row("q1", 1, "A"), log_row("q1", 2, "B")],
                                                answers=[answer_row("q1", 2, "B")]), OPTIONS)
    assert result.valid == UNKNOWN and result.counts["reordered"] == 0
    assert any("never exercised a late revision" in note for note in result.notes)


def test_an_answer_row_without_revision_is_revision_one() -> None:
    """Run folders older than revisions export no revision: the row is revision 1."""
    h = HistoryBuilder()
    revise(h, 1, "q1", 2, "B", at=1.0)
    revise(h, 2, "q1", 1, "A", at=1.2, superseded=True)
    row = {k: v for k, v in answer_row("q1", 1, "A").items() if k != "revision"}
    result = check_final_answers(h.ops, ledgers(log=[], answers=[row]), OPTIONS)
    assert result.violations == ["lost_update"] and result.examples["lost_update"][0]["final_revision"] == 1


def test_final_answers_never_read_is_unknown() -> None:
    assert check_final_answers(valid_history().ops, Ledgers(), OPTIONS).valid == UNKNOWN


# --- reads during the run ---------------------------------------------------------------


def test_a_read_older_than_an_acknowledged_revision_is_stale() -> None:
    h = valid_history()
    read(h, 9, at=5.0, q1=(1, "A"), q2=(2, "A"))
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.valid is False and "stale_read" in result.violations
    assert result.examples["stale_read"][0]["acknowledged_revision"] == 3


def test_a_read_missing_an_acknowledged_question_is_stale_and_other_attempts_are_not_mixed_in() -> None:
    h = valid_history()
    revise(h, 5, "q7", 1, "A", at=4.5, attempt="a2")  # another attempt's question: not a1's business
    read(h, 9, at=5.0, q1=(3, "C"))  # q2 (acknowledged revision 1) is missing
    read(h, 8, at=5.0, attempt="a2", q7=(1, "A"))
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.violations == ["stale_read", "vanished"]
    assert [(e["attempt_id"], e["question"]) for e in result.examples["stale_read"]] == [("a1", "q2")]


def test_an_unshown_unknown_revision_does_not_stop_the_other_questions_being_checked() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0, outcome="info")  # never shown: fine
    revise(h, 2, "q2", 1, "B", at=1.0)
    read(h, 9, at=2.0, q2=(4, "B"))
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.violations == ["unexpected"] and result.examples["unexpected"][0]["question"] == "q2"


def test_a_read_concurrent_with_the_write_may_still_show_the_older_revision() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0)
    revise(h, 1, "q1", 2, "B", at=2.0)  # acknowledged at 2.1
    read(h, 9, at=2.05, q1=(1, "A"))  # began before the acknowledgement
    read(h, 9, at=2.3, q1=(2, "B"))
    assert check_answer_reads(h.ops, ledgers(), OPTIONS).valid is True


def test_a_read_invoked_as_the_write_was_acknowledged_may_show_the_older_revision() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0)
    revise(h, 1, "q1", 2, "B", at=2.0)  # acknowledged at 2.1
    read(h, 9, at=2.1, q1=(1, "A"))
    assert check_answer_reads(h.ops, ledgers(), OPTIONS).valid is True


def test_an_unknown_revision_seen_once_never_vanishes() -> None:
    h = valid_history()
    read(h, 9, at=5.0, q1=(3, "C"), q2=(1, "D"))  # q2/2 (info) was shown at 4.1
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.valid is False and result.violations == ["vanished"]
    assert result.examples["vanished"][0]["seen_revision"] == 2 and result.examples["vanished"][0]["later_revision"] == 1


def test_a_read_invoked_as_the_earlier_one_completed_is_concurrent_not_vanished() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0, outcome="info")
    revise(h, 2, "q1", 2, "B", at=1.0, outcome="info")
    read(h, 9, at=1.9, took=0.1, q1=(2, "B"))  # completes at 2.0
    read(h, 8, at=2.0, q1=(1, "A"))  # invoked at 2.0: not after the first completed
    assert check_answer_reads(h.ops, ledgers(), OPTIONS).valid is True


def test_vanished_looks_past_an_overlapping_earlier_read() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=0.5, outcome="info")
    revise(h, 2, "q1", 2, "B", at=0.5, outcome="info")
    read(h, 7, at=1.0, took=2.0, q1=(2, "B"))  # long read, overlaps the last one
    read(h, 9, at=1.5, q1=(2, "B"))  # completes at 1.6
    read(h, 8, at=2.0, q1=(1, "A"))
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.violations == ["vanished"] and len(result.examples["vanished"]) == 1


def test_a_read_showing_a_revision_nobody_sent_is_unexpected() -> None:
    h = valid_history()
    read(h, 9, at=5.0, q1=(9, "C"), q2=(2, "A"))
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.valid is False and result.violations == ["unexpected"]


def test_a_read_showing_other_content_is_a_mismatch() -> None:
    h = valid_history()
    read(h, 9, at=5.0, q1=(3, "Q"), q2=(2, "A"))
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.valid is False and result.violations == ["content_mismatch"]


def test_revisions_never_read_during_the_run_are_unknown() -> None:
    h = HistoryBuilder()
    revise(h, 1, "q1", 1, "A", at=1.0)
    assert check_answer_reads(h.ops, ledgers(), OPTIONS).valid == UNKNOWN


def test_a_history_without_revisions_is_not_judged_by_them() -> None:
    h = HistoryBuilder()
    h.call(1, "answer", {"attempt_id": "a1", "question": "q1", "content": "A", "idempotency_key": "k"})
    for check in (check_revisions, check_final_answers, check_answer_reads):
        result = check(h.ops, Ledgers(), OPTIONS)
        assert result.valid is True and "nothing to check" in result.notes[0]


# --- the history ops themselves ------------------------------------------------------------


def test_malformed_revises_are_counted_one_each_and_the_rest_still_read() -> None:
    h = HistoryBuilder()
    h.op(1, "invoke", REVISE, {"attempt_id": "a1", "question": "q1"}, at=1.0)
    h.op(1, "fail", REVISE, {"attempt_id": "a1", "question": "q1"}, at=1.1)
    h.op(2, "invoke", REVISE, {"attempt_id": "a1", "question": "q2", "revision": "2", "content": "A",
                               "idempotency_key": "k"}, at=1.2)
    revise(h, 3, "q3", 1, "C", at=2.0)
    revise(h, 4, "q4", 1, "D", at=3.0, outcome=None)  # never completed: unknown
    writes, malformed = revision_writes(h.ops)
    assert malformed == 2
    assert [(w.question, w.outcome, w.completed_at) for w in writes] == [("q3", "ok", 2.1), ("q4", "info", None)]
    result = check_revisions(h.ops, ledgers(log=[log_row("q3", 1, "C")]), OPTIONS)
    assert result.valid == UNKNOWN and "2 revise invoke(s) lack a field" in result.notes[0]


def test_the_calls_carry_what_the_checkers_read() -> None:
    call = revise_call("a1", "q1", 3, "B", "k1", {"Authorization": "Bearer t"})
    assert (call.method, call.path, call.json) == ("PUT", "/v1/attempts/a1/answers/q1", {"content": "B", "revision": 3})
    assert call.headers == {"Authorization": "Bearer t", "Idempotency-Key": "k1"}
    assert call.observe({"superseded": True, "current_revision": 4, "receipt_id": "r"}) == {
        "superseded": True, "current_revision": 4}
    read_answers = read_call("a1", {})
    assert (read_answers.method, read_answers.path, read_answers.value) == ("GET", "/v1/attempts/a1/answers", {"attempt_id": "a1"})
    shown = read_answers.observe({"answers": [{"question": "q1", "revision": 2, "receipt_id": "r", "content": "B"}]})
    assert shown == {"answers": {"q1": [2, "r", "B"]}}
    assert read_answers.observe({"answers": None}) == {"answers": {}}


def test_an_unreadable_ok_read_is_counted_once_and_makes_the_reads_unknown() -> None:
    h = valid_history()
    h.op(6, "invoke", READ_ANSWERS, {"attempt_id": "a1"}, at=6.0)
    h.op(6, "ok", READ_ANSWERS, {"attempt_id": "a1"}, at=6.1)  # no "answers"
    result = check_answer_reads(h.ops, ledgers(), OPTIONS)
    assert result.valid == UNKNOWN and result.counts["reads"] == 2
    assert "1 ok read(s) of the answers carry no readable result" in result.notes


def test_the_shared_preamble_reads_every_op_once_and_names_what_each_checker_cannot_judge() -> None:
    h = valid_history()
    h.op(5, "invoke", REVISE, {"attempt_id": "a1", "question": "q9"}, at=5.0)  # no revision: malformed
    h.op(6, "invoke", READ_ANSWERS, {"attempt_id": "a1"}, at=6.0)
    h.op(6, "ok", READ_ANSWERS, {"attempt_id": "a1"}, at=6.1)  # no "answers": unreadable
    ops = read_revision_ops(h.ops)
    assert (len(ops.writes), ops.malformed, len(ops.reads), ops.bad_reads) == (5, 1, 2, 1)
    assert sorted(ops.tries_of) == [("a1", "q1"), ("a1", "q2")] and not ops.nothing_to_check
    writes_only = ["1 revise invoke(s) lack a field: they cannot be judged"]
    assert ops.unjudged(with_reads=False) == writes_only
    assert ops.unjudged(with_reads=True) == writes_only + ["1 ok read(s) of the answers carry no readable result"]
    # final_answers judges no read: the unreadable one is not among its reasons
    assert check_final_answers(h.ops, ledgers(), OPTIONS).notes == writes_only
    assert read_revision_ops(HistoryBuilder().ops).nothing_to_check


def test_an_ok_read_without_a_readable_result_makes_the_revisions_verdict_unknown() -> None:
    """The revisions checker judges the reads too (read visibility): an unreadable read after valid ops is unknown."""
    h = valid_history()
    assert check_revisions(h.ops, ledgers(), OPTIONS).valid is True
    h.op(9, "invoke", READ_ANSWERS, {"attempt_id": "a1"}, at=5.0)
    h.op(9, "ok", READ_ANSWERS, {"attempt_id": "a1"}, at=5.1)  # no "answers"
    result = check_revisions(h.ops, ledgers(), OPTIONS)
    assert result.valid == UNKNOWN
    assert any("carry no readable result" in note for note in result.notes)
