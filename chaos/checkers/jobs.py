"""Jobs: no accepted work silently gone. Every outbox row reaches a final state.

The outbox is the durable list of work a finished attempt owes (one row per kind).
Read after the run has healed and gone quiet, every row must be final:

- ``done``, or ``failed`` with a ``failed_for_review`` outcome (retained, reviewable:
  the seed's "explicit final state"); ``failed`` without it is **failed_without_review**;
- ``pending``/``enqueued`` only for kinds in ``allow_pending``; otherwise the job
  vanished or is stuck: **stuck** (the worker died, the queue lost it, the relay
  never re-enqueued it);
- every finished attempt (finished in the ledger, or acknowledged finished in the
  history: a vanished attempt row still owes its work) has all three rows
  (**missing_rows**), no row exists for
  an attempt that did not finish (**orphan_rows**: the rows are written in the
  finishing transaction), and no (attempt, kind) has two rows (**duplicated_rows**).

It also measures per-kind completion latency (``done_at - created_at``) and, with
``outcome_deadline_seconds``, flags every final row that took longer than that
from the attempt's finish (**deadline_exceeded**).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from chaos.checkers.acknowledged import acknowledged_finishes
from chaos.checkers.base import (
    CheckerOptions,
    Result,
    build_result,
    option,
    parse_kinds,
    parse_seconds,
    show_seconds,
    summarize,
    unknown_unless_invalid,
)
from chaos.history import Op
from chaos.ledgers import OUTBOX_KINDS, Ledgers, OutboxRow, OutcomeRow

__all__ = ["NAME", "JobsOptions", "PendingOptions", "check_jobs", "completion_seconds"]

NAME = "jobs"

_NOT_FINAL = ("pending", "enqueued")


@dataclass(frozen=True)
class PendingOptions(CheckerOptions):
    """Shared by the jobs and effects checkers."""

    allow_pending: frozenset[str] = option(frozenset(), parse_kinds, dump=sorted)
    """Outbox kinds whose still-pending/enqueued rows (no outcome yet) count as accounted for."""


def _deadline(value: Any, where: str) -> float | None:
    return None if value is None else parse_seconds(value, where)


@dataclass(frozen=True)
class JobsOptions(PendingOptions):
    outcome_deadline_seconds: float | None = option(None, _deadline, show=show_seconds)
    """Real seconds from finish to final outcome; None = no deadline."""


def check_jobs(history: Sequence[Op], ledgers: Ledgers, options: JobsOptions) -> Result:
    needed = ("attempts", "outbox", "outcomes")
    if ledgers.attempts is None or ledgers.outbox is None or ledgers.outcomes is None:
        return Result.unknown(NAME, ledgers.missing(*needed) + ["cannot tell finished work from vanished work"])
    acknowledged, malformed = acknowledged_finishes(history)
    finished: dict[str, float | None] = {aid: None for aid in acknowledged}
    finished.update({a.attempt_id: a.finished_at for a in ledgers.attempts if a.status == "finished"})
    review = _final_review_times(ledgers.outcomes)
    exported_at = ledgers.exported_at.get("outbox")

    bad: dict[str, list[Any]] = {"stuck": [], "failed_without_review": [], "invalid_status": []}
    info: dict[str, list[Any]] = {"pending_allowed": []}
    for row in sorted(ledgers.outbox, key=lambda r: r.operation_id):
        _judge_row(row, review, options, exported_at, bad, info)
    bad.update(_row_set_problems(ledgers.outbox, finished))
    bad["deadline_exceeded"] = _deadline_problems(ledgers.outbox, finished, review, options)
    counts = {
        "rows": len(ledgers.outbox),
        "done": sum(r.status == "done" for r in ledgers.outbox),
        "failed": sum(r.status == "failed" for r in ledgers.outbox),
        "finished_attempts": len(finished),
    }
    details = {"completion_seconds": completion_seconds(ledgers.outbox)}
    if options.outcome_deadline_seconds is not None:
        details["outcome_deadline_seconds"] = options.outcome_deadline_seconds
    reasons = [f"{malformed} finish invoke(s) without attempt_id: cannot tell which attempts finished"] if malformed else []
    return unknown_unless_invalid(build_result(NAME, bad=bad, info=info, counts=counts, details=details), reasons)


def completion_seconds(rows: Sequence[OutboxRow]) -> dict[str, dict[str, Any]]:
    """Per kind: summary of done_at - created_at over done rows (real seconds)."""
    by_kind: dict[str, list[float]] = {kind: [] for kind in OUTBOX_KINDS}
    for row in rows:
        if row.status == "done" and row.done_at is not None and row.created_at is not None:
            by_kind.setdefault(row.kind, []).append(round(row.done_at - row.created_at, 6))
    return {kind: summarize(values) for kind, values in by_kind.items()}


def _final_review_times(outcomes: Sequence[OutcomeRow]) -> dict[str, float | None]:
    """operation_id -> created_at of its failed_for_review outcome."""
    return {o.operation_id: o.created_at for o in outcomes if o.status == "failed_for_review"}


def _judge_row(
    row: OutboxRow,
    review: Mapping[str, float | None],
    options: JobsOptions,
    exported_at: float | None,
    bad: dict[str, list[Any]],
    info: dict[str, list[Any]],
) -> None:
    example = _example(row, exported_at)
    if row.status == "done":
        return
    if row.status == "failed":
        if row.operation_id not in review:
            bad["failed_without_review"].append(example)
    elif row.status in _NOT_FINAL:
        (info["pending_allowed"] if row.kind in options.allow_pending else bad["stuck"]).append(example)
    else:
        bad["invalid_status"].append(example)


def _example(row: OutboxRow, exported_at: float | None) -> dict[str, Any]:
    example = {
        "operation_id": row.operation_id,
        "status": row.status,
        "job_attempts": row.attempts,
        "job_id": row.job_id,
        "last_error": row.last_error,
    }
    if exported_at is not None and row.created_at is not None:
        example["age_at_export"] = round(exported_at - row.created_at, 3)
    return example


def _row_set_problems(rows: Sequence[OutboxRow], finished: Mapping[str, float | None]) -> dict[str, list[Any]]:
    kinds: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        kinds[row.attempt_id].append(row.kind)
    missing = [
        {"attempt_id": aid, "missing_kinds": [k for k in OUTBOX_KINDS if k not in kinds.get(aid, [])]}
        for aid in sorted(finished)
        if not set(OUTBOX_KINDS) <= set(kinds.get(aid, []))
    ]
    duplicated = [
        {"attempt_id": aid, "kind": kind, "rows": have.count(kind)}
        for aid, have in sorted(kinds.items())
        for kind in sorted(set(have))
        if have.count(kind) > 1
    ]
    orphans = [{"attempt_id": aid, "kinds": sorted(have)} for aid, have in sorted(kinds.items()) if aid not in finished]
    return {"missing_rows": missing, "duplicated_rows": duplicated, "orphan_rows": orphans}


def _deadline_problems(
    rows: Sequence[OutboxRow],
    finished: Mapping[str, float | None],
    review: Mapping[str, float | None],
    options: JobsOptions,
) -> list[dict[str, Any]]:
    """Final rows that became final later than the deadline after their attempt finished.

    Rows not yet final are already ``stuck`` (or allowed pending), so they are not
    counted twice here.
    """
    deadline = options.outcome_deadline_seconds
    if deadline is None:
        return []
    late = []
    for row in sorted(rows, key=lambda r: r.operation_id):
        start = finished.get(row.attempt_id) or row.created_at
        final_at = row.done_at if row.status == "done" else review.get(row.operation_id) if row.status == "failed" else None
        if start is None or final_at is None:
            continue
        took = round(final_at - start, 6)
        if took > deadline:
            late.append({"operation_id": row.operation_id, "status": row.status, "seconds": took, "deadline": deadline})
    return late
