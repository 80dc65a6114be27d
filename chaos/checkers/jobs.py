"""Jobs: no accepted work silently gone. Every outbox row reaches a final state.

The outbox is the durable list of work a finished attempt owes (one row per kind).
Read after the run has healed and gone quiet, every row must be final:

- ``done``, or ``failed`` with a ``failed_for_review`` outcome (retained, reviewable:
  the seed's "explicit final state"); ``failed`` without it is **failed_without_review**;
- ``pending``/``enqueued`` only for kinds in ``allow_pending`` (a scenario that leaves a
  backlog on purpose declares it: accounted for, valid). Otherwise the final read's queue
  evidence (``ledgers/queues.json``, read after the outbox) decides: a row whose job was
  still in progress there (``IN_PROGRESS``: waiting for or awaiting the relay, queued,
  dequeued, running under a live worker), inside its deadline, is **pending**, and makes the
  verdict unknown, never valid (the run could not prove the work completes); a row whose job
  was in neither place (abandoned by a dead worker, absent from Valkey, failed, or
  ``unrelayed``: ready to enqueue with no relay alive to do it) is
  **stuck**, as is every open row of a run folder without the queue read;
- every finished attempt (finished in the ledger, or acknowledged finished in the
  history: a vanished attempt row still owes its work) has all three rows
  (**missing_rows**), no row exists for
  an attempt that did not finish (**orphan_rows**: the rows are written in the
  finishing transaction), and no (attempt, kind) has two rows (**duplicated_rows**).

It also measures per-kind completion latency (``done_at - created_at``), how long rows
waited for their first enqueue (``enqueued_at - created_at``: rows kept pending while Valkey
refused them), how many rows were re-enqueued (``reenqueued_rows``) and, with
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
from chaos.ledgers import OUTBOX_KINDS, Ledgers, OutboxRow, OutcomeRow, QueueRow

__all__ = ["IN_PROGRESS", "NAME", "JobsOptions", "PendingOptions", "check_jobs", "completion_seconds",
           "enqueue_wait_seconds", "in_progress", "pending_reason", "queue_evidence"]

NAME = "jobs"

_NOT_FINAL = ("pending", "enqueued")
IN_PROGRESS = ("awaiting_relay", "waiting", "queued", "dequeued", "running")
"""Mirrors stack.lanes.evidence.IN_PROGRESS (copied so analysis imports no stack code;
tests/unit/test_queue_evidence.py keeps the two equal)."""
FINAL_SINCE = "final after the outbox read"
"""The evidence of a row the outbox export showed open and the later queue read no longer
lists (it became final in between): it was in progress, and the run did not see it end."""


def queue_evidence(ledgers: Ledgers) -> dict[str, QueueRow] | None:
    """operation_id -> its row of the final read's queue evidence; None when the queues were not read."""
    return None if ledgers.queues is None else {row.operation_id: row for row in ledgers.queues}


def in_progress(row: OutboxRow, evidence: Mapping[str, QueueRow] | None) -> str | None:
    """What shows the open ``row``'s work still in progress at the final read; None when nothing does."""
    if evidence is None:
        return None
    seen = evidence.get(row.operation_id)
    if seen is None:
        return FINAL_SINCE
    return seen.state if seen.state in IN_PROGRESS else None


def pending_reason(pending: Sequence[Any]) -> list[str]:
    """The note that makes a verdict with pending work unknown."""
    if not pending:
        return []
    return [f"{len(pending)} outbox row(s) still in progress at the final read (the queue read shows where): "
            "the run could not prove they complete"]


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
    info: dict[str, list[Any]] = {"pending_allowed": [], "pending": []}
    progress = _Progress(queue_evidence(ledgers), ledgers.exported_at.get("queues"), finished, options)
    for row in sorted(ledgers.outbox, key=lambda r: r.operation_id):
        _judge_row(row, review, options, exported_at, progress, bad, info)
    bad.update(_row_set_problems(ledgers.outbox, finished))
    bad["deadline_exceeded"] = _deadline_problems(ledgers.outbox, finished, review, options)
    counts = {
        "rows": len(ledgers.outbox),
        "done": sum(r.status == "done" for r in ledgers.outbox),
        "failed": sum(r.status == "failed" for r in ledgers.outbox),
        "finished_attempts": len(finished),
    }
    details = {"completion_seconds": completion_seconds(ledgers.outbox),
               "enqueue_wait_seconds": enqueue_wait_seconds(ledgers.outbox),
               "reenqueued_rows": sum((r.attempts or 0) > 1 for r in ledgers.outbox)}
    if options.outcome_deadline_seconds is not None:
        details["outcome_deadline_seconds"] = options.outcome_deadline_seconds
    reasons = [f"{malformed} finish invoke(s) without attempt_id: cannot tell which attempts finished"] if malformed else []
    reasons += pending_reason(info["pending"])
    return unknown_unless_invalid(build_result(NAME, bad=bad, info=info, counts=counts, details=details), reasons)


def completion_seconds(rows: Sequence[OutboxRow]) -> dict[str, dict[str, Any]]:
    """Per kind: summary of done_at - created_at over done rows (real seconds)."""
    by_kind: dict[str, list[float]] = {kind: [] for kind in OUTBOX_KINDS}
    for row in rows:
        if row.status == "done" and row.done_at is not None and row.created_at is not None:
            by_kind.setdefault(row.kind, []).append(round(row.done_at - row.created_at, 6))
    return {kind: summarize(values) for kind, values in by_kind.items()}


def enqueue_wait_seconds(rows: Sequence[OutboxRow]) -> dict[str, dict[str, Any]]:
    """Per kind: summary of enqueued_at - created_at over rows enqueued once (real seconds): how
    long rows stayed pending before Valkey took their first job, e.g. while it was full. A merit
    row is sent at once; a narrative or SMS row also waits for its merit card."""
    by_kind: dict[str, list[float]] = {kind: [] for kind in OUTBOX_KINDS}
    for row in rows:
        if row.attempts == 1 and row.enqueued_at is not None and row.created_at is not None:
            by_kind.setdefault(row.kind, []).append(round(row.enqueued_at - row.created_at, 6))
    return {kind: summarize(values) for kind, values in by_kind.items()}


def _final_review_times(outcomes: Sequence[OutcomeRow]) -> dict[str, float | None]:
    """operation_id -> created_at of its failed_for_review outcome."""
    return {o.operation_id: o.created_at for o in outcomes if o.status == "failed_for_review"}


@dataclass(frozen=True)
class _Progress:
    """The queue evidence, with the deadline an open row must still be inside to count as in progress."""

    evidence: Mapping[str, QueueRow] | None
    read_at: float | None
    finished: Mapping[str, float | None]
    options: JobsOptions

    def shown(self, row: OutboxRow) -> str | None:
        state = in_progress(row, self.evidence)
        deadline = self.options.outcome_deadline_seconds
        start = self.finished.get(row.attempt_id) or row.created_at
        if state is None or deadline is None or self.read_at is None or start is None:
            return state
        return state if self.read_at - start <= deadline else None  # past its deadline: no longer legitimate


def _judge_row(
    row: OutboxRow,
    review: Mapping[str, float | None],
    options: JobsOptions,
    exported_at: float | None,
    progress: _Progress,
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
        _judge_open(row, example, options, progress, bad, info)
    else:
        bad["invalid_status"].append(example)


def _judge_open(row: OutboxRow, example: dict[str, Any], options: JobsOptions, progress: _Progress,
                bad: dict[str, list[Any]], info: dict[str, list[Any]]) -> None:
    if row.kind in options.allow_pending:
        info["pending_allowed"].append(example)
        return
    shown = progress.shown(row)
    seen = (progress.evidence or {}).get(row.operation_id)
    if shown is not None:
        info["pending"].append({**example, "evidence": shown})
    else:
        bad["stuck"].append(example if seen is None else {**example, "queue_state": seen.state})


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
