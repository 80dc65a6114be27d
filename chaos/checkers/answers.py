"""Answers: no acknowledged answer lost, none duplicated, none that nobody sent.

The set checker of Jepsen, keyed by (attempt_id, question), against the final read
of the ``answers`` ledger:

- an ``ok`` answer is acknowledged: it must be in the ledger (else **lost**) with
  the acknowledged content (else **content_mismatch**);
- an ``info`` (or never completed) answer may or may not have happened: present is
  **recovered**, absent is **absent_info**; neither is an error;
- a ``fail`` answer definitely did not happen, so if it is present (and no ok/info
  try of the same key explains it) it is **failed_but_present**. Jepsen only calls
  this "recovered"; here it is invalid, because a failure that took effect is what
  makes clients retry and write twice;
- a ledger row with no invoke for its key is **unexpected**;
- two rows for one key, or one receipt id on two rows, is **duplicated**;
- a row must carry what the client was told and sent: the ``receipt_id`` of its
  ``ok`` completion (**receipt_mismatch**), one of the idempotency keys sent for
  it (**idempotency_key_mismatch**), and the student the attempt was started for
  (**student_mismatch**; from the history, else the attempts ledger).

Questions written as revisions (``revise`` ops) are left to the revision checkers
(revisions, final_answers, answer_reads): their row holds the highest revision, not
one answer, and is not judged here.

An answer invoke without attempt_id, question, content or idempotency_key, an
``ok`` without a receipt id, or a row whose student cannot be verified makes the
result unknown: a history the checker cannot read is not a history that passed.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from chaos.checkers.acknowledged import attempt_students
from chaos.checkers.base import Result, build_result, unknown_unless_invalid
from chaos.history import Op, pair_ops
from chaos.ledgers import AnswerRow, Ledgers
from chaos.ops.answers import ANSWER, ANSWER_FIELDS
from chaos.ops.revisions import REVISE

__all__ = ["NAME", "check_answers", "fingerprint", "fingerprints"]

NAME = "answers"

Key = tuple[str, str]



@dataclass
class _Tries:
    """Every try of one (attempt, question): contents sent, split by how the try completed."""

    ok: list[Any] = field(default_factory=list)
    info: list[Any] = field(default_factory=list)
    fail: list[Any] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    receipts: set[str] = field(default_factory=set)
    """Receipt ids the ok completions carried."""
    unreceipted: int = 0
    """ok completions that carried no receipt id."""

    @property
    def sent(self) -> list[Any]:
        return self.ok + self.info + self.fail


def check_answers(history: Sequence[Op], ledgers: Ledgers, options: object = None) -> Result:
    """Takes no options."""
    if ledgers.answers is None:
        return Result.unknown(NAME, ledgers.missing("answers") + ["answers were never read: cannot tell lost from kept"])
    tries, malformed = _tries_by_key(history)
    revised = _revised(history)
    rows = _rows_by_key(row for row in ledgers.answers if (row.attempt_id, row.question) not in revised)
    bad: dict[str, list[Any]] = {"lost": [], "content_mismatch": [], "failed_but_present": [], "unexpected": []}
    info: dict[str, list[Any]] = {"recovered": [], "absent_info": []}
    for key, attempt in sorted(tries.items()):
        _judge_key(key, attempt, rows.get(key, []), bad, info)
    bad["unexpected"] = [_row_example(r) for key in sorted(set(rows) - set(tries)) for r in rows[key]]
    bad["duplicated"] = _duplicates(ledgers.answers, rows)
    bad.update(_identity_problems(tries, rows))
    students, unverified = _student_problems(history, ledgers)
    bad["student_mismatch"] = students
    counts = {"attempted": len(tries), "acknowledged": sum(bool(t.ok) for t in tries.values()), "rows": len(ledgers.answers)}
    reasons = [f"{malformed} answer invoke(s) lack one of {', '.join(ANSWER_FIELDS)}: they cannot be judged"] if malformed else []
    unreceipted = sum(t.unreceipted for t in tries.values())
    if unreceipted:
        reasons.append(f"{unreceipted} ok answer(s) carry no receipt_id: the receipt cannot be checked")
    if unverified:
        reasons.append(f"{unverified} answer row(s) whose student cannot be verified (no student_id, or no start in the history nor attempt row)")
    return unknown_unless_invalid(build_result(NAME, bad=bad, info=info, counts=counts), reasons)


def _tries_by_key(history: Sequence[Op]) -> tuple[dict[Key, _Tries], int]:
    tries: dict[Key, _Tries] = defaultdict(_Tries)
    malformed = 0
    for invoked, done in pair_ops(history):
        if invoked.f != ANSWER:
            continue
        value = invoked.value if isinstance(invoked.value, dict) else {}
        if not all(value.get(name) for name in ANSWER_FIELDS):
            malformed += 1
            continue
        attempt = tries[(str(value["attempt_id"]), str(value["question"]))]
        outcome = done.type if done is not None else "info"  # never completed = indeterminate
        getattr(attempt, outcome).append(value["content"])
        attempt.keys.add(str(value["idempotency_key"]))
        if outcome == "ok" and done is not None and done.receipt_id:
            attempt.receipts.add(str(done.receipt_id))
        elif outcome == "ok":
            attempt.unreceipted += 1
    return dict(tries), malformed


def _revised(history: Sequence[Op]) -> set[Key]:
    """Questions some ``revise`` op wrote (chaos/ops/revisions.py)."""
    return {(str(op.value.get("attempt_id")), str(op.value.get("question")))
            for op in history if op.f == REVISE and op.type == "invoke" and isinstance(op.value, dict)}


def _rows_by_key(rows: Iterable[AnswerRow]) -> dict[Key, list[AnswerRow]]:
    grouped: dict[Key, list[AnswerRow]] = defaultdict(list)
    for row in rows:
        grouped[(row.attempt_id, row.question)].append(row)
    return dict(grouped)


def _judge_key(key: Key, tries: _Tries, rows: list[AnswerRow], bad: dict[str, list[Any]], info: dict[str, list[Any]]) -> None:
    example: dict[str, Any] = {"attempt_id": key[0], "question": key[1]}
    if tries.ok:
        if not rows:
            bad["lost"].append({**example, "content": fingerprint(tries.ok[0])})
            return
        # Every acknowledged content must be what the ledger holds; two different
        # acknowledged contents for one question cannot both be true.
        acknowledged = {str(content) for content in tries.ok}
        stored_set = {str(row.content) for row in rows}
        if acknowledged != stored_set or len(stored_set) != 1:
            bad["content_mismatch"].append({**example, "acknowledged": fingerprints(acknowledged),
                                            "stored": fingerprints(stored_set)})
        return
    if not rows:
        if tries.info:
            info["absent_info"].append(example)
        return
    stored = {str(row.content) for row in rows}
    if tries.info:
        info["recovered"].append({**example, "stored": fingerprints(stored)})
        if not stored <= set(map(str, tries.sent)):
            bad["content_mismatch"].append({**example, "sent": fingerprints(map(str, tries.sent)),
                                            "stored": fingerprints(stored)})
    else:
        bad["failed_but_present"].append({**example, "stored": fingerprints(stored),
                                          "receipt_ids": [row.receipt_id for row in rows]})


def _duplicates(all_rows: Sequence[AnswerRow], rows: dict[Key, list[AnswerRow]]) -> list[dict[str, Any]]:
    """Extra rows for one key, and receipt ids that appear on more than one row (count > 1)."""
    found: list[dict[str, Any]] = []
    for key in sorted(k for k, group in rows.items() if len(group) > 1):
        found.append({"attempt_id": key[0], "question": key[1], "rows": len(rows[key]), "receipt_ids": [r.receipt_id for r in rows[key]]})
    receipts: dict[str, int] = defaultdict(int)
    for row in all_rows:
        receipts[row.receipt_id] += 1
    found += [{"receipt_id": rid, "rows": n} for rid, n in sorted(receipts.items()) if n > 1]
    return found


def _identity_problems(tries: dict[Key, _Tries], rows: dict[Key, list[AnswerRow]]) -> dict[str, list[Any]]:
    """Rows whose receipt id or idempotency key is not what the client was told or sent."""
    receipts: list[Any] = []
    keys: list[Any] = []
    for key, attempt in sorted(tries.items()):
        for row in rows.get(key, []):
            example = {"attempt_id": key[0], "question": key[1], "receipt_id": row.receipt_id}
            if attempt.receipts and row.receipt_id not in attempt.receipts:
                receipts.append({**example, "acknowledged": sorted(attempt.receipts)})
            if row.idempotency_key not in attempt.keys:
                keys.append({**example, "idempotency_key": row.idempotency_key, "sent": sorted(attempt.keys)})
    return {"receipt_mismatch": receipts, "idempotency_key_mismatch": keys}


def _student_problems(history: Sequence[Op], ledgers: Ledgers) -> tuple[list[Any], int]:
    """Rows filed under another student than the attempt's (history first, then the attempts ledger)."""
    students = {a.attempt_id: a.student_id for a in ledgers.attempts or () if a.student_id}
    students.update(attempt_students(history))
    wrong: list[Any] = []
    unverified = 0
    for row in sorted(ledgers.answers or (), key=lambda r: (r.attempt_id, r.question)):
        expected = students.get(row.attempt_id)
        if expected is None or row.student_id is None:
            unverified += 1
        elif row.student_id != expected:
            wrong.append({**_row_example(row), "student_id": row.student_id, "expected": expected})
    return wrong, unverified


def _row_example(row: AnswerRow) -> dict[str, Any]:
    return {"attempt_id": row.attempt_id, "question": row.question, "receipt_id": row.receipt_id,
            "content": fingerprint(row.content)}


def fingerprint(content: Any) -> str:
    """What a report shows of an answer: a short SHA-256 of its text, never the text.

    Reports, plots and JUnit output are not evidence files (the history and the ledger
    exports are, 0600): a student's answer must not leak through an example. Equal
    fingerprints mean equal contents, which is all a reader of a mismatch needs.
    """
    return "sha256:" + hashlib.sha256(str(content).encode("utf-8", "surrogatepass")).hexdigest()[:12]


def fingerprints(contents: Iterable[Any]) -> list[str]:
    return sorted({fingerprint(content) for content in contents})
