"""payloads checker: ready outcomes say what the exported facts say they must.

One good final read of three attempts; each failing case changes one payload of
the LAST attempt (a3), after valid ones, so a scan that stops early passes nothing.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from checker_builders import HistoryBuilder

from chaos.checkers import CheckOptions
from chaos.checkers.base import UNKNOWN
from chaos.checkers.payloads import check_payloads, score_of, sms_body
from chaos.ledgers import Ledgers

KEY = {"q1": "A", "q2": "B", "q3": "C", "q4": "D"}
ANSWERS = {"a1": {"q1": "A", "q2": "B", "q3": " c "}, "a2": {"q1": "A", "q2": "C"}, "a3": dict(KEY)}
SCORES = {"a1": 3, "a2": 1, "a3": 4}
RANKED = {"a1": ["a1"], "a2": ["a1", "a2"], "a3": ["a1", "a2", "a3"]}
POSITIONS = {"a1": 1, "a2": 2, "a3": 1}


def card(aid: str) -> dict[str, Any]:
    return {"attempt_id": aid, "student_id": f"s-{aid}", "exam_code": "NOVA-101", "score": SCORES[aid], "max_score": 4,
            "position": POSITIONS[aid], "ranked_against": RANKED[aid], "finished_attempts": len(RANKED[aid]), "computed_at": 10.0}


def outcome(aid: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"operation_id": f"{kind}-{aid}", "attempt_id": aid, "kind": kind, "status": "ready", "payload": payload}


def good() -> dict[str, Any]:
    exports: dict[str, Any] = {
        "exams": [{"exam_code": "NOVA-101", "question_count": 4, "answer_key": KEY}],
        "attempts": [{"attempt_id": a, "student_id": f"s-{a}", "exam_code": "NOVA-101", "status": "finished"} for a in SCORES],
        "answers": [{"receipt_id": f"r-{a}-{q}", "attempt_id": a, "question": q, "content": c}
                    for a, answers in ANSWERS.items() for q, c in answers.items()],
        "outcomes": [], "sms_effects": [], "ai_effects": [],
    }
    for n, aid in enumerate(SCORES, start=1):
        sms = {"message_id": f"msg_{n}", "to": f"student:s-{aid}", "body": sms_body(card(aid))}
        narrative = {"narrative_id": f"nar_{n}", "text": f"{aid} did well"}
        exports["outcomes"] += [outcome(aid, "merit", card(aid)), outcome(aid, "sms", sms),
                                outcome(aid, "narrative", {**narrative, "score": SCORES[aid], "position": POSITIONS[aid]})]
        exports["sms_effects"].append({"id": n, "operation_id": f"sms-{aid}", "request": {"operation_id": f"sms-{aid}", "to": sms["to"], "body": sms["body"]},
                                       "response": dict(sms)})
        exports["ai_effects"].append({"id": n, "operation_id": f"narrative-{aid}",
                                      "request": {"operation_id": f"narrative-{aid}", "attempt_id": aid, "score": SCORES[aid], "position": POSITIONS[aid]},
                                      "response": {**narrative, "operation_id": f"narrative-{aid}", "attempt_id": aid}})
    return exports


def check(exports: dict[str, Any]) -> dict[str, Any]:
    return check_payloads(HistoryBuilder().ops, Ledgers.from_exports(**exports), CheckOptions()).to_dict()


def find(exports: dict[str, Any], table: str, operation_id: str) -> dict[str, Any]:
    return next(row for row in exports[table] if row["operation_id"] == operation_id)


def test_score_and_sms_body_follow_the_contract() -> None:
    assert score_of({"q1": " a ", "q2": "b", "q3": "D", "q9": "A"}, KEY) == 2
    assert sms_body(card("a2")) == "NOVA-101: you scored 1/4, position 2."


def test_payloads_that_agree_with_the_facts_are_valid() -> None:
    result = check(good())
    assert result["valid"] is True, result
    assert result["counts"]["ready_outcomes"] == 9 and result["counts"]["merit_cards"] == 3


def tampered(change: str) -> dict[str, Any]:
    exports = copy.deepcopy(good())
    merit, sms, narrative = (find(exports, "outcomes", f"{k}-a3")["payload"] for k in ("merit", "sms", "narrative"))
    gateway, ai = find(exports, "sms_effects", "sms-a3"), find(exports, "ai_effects", "narrative-a3")
    {
        "score": lambda: merit.update(score=3),
        "max_score": lambda: merit.update(max_score=20),
        "position": lambda: merit.update(position=2),
        "ranked_stranger": lambda: merit.update(ranked_against=["a1", "a3", "a9"]),
        "ranked_without_itself": lambda: merit.update(ranked_against=["a1", "a2"], finished_attempts=2),
        "finished_count": lambda: merit.update(finished_attempts=5),
        "card_student": lambda: merit.update(student_id="s-a1"),
        "answer_changed": lambda: exports["answers"][-1].update(content="A"),
        "sms_recipient": lambda: sms.update(to="student:s-a1"),
        "sms_body": lambda: sms.update(body="NOVA-101: you scored 4/4, position 3."),
        "sms_gateway_request": lambda: gateway["request"].update(to="student:s-a2"),
        "sms_message_id": lambda: sms.update(message_id="msg_99"),
        "ai_request_attempt": lambda: ai["request"].update(attempt_id="a2"),
        "ai_request_position": lambda: ai["request"].update(position=3),
        "narrative_text": lambda: narrative.update(text="a3 failed"),
        "narrative_id": lambda: narrative.update(narrative_id="nar_1"),
        "narrative_score": lambda: narrative.update(score=0),
        "card_without_score": lambda: merit.pop("score"),
    }[change]()
    return exports


@pytest.mark.parametrize(
    "change, violation",
    [
        ("ranked_stranger", "ranked_set_invalid"),
        ("ranked_without_itself", "ranked_set_invalid"),
        ("finished_count", "ranked_set_invalid"),
        ("card_student", "card_identity_mismatch"),
        ("sms_recipient", "sms_mismatch"),
        ("sms_body", "sms_mismatch"),
        ("sms_gateway_request", "sms_mismatch"),
        ("sms_message_id", "sms_mismatch"),
        ("ai_request_attempt", "narrative_mismatch"),
        ("ai_request_position", "narrative_mismatch"),
        ("narrative_text", "narrative_mismatch"),
        ("narrative_id", "narrative_mismatch"),
        ("narrative_score", "narrative_mismatch"),
        ("card_without_score", "malformed_payload"),
    ],
)
def test_a_changed_payload_is_caught(change: str, violation: str) -> None:
    result = check(tampered(change))
    assert result["valid"] is False
    assert result["violations"] == [violation]
    assert all(e["operation_id"].endswith("-a3") for e in result["examples"][violation])


@pytest.mark.parametrize(
    "change, violations",
    [
        # The SMS and the narrative were made from the true card, so they no longer match the changed one.
        ("score", ["score_mismatch", "sms_mismatch", "narrative_mismatch"]),
        ("max_score", ["max_score_mismatch", "sms_mismatch"]),
        ("position", ["position_mismatch", "sms_mismatch", "narrative_mismatch"]),
    ],
)
def test_a_changed_merit_card_is_caught(change: str, violations: list[str]) -> None:
    result = check(tampered(change))
    assert result["violations"] == violations
    assert all(e["operation_id"].endswith("-a3") for v in violations for e in result["examples"][v])


def test_an_answer_changed_after_the_card_breaks_score_and_positions() -> None:
    result = check(tampered("answer_changed"))  # a3 now scores 3: its card says 4
    assert result["violations"] == ["score_mismatch"]
    assert result["examples"]["score_mismatch"] == [{"operation_id": "merit-a3", "card": 4, "recomputed": 3}]


def test_sms_mismatch_names_each_difference() -> None:
    result = check(tampered("sms_recipient"))
    assert result["examples"]["sms_mismatch"] == [{"operation_id": "sms-a3", "problems": [
        "outcome: to='student:s-a1', expected 'student:s-a3'",
        "outcome vs recorded response: to='student:s-a1', expected 'student:s-a3'"]}]


def test_no_exams_export_is_unknown_not_valid() -> None:
    exports = good()
    del exports["exams"]
    result = check(exports)
    assert result["valid"] == UNKNOWN
    assert result["notes"][0] == "ledger exams was not read: not exported: merit scores cannot be recomputed"
    find(exports, "outcomes", "sms-a3")["payload"]["to"] = "student:nobody"  # still caught without the key
    assert check({**exports})["valid"] is False


@pytest.mark.parametrize(
    "strip, note",
    [
        (lambda e: [o["payload"].pop("ranked_against") for o in e["outcomes"] if o["kind"] == "merit"],
         "3 merit card(s) without ranked_against: position not checked"),
        (lambda e: [x.pop("response") for x in e["sms_effects"]], "3 SMS effect(s) without a recorded response: outcome not compared with it"),
        (lambda e: [x.pop("response") for x in e["ai_effects"]], "3 AI effect(s) without a recorded response: outcome not compared with it"),
        (lambda e: [o["payload"].pop("position") for o in e["outcomes"] if o["kind"] == "narrative"],
         "3 narrative outcome(s) without position (older format): only the score compared"),
    ],
)
def test_fields_old_run_folders_lack_make_it_unknown(strip: Any, note: str) -> None:
    exports = copy.deepcopy(good())
    strip(exports)
    result = check(exports)
    assert result["valid"] == UNKNOWN
    assert result["notes"] == [note]


def test_outcomes_without_a_merit_card_or_an_unread_table_are_unknown() -> None:
    exports = good()
    exports["outcomes"] = [o for o in exports["outcomes"] if o["operation_id"] != "merit-a3"]
    result = check(exports)
    assert result["valid"] == UNKNOWN
    assert result["notes"] == ["1 ready narrative outcome(s) with no well-formed ready merit card to compare with",
                               "1 ready sms outcome(s) with no well-formed ready merit card to compare with"]
    del exports["ai_effects"]
    assert check(exports)["notes"][0] == "ledger ai_effects was not read: not exported"


def test_a_card_of_an_exam_the_exams_export_lacks_is_unknown() -> None:
    exports = good()
    exports["exams"] = [{"exam_code": "OTHER", "question_count": 1, "answer_key": {"q1": "A"}}]
    assert check(exports)["notes"] == ["3 merit card(s) of an exam the exams ledger does not hold"]
