"""chaos.ledgers: reading a run folder's export files into typed rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import chaos.ledgers as ledgers_module
from chaos.ledgers import AnswerRow, EffectRow, ExamRow, LedgerFormatError, Ledgers, OutcomeRow, load_ledgers


def write(folder: Path, name: str, document: object) -> None:
    (folder / "ledgers").mkdir(parents=True, exist_ok=True)
    (folder / "ledgers" / name).write_text(json.dumps(document) if not isinstance(document, str) else document)


def test_all_is_exact() -> None:
    assert sorted(ledgers_module.__all__) == sorted(
        [
            "AlertRow", "AnswerRow", "AttemptRow", "AuditRow", "EffectRow", "ExamRow", "LANE_OF_KIND", "LEDGER_FILES",
            "LaneStateRow", "LedgerFormatError", "Ledgers", "OUTBOX_KINDS", "OutboxRow", "OutcomeRow", "QueueRow", "RefusalRow", "ReservationRow",
            "RevisionRow", "load_ledgers", "LogLineRow", "ProducedRow", "ShipperStatRow",
        ]
    )


def test_constants_mirror_the_stack() -> None:
    from chaos.checkers.latency import LANES as CHECKER_LANES
    from stack.lanes.queues import LANE_OF_KIND, LANES
    from stack.ledger.schema import OUTBOX_KINDS

    assert ledgers_module.OUTBOX_KINDS == OUTBOX_KINDS
    assert ledgers_module.LANE_OF_KIND == LANE_OF_KIND
    assert CHECKER_LANES == LANES


def test_loads_every_table_with_exported_at_and_reports_missing_and_malformed(tmp_path: Path) -> None:
    answer = {"receipt_id": "r1", "attempt_id": "a1", "student_id": "s1", "question": "q1", "content": "B",
              "idempotency_key": "k", "node": "web_1", "created_at": 5}
    write(tmp_path, "answers.json", {"table": "answers", "exported_at": 99.5, "rows": [answer]})
    write(tmp_path, "outcomes.json", {"table": "outcomes", "rows": [
        {"id": 1, "operation_id": "merit-a1", "attempt_id": "a1", "kind": "merit", "status": "ready", "payload": '{"score": 7}', "created_at": 6}
    ]})
    write(tmp_path, "sms_effects.json", {"provider": "sms", "exported_at": 100, "effects": [
        {"id": 3, "operation_id": "sms-a1", "idempotency_key": None, "created_at": 7, "request": {"to": "+1"}}
    ]})
    write(tmp_path, "attempts.json", "{not json")
    write(tmp_path, "outbox.json", {"table": "outcomes", "rows": []})
    ledgers = load_ledgers(tmp_path)
    assert ledgers.answers == (AnswerRow("r1", "a1", "q1", "B", "s1", "k", "web_1", 5.0),)
    assert ledgers.outcomes == (OutcomeRow("merit-a1", "a1", "merit", "ready", 1, {"score": 7}, 6.0),)
    assert ledgers.sms_effects == (EffectRow("sms-a1", 3, None, 7.0, {"to": "+1"}),)
    assert ledgers.exported_at == {"answers": 99.5, "sms_effects": 100.0}
    assert ledgers.attempts is None and ledgers.outbox is None and ledgers.ai_effects is None
    assert ledgers.problems["attempts"].startswith("JSONDecodeError")
    assert "table='outcomes', expected 'outbox'" in ledgers.problems["outbox"]
    assert ledgers.problems["ai_effects"].endswith("ai_effects.json does not exist")
    assert ledgers.missing("answers", "ai_effects") == [f"ledger ai_effects was not read: {ledgers.problems['ai_effects']}"]


def test_empty_table_is_read_not_missing(tmp_path: Path) -> None:
    write(tmp_path, "answers.json", {"table": "answers", "exported_at": 1, "rows": []})
    assert load_ledgers(tmp_path).answers == ()


@pytest.mark.parametrize(
    "rows, match",
    [
        ([{"receipt_id": "r1", "attempt_id": "a1", "question": "q1"}], "row 0: missing field 'content'"),
        (["not an object"], "expected an object"),
        ([{"receipt_id": "r", "attempt_id": "a", "question": "q", "content": "B", "created_at": "noon"}], "not a number"),
    ],
)
def test_malformed_rows_name_the_row_and_field(rows: list, match: str) -> None:
    with pytest.raises(LedgerFormatError, match=match):
        Ledgers.from_exports(answers=rows)


def test_from_exports_rejects_unknown_tables() -> None:
    with pytest.raises(TypeError, match="unknown ledger tables"):
        Ledgers.from_exports(answer=[])


def test_loads_the_exams_table_with_its_answer_key(tmp_path: Path) -> None:
    key = {f"q{n}": "ABCD"[n % 4] for n in range(1, 21)}
    write(tmp_path, "exams.json", {"table": "exams", "exported_at": 5.0, "rows": [
        {"exam_code": "NOVA-101", "question_count": 20, "answer_key": key}]})
    ledgers = load_ledgers(tmp_path)
    assert ledgers.exams == (ExamRow("NOVA-101", 20, key),)
    assert ledgers.exported_at["exams"] == 5.0


@pytest.mark.parametrize(
    "name, document, match",
    [
        # A provider ledger copied from the other provider must not be read as this one.
        ("sms_effects.json", {"provider": "ai", "exported_at": 1, "effects": []}, "provider='ai', expected 'sms'"),
        ("ai_effects.json", {"table": "ai", "exported_at": 1, "effects": []}, "provider=None, expected 'ai'"),
        ("answers.json", {"exported_at": 1, "rows": []}, "table=None, expected 'answers'"),
        ("answers.json", [], "expected an export object naming its table, got list"),
        ("sms_effects.json", [], "expected an export object naming its provider, got list"),
        ("answers.json", "7", "got int"),
        ("answers.json", {"table": "answers", "rows": {"r1": {}}}, "no 'rows' list"),
        ("answers.json", {"table": "answers", "exported_at": "noon", "rows": []}, "exported_at='noon' is not a number"),
        ("exams.json", {"table": "exams", "rows": [{"exam_code": "X", "question_count": 0, "answer_key": {}}]},
         "question_count=0 is not a whole number >= 1"),
        ("exams.json", {"table": "exams", "rows": [{"exam_code": "X", "question_count": 2, "answer_key": ["B", "C"]}]},
         "answer_key must map each question"),
    ],
)
def test_files_that_do_not_name_this_table_are_refused(tmp_path: Path, name: str, document: object, match: str) -> None:
    write(tmp_path, name, document)
    table = name.removesuffix(".json")
    ledgers = load_ledgers(tmp_path)
    assert getattr(ledgers, table) is None
    assert match in ledgers.problems[table]


def test_an_absent_optional_field_does_not_hide_the_fields_after_it() -> None:
    row = {"receipt_id": "r1", "attempt_id": "a1", "question": "q1", "content": "B", "node": "web_1", "created_at": 5}
    assert Ledgers.from_exports(answers=[row]).answers == (AnswerRow("r1", "a1", "q1", "B", None, None, "web_1", 5.0),)


def test_from_exports_skips_a_table_given_as_none_and_reads_the_rest() -> None:
    ledgers = Ledgers.from_exports(answers=None, attempts=[{"attempt_id": "a1", "status": "open"}])
    assert ledgers.answers is None and ledgers.attempts is not None and len(ledgers.attempts) == 1
