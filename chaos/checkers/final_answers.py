"""Final answers: each revised question is a register, and its frozen value must be the
last revision the student was told was saved.

Per (attempt, question) with ``revise`` ops, against the ``answers`` export (the
current value, frozen by the finish):

- the frozen revision must be the highest acknowledged (``ok``) one, or a higher one
  whose outcome is unknown (``info``: it may have been accepted; reported as
  **unknown_won**, not an error);
- a frozen revision lower than the highest acknowledged is a **lost_update**: a late
  older revision overwrote a newer one. The example names the question, both
  revisions and both receipts;
- acknowledged revisions and no answer at all is **lost**;
- a frozen value whose content or receipt is not that revision's is **content_mismatch**;
- a frozen revision no client sent is **unexpected**, one that only ever failed is
  **failed_but_present**.

A run in which nothing was reordered proves nothing about lost updates, so it is
unknown: reordering is seen as revisions acknowledged ``superseded`` (a higher one
was already current when they arrived), log rows marked superseded, or a lost update.
``overtaken_in_flight`` counts the superseded revisions sent before the higher one was
acknowledged: overtaken on the way, not held back by the client.
"""

from __future__ import annotations

from typing import Any, Sequence

from chaos.checkers.base import Result, build_result, unknown_unless_invalid
from chaos.history import Op
from chaos.ledgers import AnswerRow, Ledgers
from chaos.ops.revisions import NOTHING_TO_CHECK, QuestionKey, RevisionWrite, read_revision_ops

__all__ = ["NAME", "check_final_answers"]

NAME = "final_answers"


def check_final_answers(history: Sequence[Op], ledgers: Ledgers, options: object) -> Result:
    ops = read_revision_ops(history)
    if ops.nothing_to_check:
        return Result.not_applicable(NAME, NOTHING_TO_CHECK)
    if ledgers.answers is None:
        return Result.unknown(NAME, ledgers.missing("answers") + ["the final answers were never read"])
    writes, tries_of = ops.writes, ops.tries_of
    frozen = {(row.attempt_id, row.question): row for row in ledgers.answers}
    bad: dict[str, list[Any]] = {name: [] for name in
                                 ("lost_update", "lost", "content_mismatch", "unexpected", "failed_but_present")}
    info: dict[str, list[Any]] = {"unknown_won": []}
    for key, tries in sorted(tries_of.items()):
        _judge(key, tries, frozen.get(key), bad, info)
    reordered = _reordered(writes, ledgers) + len(bad["lost_update"])
    counts = {"questions": len(tries_of), "revisions_written": len({(w.qkey, w.revision) for w in writes}),
              "reordered": reordered, "overtaken_in_flight": _overtaken(tries_of)}
    result = build_result(NAME, bad=bad, info=info, counts=counts)
    reasons = ops.unjudged(with_reads=False)
    if reordered == 0:
        reasons.append("no revision arrived after a higher one: the run never exercised a late revision")
    return unknown_unless_invalid(result, reasons)


def _judge(key: QuestionKey, tries: list[RevisionWrite], row: AnswerRow | None,
           bad: dict[str, list[Any]], info: dict[str, list[Any]]) -> None:
    example: dict[str, Any] = {"attempt_id": key[0], "question": key[1]}
    acknowledged = [t for t in tries if t.outcome == "ok"]
    highest = max(acknowledged, key=lambda t: t.revision, default=None)
    if row is None:
        if highest is not None:
            bad["lost"].append({**example, "acknowledged_revision": highest.revision, "receipt_id": highest.receipt_id})
        return
    final = row.revision if row.revision is not None else 1
    sent = [t for t in tries if t.revision == final]
    final_example = {**example, "final_revision": final, "final_receipt_id": row.receipt_id}
    if highest is not None and final < highest.revision:
        bad["lost_update"].append({**final_example, "acknowledged_revision": highest.revision,
                                   "acknowledged_receipt_id": highest.receipt_id})
        return
    if not sent:
        bad["unexpected"].append(final_example)
    elif all(t.outcome == "fail" for t in sent):
        bad["failed_but_present"].append(final_example)
    elif row.content not in {t.content for t in sent} or _receipt_differs(row, sent):
        bad["content_mismatch"].append(final_example)
    elif not any(t.outcome == "ok" for t in sent):
        info["unknown_won"].append(final_example)


def _receipt_differs(row: AnswerRow, sent: list[RevisionWrite]) -> bool:
    receipts = {t.receipt_id for t in sent if t.outcome == "ok" and t.receipt_id}
    return bool(receipts) and row.receipt_id not in receipts


def _overtaken(tries_of: dict[QuestionKey, list[RevisionWrite]]) -> int:
    """Superseded revisions that were sent before a higher one was acknowledged: the network,
    not the client, put them behind (held-back revisions are sent after it)."""
    overtaken = set()
    for tries in tries_of.values():
        for late in (t for t in tries if t.superseded is True):
            if any(h.revision > late.revision and h.outcome == "ok" and h.completed_at is not None
                   and h.completed_at > late.invoked_at for h in tries):
                overtaken.add((late.qkey, late.revision))
    return len(overtaken)


def _reordered(writes: Sequence[RevisionWrite], ledgers: Ledgers) -> int:
    """Revisions that arrived after a higher one of their question, as far as can be seen."""
    acknowledged = {(w.qkey, w.revision) for w in writes if w.superseded is True}
    logged = {((r.attempt_id, r.question), r.revision) for r in ledgers.answer_revisions or () if r.superseded}
    return len(acknowledged | logged)
