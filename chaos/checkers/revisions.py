"""Revisions: Jepsen's set-full over the answer revision log.

Every revision a student sent is an element, keyed by (attempt, question, revision).
The final read is the ``answer_revisions`` export; the reads during the run
(``read_answers``) say when each acknowledged revision became visible.

- an ``ok`` revision must be in the log (else **lost**) with the content sent and
  the receipt the client was told (else **content_mismatch**);
- an ``info`` revision may or may not be there: **recovered** or **absent_info**,
  neither an error;
- a ``fail`` revision that is in the log (and no ok/info try of it explains it) is
  **failed_but_present**;
- a log row no client sent is **unexpected**; two rows of one element, or one
  receipt or one idempotency key on two rows, is **duplicated**.

Read visibility: for each acknowledged revision, the time from its ``ok`` to the
completion of the first read that showed it or a higher revision of its question
(0 if a read concurrent with the write already showed it). Acknowledged revisions
no read showed are counted as ``never_read``; the quantiles go to ``details``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Sequence

from chaos.checkers.answers import fingerprint
from chaos.checkers.base import Result, build_result, summarize, unknown_unless_invalid
from chaos.history import Op
from chaos.ledgers import Ledgers, RevisionRow
from chaos.ops.revisions import NOTHING_TO_CHECK, AnswerRead, RevisionWrite, read_revision_ops

__all__ = ["NAME", "check_revisions", "visibility_latencies"]

NAME = "revisions"

Element = tuple[str, str, int]


def check_revisions(history: Sequence[Op], ledgers: Ledgers, options: object) -> Result:
    ops = read_revision_ops(history)
    if ops.nothing_to_check:
        return Result.not_applicable(NAME, NOTHING_TO_CHECK)
    if ledgers.answer_revisions is None:
        return Result.unknown(NAME, ledgers.missing("answer_revisions") + ["the revision log was never read"])
    writes = ops.writes
    tries = _tries_by_element(writes)
    rows = _rows_by_element(ledgers.answer_revisions)
    bad: dict[str, list[Any]] = {"lost": [], "content_mismatch": [], "failed_but_present": []}
    info: dict[str, list[Any]] = {"recovered": [], "absent_info": []}
    for element, element_tries in sorted(tries.items()):
        _judge(element, element_tries, rows.get(element, []), bad, info)
    bad["unexpected"] = [_row_example(r) for e in sorted(set(rows) - set(tries)) for r in rows[e]]
    bad["duplicated"] = _duplicates(ledgers.answer_revisions)
    latencies, never_read = visibility_latencies(writes, ops.reads)
    info["never_read"] = never_read
    counts = {"attempted": len(tries), "acknowledged": sum(any(t.outcome == "ok" for t in ts) for ts in tries.values()),
              "rows": len(ledgers.answer_revisions), "superseded_acknowledged": sum(w.superseded is True for w in writes)}
    result = build_result(NAME, bad=bad, info=info, counts=counts, details={"read_visibility": summarize(latencies)})
    return unknown_unless_invalid(result, ops.unjudged(with_reads=True))


def _tries_by_element(writes: Sequence[RevisionWrite]) -> dict[Element, list[RevisionWrite]]:
    tries: dict[Element, list[RevisionWrite]] = defaultdict(list)
    for write in writes:
        tries[(write.attempt_id, write.question, write.revision)].append(write)
    return dict(tries)


def _rows_by_element(rows: Sequence[RevisionRow]) -> dict[Element, list[RevisionRow]]:
    grouped: dict[Element, list[RevisionRow]] = defaultdict(list)
    for row in rows:
        grouped[(row.attempt_id, row.question, row.revision)].append(row)
    return dict(grouped)


def _judge(element: Element, tries: list[RevisionWrite], rows: list[RevisionRow],
           bad: dict[str, list[Any]], info: dict[str, list[Any]]) -> None:
    example: dict[str, Any] = {"attempt_id": element[0], "question": element[1], "revision": element[2]}
    ok = [t for t in tries if t.outcome == "ok"]
    if ok:
        if not rows:
            bad["lost"].append({**example, "receipt_ids": sorted({t.receipt_id or "" for t in ok})})
            return
        receipts = {t.receipt_id for t in ok}
        contents = {t.content for t in ok}
        if any(r.content not in contents or r.receipt_id not in receipts for r in rows):
            bad["content_mismatch"].append({**example, "acknowledged": sorted(map(fingerprint, contents)),
                                            "stored": sorted(fingerprint(r.content) for r in rows),
                                            "receipt_ids": sorted(r.receipt_id for r in rows)})
        return
    if any(t.outcome == "info" for t in tries):
        (info["recovered"] if rows else info["absent_info"]).append(example)
    elif rows:
        bad["failed_but_present"].append({**example, "receipt_ids": [r.receipt_id for r in rows]})


def _duplicates(rows: Sequence[RevisionRow]) -> list[dict[str, Any]]:
    """Elements, receipts or idempotency keys that occur on more than one row (count > 1)."""
    found: list[dict[str, Any]] = []
    by_element = Counter((r.attempt_id, r.question, r.revision) for r in rows)
    found += [{"attempt_id": a, "question": q, "revision": n, "rows": c} for (a, q, n), c in sorted(by_element.items()) if c > 1]
    by_receipt = Counter(r.receipt_id for r in rows)
    found += [{"receipt_id": rid, "rows": c} for rid, c in sorted(by_receipt.items()) if c > 1]
    by_key = Counter((r.attempt_id, r.idempotency_key) for r in rows if r.idempotency_key)
    found += [{"attempt_id": a, "idempotency_key": k, "rows": c} for (a, k), c in sorted(by_key.items()) if c > 1]
    return found


def visibility_latencies(writes: Sequence[RevisionWrite], reads: Sequence[AnswerRead]) -> tuple[list[float], list[Any]]:
    """Seconds from each revision's first ok to the first read showing it (or a higher one),
    and the acknowledged revisions no read ever showed."""
    reads_of: dict[str, list[AnswerRead]] = defaultdict(list)
    for read in sorted(reads, key=lambda r: r.completed_at):
        reads_of[read.attempt_id].append(read)
    first_ok: dict[Element, RevisionWrite] = {}
    for write in sorted(writes, key=lambda w: w.completed_at or 0.0):
        if write.outcome == "ok" and write.completed_at is not None:
            first_ok.setdefault((write.attempt_id, write.question, write.revision), write)  # replays add nothing
    latencies, never = [], []
    for write in first_ok.values():
        seen = next((r for r in reads_of[write.attempt_id]
                     if write.question in r.shown and r.shown[write.question].revision >= write.revision), None)
        if seen is None:
            never.append({"attempt_id": write.attempt_id, "question": write.question, "revision": write.revision})
        else:
            latencies.append(round(max(0.0, seen.completed_at - write.completed_at), 6))
    return latencies, never


def _row_example(row: RevisionRow) -> dict[str, Any]:
    return {"attempt_id": row.attempt_id, "question": row.question, "revision": row.revision,
            "receipt_id": row.receipt_id, "content": fingerprint(row.content)}
