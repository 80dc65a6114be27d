"""Payloads: every ready outcome says what the exported facts say it must.

The other checkers count outcomes and effects; this one reads them. A merit card
with a changed score, or an SMS to the wrong student, is "exactly once" and still
wrong. From the final read alone (the answer key in ``exams``, the answers, the
attempts, the outcomes and the providers' ledgers), per ready outcome:

- **merit**: the score is recomputed (answers whose ``content.strip().upper()``
  equals the key; **score_mismatch**), ``max_score`` is the exam's question count
  (**max_score_mismatch**), the position is 1 + the members of ``ranked_against``
  that scored strictly higher (**position_mismatch**), every member is a finished
  attempt of the same exam, the card's own attempt among them, and
  ``finished_attempts`` is their number (**ranked_set_invalid**), and attempt,
  student and exam are the attempt row's (**card_identity_mismatch**);
- **sms**: ``to`` is ``student:<student_id>`` and the body is
  ``"{exam_code}: you scored {score}/{max_score}, position {position}."`` from the
  card, in the outcome and in the request the gateway recorded, and the outcome's
  message_id/to/body are the gateway's recorded response (**sms_mismatch**);
- **narrative**: the AI request names the outcome's attempt and the card's score
  and position, the outcome repeats them, and its narrative_id/text are the
  provider's recorded response (**narrative_mismatch**).

A ready outcome whose payload lacks a field the contract requires is
**malformed_payload**. What old run folders lack (no ``exams`` export, no
``ranked_against``, no recorded ``response``) makes that check unknown, with a note.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from chaos.checkers.base import Result, build_result, unknown_unless_invalid
from chaos.history import Op
from chaos.ledgers import AttemptRow, EffectRow, ExamRow, Ledgers, OutcomeRow

__all__ = ["NAME", "check_payloads", "score_of", "sms_body"]

NAME = "payloads"

_CARD_FIELDS = ("attempt_id", "student_id", "exam_code", "score", "max_score", "position")


def score_of(contents: Mapping[str, str], answer_key: Mapping[str, str]) -> int:
    """Answers that match the key, as the merit job scores them (stack/lanes/jobs.py)."""
    return sum(1 for question, content in contents.items() if str(content).strip().upper() == answer_key.get(question))


def sms_body(card: Mapping[str, Any]) -> str:
    return f"{card['exam_code']}: you scored {card['score']}/{card['max_score']}, position {card['position']}."


class _Facts:
    """The final read, indexed for the payload checks."""

    def __init__(self, ledgers: Ledgers) -> None:
        self.attempts: dict[str, AttemptRow] = {a.attempt_id: a for a in ledgers.attempts or ()}
        self.exams: dict[str, ExamRow] | None = None if ledgers.exams is None else {e.exam_code: e for e in ledgers.exams}
        self.contents: dict[str, dict[str, str]] = {}
        for row in ledgers.answers or ():
            self.contents.setdefault(row.attempt_id, {})[row.question] = row.content
        self.ready: dict[tuple[str, str], OutcomeRow] = {(o.kind, o.attempt_id): o for o in ledgers.outcomes or () if o.status == "ready"}
        self.effects: dict[str, dict[str, EffectRow]] = {
            kind: {e.operation_id: e for e in getattr(ledgers, table) or ()} for kind, table in (("sms", "sms_effects"), ("narrative", "ai_effects"))
        }
        self.scores: dict[str, int] = {}
        self.unknown: dict[str, int] = {}

    def score(self, attempt_id: str, key: Mapping[str, str]) -> int:
        if attempt_id not in self.scores:
            self.scores[attempt_id] = score_of(self.contents.get(attempt_id, {}), key)
        return self.scores[attempt_id]

    def cannot_tell(self, why: str) -> None:
        self.unknown[why] = self.unknown.get(why, 0) + 1


def check_payloads(history: Sequence[Op], ledgers: Ledgers, options: object = None) -> Result:
    """Takes no options."""
    needed = ("attempts", "answers", "outcomes", "sms_effects", "ai_effects")
    if any(getattr(ledgers, table) is None for table in needed):
        return Result.unknown(NAME, ledgers.missing(*needed) + ["cannot read what the outcomes claim against the facts"])
    facts = _Facts(ledgers)
    bad: dict[str, list[Any]] = {name: [] for name in (
        "malformed_payload", "card_identity_mismatch", "score_mismatch", "max_score_mismatch", "position_mismatch",
        "ranked_set_invalid", "sms_mismatch", "narrative_mismatch")}
    cards: dict[str, dict[str, Any]] = {}
    for (kind, attempt_id), outcome in sorted(facts.ready.items()):
        if kind == "merit" and (card := _card(outcome, bad)) is not None:
            cards[attempt_id] = card
            _judge_merit(facts, outcome, card, bad)
    for (kind, attempt_id), outcome in sorted(facts.ready.items()):
        judge = {"sms": _judge_sms, "narrative": _judge_narrative}.get(kind)
        if judge is None:
            continue
        if attempt_id in cards:
            judge(facts, outcome, cards[attempt_id], bad)
        else:
            facts.cannot_tell(f"ready {kind} outcome(s) with no well-formed ready merit card to compare with")
    notes = [f"{count} {why}" for why, count in sorted(facts.unknown.items())]
    if ledgers.exams is None:
        notes.insert(0, ledgers.missing("exams")[0] + ": merit scores cannot be recomputed")
    result = build_result(NAME, bad=bad, counts={"ready_outcomes": len(facts.ready), "merit_cards": len(cards)})
    return unknown_unless_invalid(result, notes)


def _card(outcome: OutcomeRow, bad: dict[str, list[Any]]) -> dict[str, Any] | None:
    """A ready merit card's payload if it holds every field the contract requires."""
    payload = outcome.payload if isinstance(outcome.payload, dict) else {}
    missing = [name for name in _CARD_FIELDS if payload.get(name) is None]
    if missing:
        bad["malformed_payload"].append({"operation_id": outcome.operation_id, "missing": missing})
        return None
    return payload


def _judge_merit(facts: _Facts, outcome: OutcomeRow, card: dict[str, Any], bad: dict[str, list[Any]]) -> None:
    op = outcome.operation_id
    attempt = facts.attempts.get(outcome.attempt_id)
    claimed = {"attempt_id": card["attempt_id"], "student_id": card["student_id"], "exam_code": card["exam_code"]}
    actual = {"attempt_id": outcome.attempt_id, "student_id": attempt and attempt.student_id, "exam_code": attempt and attempt.exam_code}
    if claimed != actual:
        bad["card_identity_mismatch"].append({"operation_id": op, "card": claimed, "ledger": actual})
    exam = None if facts.exams is None else facts.exams.get(str(card["exam_code"]))
    if exam is None:
        if facts.exams is not None:
            facts.cannot_tell("merit card(s) of an exam the exams ledger does not hold")
        return
    score = facts.score(outcome.attempt_id, exam.answer_key)
    if card["score"] != score:
        bad["score_mismatch"].append({"operation_id": op, "card": card["score"], "recomputed": score})
    if card["max_score"] != exam.question_count:
        bad["max_score_mismatch"].append({"operation_id": op, "card": card["max_score"], "question_count": exam.question_count})
    _judge_ranking(facts, outcome, card, exam, bad)


def _judge_ranking(facts: _Facts, outcome: OutcomeRow, card: dict[str, Any], exam: ExamRow, bad: dict[str, list[Any]]) -> None:
    ranked = card.get("ranked_against")
    if ranked is None:
        facts.cannot_tell("merit card(s) without ranked_against: position not checked")
        return
    op = outcome.operation_id
    if not isinstance(ranked, list):
        bad["malformed_payload"].append({"operation_id": op, "ranked_against": ranked})
        return
    strangers = [a for a in ranked if not _finished_in(facts.attempts.get(str(a)), exam.exam_code)]
    if strangers or outcome.attempt_id not in ranked or card.get("finished_attempts") != len(ranked):
        bad["ranked_set_invalid"].append({"operation_id": op, "not_finished_in_exam": strangers,
                                          "includes_itself": outcome.attempt_id in ranked,
                                          "finished_attempts": card.get("finished_attempts"), "ranked": len(ranked)})
        return
    own = facts.score(outcome.attempt_id, exam.answer_key)
    position = 1 + sum(1 for other in ranked if facts.score(str(other), exam.answer_key) > own)
    if card["position"] != position:
        bad["position_mismatch"].append({"operation_id": op, "card": card["position"], "recomputed": position})


def _finished_in(attempt: AttemptRow | None, exam_code: str) -> bool:
    return attempt is not None and attempt.status == "finished" and attempt.exam_code == exam_code


def _judge_sms(facts: _Facts, outcome: OutcomeRow, card: dict[str, Any], bad: dict[str, list[Any]]) -> None:
    attempt = facts.attempts.get(outcome.attempt_id)
    expected = {"to": f"student:{attempt.student_id if attempt else card['student_id']}", "body": sms_body(card)}
    payload = outcome.payload if isinstance(outcome.payload, dict) else {}
    problems = _differences(expected, payload, "outcome")
    effect = facts.effects["sms"].get(outcome.operation_id)
    if effect is not None:  # a missing effect is the effects checker's to report
        problems += _differences(expected, effect.request if isinstance(effect.request, dict) else {}, "gateway request")
        problems += _recorded_response(facts, effect, payload, ("message_id", "to", "body"), "SMS")
    if problems:
        bad["sms_mismatch"].append({"operation_id": outcome.operation_id, "problems": problems})


def _judge_narrative(facts: _Facts, outcome: OutcomeRow, card: dict[str, Any], bad: dict[str, list[Any]]) -> None:
    payload = outcome.payload if isinstance(outcome.payload, dict) else {}
    told = {"score": card["score"], "position": card["position"]}
    if "position" not in payload:
        facts.cannot_tell("narrative outcome(s) without position (older format): only the score compared")
        told.pop("position")
    problems = _differences(told, payload, "outcome")
    effect = facts.effects["narrative"].get(outcome.operation_id)
    if effect is not None:
        request = effect.request if isinstance(effect.request, dict) else {}
        problems += _differences({"attempt_id": outcome.attempt_id, "score": card["score"], "position": card["position"]},
                                 request, "AI request")
        problems += _recorded_response(facts, effect, payload, ("narrative_id", "text"), "AI")
    if problems:
        bad["narrative_mismatch"].append({"operation_id": outcome.operation_id, "problems": problems})


def _recorded_response(facts: _Facts, effect: EffectRow, payload: Mapping[str, Any], names: Sequence[str], provider: str) -> list[str]:
    """The outcome must hold what the provider answered."""
    if not isinstance(effect.response, dict):
        facts.cannot_tell(f"{provider} effect(s) without a recorded response: outcome not compared with it")
        return []
    return _differences({name: effect.response.get(name) for name in names}, payload, "outcome vs recorded response")


def _differences(expected: Mapping[str, Any], actual: Mapping[str, Any], where: str) -> list[str]:
    return [f"{where}: {name}={actual.get(name)!r}, expected {want!r}" for name, want in expected.items() if actual.get(name) != want]
