"""Answer reads: every read of an attempt's current answers during the run, checked
against the history as it stood when the read began.

For each ``ok`` ``read_answers`` op and each question of its attempt:

- **stale_read**: the read shows an older revision (or none) than one whose ``ok``
  completed before the read was invoked. The acknowledged revision, or a higher one,
  was already the answer; a correct register never goes back;
- **vanished**: a revision once shown by a read (acknowledged or not) is followed by
  a read, invoked after that read completed, that shows a lower revision or none:
  a revision seen once never vanishes;
- **unexpected**: the read shows a revision no client sent for that question;
- **content_mismatch**: it shows the revision with another content than was sent.

With revisions in the history and no read at all the result is unknown: reads that
never happened checked nothing.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from chaos.checkers.base import Result, build_result, unknown_unless_invalid
from chaos.history import Op
from chaos.ledgers import Ledgers
from chaos.ops.revisions import NOTHING_TO_CHECK, AnswerRead, QuestionKey, RevisionWrite, read_revision_ops

__all__ = ["NAME", "check_answer_reads"]

NAME = "answer_reads"


def check_answer_reads(history: Sequence[Op], ledgers: Ledgers, options: object) -> Result:
    ops = read_revision_ops(history)
    if ops.nothing_to_check:
        return Result.not_applicable(NAME, NOTHING_TO_CHECK)
    reads = ops.reads
    bad: dict[str, list[Any]] = {"stale_read": [], "vanished": [], "unexpected": [], "content_mismatch": []}
    for read in reads:
        _check_read(read, ops.tries_of, bad)
    bad["vanished"] = _vanished(reads)
    counts = {"reads": len(reads)}
    result = build_result(NAME, bad=bad, counts=counts)
    reasons = ops.unjudged(with_reads=True)
    if not reads:
        reasons.append("the answers were never read during the run: no read was checked")
    return unknown_unless_invalid(result, reasons)


def _check_read(read: AnswerRead, tries_of: dict[QuestionKey, list[RevisionWrite]], bad: dict[str, list[Any]]) -> None:
    questions = {q for (attempt, q) in tries_of if attempt == read.attempt_id} | set(read.shown)
    for question in sorted(questions):
        tries = tries_of.get((read.attempt_id, question), [])
        shown = read.shown.get(question)
        example = {"attempt_id": read.attempt_id, "question": question, "read_invoked_at": read.invoked_at,
                   "shown_revision": shown.revision if shown else None}
        known = [t for t in tries if t.outcome == "ok" and t.completed_at is not None and t.completed_at < read.invoked_at]
        floor = max(known, key=lambda t: t.revision, default=None)
        if floor is not None and (shown is None or shown.revision < floor.revision):
            bad["stale_read"].append({**example, "acknowledged_revision": floor.revision,
                                      "acknowledged_receipt_id": floor.receipt_id})
        if shown is None:
            continue
        sent = [t for t in tries if t.revision == shown.revision]
        if not sent:
            bad["unexpected"].append(example)
        elif shown.content is not None and shown.content not in {t.content for t in sent}:
            bad["content_mismatch"].append(example)


def _vanished(reads: Sequence[AnswerRead]) -> list[Any]:
    """Reads that show less than an earlier read (completed before they began) showed."""
    found: list[Any] = []
    by_attempt: dict[str, list[AnswerRead]] = defaultdict(list)
    for read in reads:
        by_attempt[read.attempt_id].append(read)
    for attempt, attempt_reads in sorted(by_attempt.items()):
        ordered = sorted(attempt_reads, key=lambda r: r.invoked_at)
        for later in ordered:
            for earlier in ordered:
                if earlier.completed_at >= later.invoked_at:
                    continue
                for question, seen in earlier.shown.items():
                    now = later.shown.get(question)
                    if now is None or now.revision < seen.revision:
                        found.append({"attempt_id": attempt, "question": question, "seen_revision": seen.revision,
                                      "seen_at": earlier.completed_at, "later_revision": now.revision if now else None,
                                      "later_read_invoked_at": later.invoked_at})
    return found
