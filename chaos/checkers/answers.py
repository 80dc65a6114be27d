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
- two rows for one key, or one receipt id on two rows, is **duplicated**.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Sequence

from chaos.checkers.base import CheckOptions, Result, build_result
from chaos.history import Op, pair_ops
from chaos.ledgers import AnswerRow, Ledgers

__all__ = ["NAME", "check_answers"]

NAME = "answers"

Key = tuple[str, str]


@dataclass
class _Tries:
    """Every try of one (attempt, question): contents sent, split by how the try completed."""

    ok: list[Any] = field(default_factory=list)
    info: list[Any] = field(default_factory=list)
    fail: list[Any] = field(default_factory=list)

    @property
    def sent(self) -> list[Any]:
        return self.ok + self.info + self.fail


def check_answers(history: Sequence[Op], ledgers: Ledgers, options: CheckOptions) -> Result:
    if ledgers.answers is None:
        return Result.unknown(NAME, ledgers.missing("answers") + ["answers were never read: cannot tell lost from kept"])
    tries, malformed = _tries_by_key(history)
    rows = _rows_by_key(ledgers.answers)
    bad: dict[str, list[Any]] = {"lost": [], "content_mismatch": [], "failed_but_present": [], "unexpected": []}
    info: dict[str, list[Any]] = {"recovered": [], "absent_info": []}
    for key, attempt in sorted(tries.items()):
        _judge_key(key, attempt, rows.get(key, []), bad, info)
    bad["unexpected"] = [_row_example(r) for key in sorted(set(rows) - set(tries)) for r in rows[key]]
    bad["duplicated"] = _duplicates(ledgers.answers, rows)
    counts = {"attempted": len(tries), "acknowledged": sum(bool(t.ok) for t in tries.values()), "rows": len(ledgers.answers)}
    notes = [f"{malformed} answer invoke(s) without attempt_id/question were ignored"] if malformed else []
    return build_result(NAME, bad=bad, info=info, counts=counts, notes=notes)


def _tries_by_key(history: Sequence[Op]) -> tuple[dict[Key, _Tries], int]:
    tries: dict[Key, _Tries] = defaultdict(_Tries)
    malformed = 0
    for invoked, done in pair_ops(history):
        if invoked.f != "answer":
            continue
        value = invoked.value if isinstance(invoked.value, dict) else {}
        if not value.get("attempt_id") or not value.get("question"):
            malformed += 1
            continue
        key = (str(value["attempt_id"]), str(value["question"]))
        outcome = done.type if done is not None else "info"  # never completed = indeterminate
        getattr(tries[key], outcome).append(value.get("content"))
    return dict(tries), malformed


def _rows_by_key(rows: Sequence[AnswerRow]) -> dict[Key, list[AnswerRow]]:
    grouped: dict[Key, list[AnswerRow]] = defaultdict(list)
    for row in rows:
        grouped[(row.attempt_id, row.question)].append(row)
    return dict(grouped)


def _judge_key(key: Key, tries: _Tries, rows: list[AnswerRow], bad: dict[str, list[Any]], info: dict[str, list[Any]]) -> None:
    example: dict[str, Any] = {"attempt_id": key[0], "question": key[1]}
    if tries.ok:
        if not rows:
            bad["lost"].append({**example, "content": tries.ok[0]})
            return
        # Every acknowledged content must be what the ledger holds; two different
        # acknowledged contents for one question cannot both be true.
        acknowledged = {str(content) for content in tries.ok}
        stored_set = {str(row.content) for row in rows}
        if acknowledged != stored_set or len(stored_set) != 1:
            bad["content_mismatch"].append({**example, "acknowledged": sorted(acknowledged), "stored": sorted(stored_set)})
        return
    if not rows:
        if tries.info:
            info["absent_info"].append(example)
        return
    stored = sorted({str(row.content) for row in rows})
    if tries.info:
        info["recovered"].append({**example, "stored": stored})
        if not set(stored) <= set(map(str, tries.sent)):
            bad["content_mismatch"].append({**example, "sent": sorted(set(map(str, tries.sent))), "stored": stored})
    else:
        bad["failed_but_present"].append({**example, "stored": stored, "receipt_ids": [row.receipt_id for row in rows]})


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


def _row_example(row: AnswerRow) -> dict[str, Any]:
    return {"attempt_id": row.attempt_id, "question": row.question, "receipt_id": row.receipt_id, "content": row.content}
