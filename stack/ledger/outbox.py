"""Outbox rows: every piece of work a finished attempt owes, and its state.

The web node creates rows and records its best-effort enqueue; the relay moves
pending rows to enqueued and reconciles enqueued rows; a job marks its row done
in the transaction that writes the outcome (see docs/architecture.md).
Transitions out of ``enqueued`` compare the recorded ``job_id`` so a stale
observation (the relay looked at an older job) can never move a newer enqueue.

Merit first: a narrative or SMS row is handed to a lane only once its attempt's
merit row is ``done`` (its card is written, in the same transaction), because those
jobs read score and position from the card and nowhere else. If the merit row is
``failed`` the relay fails its dependants for review too (``blocked_by_failed_merit``).
"""

from __future__ import annotations

import time
from typing import Iterator

from sqlalchemy import ColumnElement, Connection, Select, and_, case, exists, func, or_, select, update

from stack.ledger.schema import OUTBOX_KINDS, lane_state, outbox

__all__ = [
    "operation_id",
    "create_rows",
    "rows_for_attempt",
    "mark_enqueued",
    "mark_enqueued_many",
    "get_row",
    "rows_with_status",
    "open_rows",
    "enqueueable",
    "blocked_by_failed_merit",
    "mark_failed_pending",
    "mark_done",
    "mark_reenqueued",
    "mark_failed",
    "defer",
    "job_id",
    "enqueue_number_of",
    "lost_runs",
    "pending_for_attempt",
    "unfinished_summary",
    "latency_histogram",
    "done_since",
    "done_since_query",
    "NON_FINAL_STATUSES",
]

NON_FINAL_STATUSES = ("pending", "enqueued")
"""Rows whose outcome the student is still waiting for."""

NEEDS_MERIT = ("narrative", "sms")
"""Kinds that read the merit card: enqueued only once the attempt's merit row is done."""


def operation_id(kind: str, attempt_id: str) -> str:
    """The stable identity of one piece of work; provider idempotency keys use it."""
    return f"{kind}-{attempt_id}"


def create_rows(conn: Connection, attempt_id: str, now: float | None = None) -> list[str]:
    """Insert one pending row per kind; call inside the transaction that finishes the attempt."""
    now = time.time() if now is None else now
    ids = [operation_id(kind, attempt_id) for kind in OUTBOX_KINDS]
    conn.execute(
        outbox.insert(),
        [
            {
                "operation_id": op,
                "attempt_id": attempt_id,
                "kind": kind,
                "status": "pending",
                "attempts": 0,
                "created_at": now,
                "updated_at": now,
            }
            for op, kind in zip(ids, OUTBOX_KINDS)
        ],
    )
    return ids


def rows_for_attempt(conn: Connection, attempt_id: str) -> list[dict]:
    result = conn.execute(select(outbox).where(outbox.c.attempt_id == attempt_id))
    return [dict(row._mapping) for row in result]


def mark_enqueued(conn: Connection, op: str, enqueue_number: int, job: str, now: float | None = None) -> bool:
    """Record an enqueue; only moves pending/enqueued rows (a done row stays done) that no
    enqueue as recent has reached yet: the job may have run and handed its row back (``defer``)
    before this mark, and the mark must never undo that. True if moved."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status.in_(NON_FINAL_STATUSES),
               outbox.c.attempts < enqueue_number)
        .values(status="enqueued", attempts=enqueue_number, job_id=job, enqueued_at=now, updated_at=now)
    )
    return result.rowcount == 1


def mark_enqueued_many(conn: Connection, sent: list[tuple[str, int, str]], now: float | None = None) -> list[str]:
    """``mark_enqueued`` for a batch of (operation_id, enqueue number, job id), in the caller's
    one transaction (one commit, one fsync, instead of one per row); the ops that moved."""
    now = time.time() if now is None else now
    return [op for op, number, job in sent if mark_enqueued(conn, op, number, job, now)]


def get_row(conn: Connection, op: str) -> dict | None:
    row = conn.execute(select(outbox).where(outbox.c.operation_id == op)).first()
    return None if row is None else dict(row._mapping)


def rows_with_status(conn: Connection, status: str, limit: int = 500) -> list[dict]:
    """Oldest first, so a backlog drains in finish order."""
    result = conn.execute(
        select(outbox).where(outbox.c.status == status).order_by(outbox.c.created_at, outbox.c.operation_id).limit(limit)
    )
    return [dict(row._mapping) for row in result]


def open_rows(conn: Connection) -> list[dict]:
    """Every row not final yet (pending or enqueued), oldest first: the final read's queue evidence."""
    result = conn.execute(select(outbox).where(outbox.c.status.in_(("pending", "enqueued")))
                          .order_by(outbox.c.created_at, outbox.c.operation_id))
    return [dict(row._mapping) for row in result]


def _merit_row_is(status: str) -> ColumnElement[bool]:
    merit = outbox.alias("merit")
    return exists().where(merit.c.attempt_id == outbox.c.attempt_id, merit.c.kind == "merit", merit.c.status == status)


def _may_enqueue(now: float | None = None) -> ColumnElement[bool]:
    """Merit first; a waiting row only from its not-before time; no narrative (SMS) while the AI (SMS) lane is paused."""
    now = time.time() if now is None else now
    ai_paused = exists().where(lane_state.c.lane == "ai", lane_state.c.paused == 1)
    sms_paused = exists().where(lane_state.c.lane == "sms", lane_state.c.paused == 1)
    return and_(
        or_(outbox.c.kind.not_in(NEEDS_MERIT), _merit_row_is("done")),
        or_(outbox.c.not_before.is_(None), outbox.c.not_before <= now),
        or_(outbox.c.kind != "narrative", ~ai_paused),
        or_(outbox.c.kind != "sms", ~sms_paused),
    )


def enqueueable(conn: Connection, limit: int = 500) -> list[dict]:
    """Pending rows that may go to a lane now (merit first), oldest first.

    Filtered in SQL, not after the limit: a backlog of waiting SMS rows must never hide
    the merit rows they wait for.
    """
    result = conn.execute(
        select(outbox).where(outbox.c.status == "pending", _may_enqueue())
        .order_by(outbox.c.created_at, outbox.c.operation_id).limit(limit)
    )
    return [dict(row._mapping) for row in result]


def blocked_by_failed_merit(conn: Connection, limit: int = 500) -> list[dict]:
    """Pending narrative/SMS rows whose merit row gave up: they can never run."""
    result = conn.execute(
        select(outbox).where(outbox.c.status == "pending", outbox.c.kind.in_(NEEDS_MERIT), _merit_row_is("failed"))
        .order_by(outbox.c.created_at, outbox.c.operation_id).limit(limit)
    )
    return [dict(row._mapping) for row in result]


def mark_failed_pending(conn: Connection, op: str, reason: str, now: float | None = None) -> bool:
    """Give up on a pending row that can never run; the caller writes the failed_for_review outcome."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status == "pending")
        .values(status="failed", updated_at=now, last_error=reason)
    )
    return result.rowcount == 1


def defer(conn: Connection, op: str, job: str, not_before: float, reason: str, now: float | None = None) -> bool:
    """A job that must wait (limiter, backoff, paused lane) hands its row back: pending again,
    with the time before which the relay must not enqueue it. Durable, so a Valkey flush
    or a killed scheduler during the wait loses nothing."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, _held_by(job))
        .values(status="pending", not_before=not_before, updated_at=now, last_error=reason,
                attempts=enqueue_number_of(job), job_id=job, deferrals=outbox.c.deferrals + 1)
    )
    return result.rowcount == 1


def job_id(operation: str, enqueue_number: int) -> str:
    """A fresh RQ job id per enqueue, so a re-enqueue never reuses a finished/failed job id."""
    return f"{operation}-{enqueue_number}"


def enqueue_number_of(job: str) -> int:
    """The enqueue number in a ``job_id``: the hand-backs compare it with the row's ``attempts``."""
    return int(job.rsplit("-", 1)[1])


def _held_by(job: str) -> ColumnElement[bool]:
    """The row is ``job``'s to hand back: it points at the job, or the enqueue that sent the job
    is not recorded yet. The relay and the reconciler mark a row only after Valkey accepted its
    job, so a fast worker can run the job first. Without the second case its hand-back matched
    nothing, the late mark set the row ``enqueued`` on a finished job, and no pass ever looked
    at it again (a narrative stuck for good, rehearsal run 23). A stale job (the row moved on
    to a newer enqueue) still matches nothing."""
    return or_(and_(outbox.c.status == "enqueued", outbox.c.job_id == job),
               and_(outbox.c.status.in_(NON_FINAL_STATUSES), outbox.c.attempts < enqueue_number_of(job)))


def lost_runs(row: dict) -> int:
    """Enqueues that did not end in a hand-back: the runs the relay had to replace (worker
    died, job failed, Valkey lost it). A deferral is a finished run, not a failed attempt,
    so a row that waited a hundred times may still be replaced after one crash."""
    return row["attempts"] - (row.get("deferrals") or 0)


def mark_done(conn: Connection, op: str, now: float | None = None) -> bool:
    """The outcome is written (same transaction). Any other state yields to the outcome: it is the truth."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status != "done")
        .values(status="done", done_at=now, updated_at=now)
    )
    return result.rowcount == 1


def mark_reenqueued(
    conn: Connection, op: str, previous_job: str, enqueue_number: int, job: str, reason: str, now: float | None = None
) -> bool:
    """Move an enqueued row to a fresh job, only if it still points at ``previous_job``."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, outbox.c.status == "enqueued", outbox.c.job_id == previous_job)
        .values(attempts=enqueue_number, job_id=job, enqueued_at=now, updated_at=now, last_error=reason)
    )
    return result.rowcount == 1


def mark_failed(conn: Connection, op: str, previous_job: str, reason: str, now: float | None = None) -> bool:
    """Give up on the row ``previous_job`` holds (``_held_by``: the reconciler's max attempts, or
    the job's own verdict); the caller writes the failed_for_review outcome."""
    now = time.time() if now is None else now
    result = conn.execute(
        update(outbox)
        .where(outbox.c.operation_id == op, _held_by(previous_job))
        .values(status="failed", attempts=enqueue_number_of(previous_job), job_id=previous_job,
                updated_at=now, last_error=reason)
    )
    return result.rowcount == 1


def pending_for_attempt(conn: Connection, attempt_id: str) -> list[dict]:
    """Rows of the attempt not yet handed to Valkey that may go now, merit first.

    Right after finish that is only the merit row: its dependants wait for the card.
    """
    result = conn.execute(
        select(outbox).where(outbox.c.attempt_id == attempt_id, outbox.c.status == "pending", _may_enqueue())
    )
    rows = [dict(row._mapping) for row in result]
    return sorted(rows, key=lambda r: OUTBOX_KINDS.index(r["kind"]))


def unfinished_summary(conn: Connection) -> tuple[int, float | None]:
    """(rows still owed, created_at of the oldest of them): pending outcomes and outbox lag."""
    count, oldest = conn.execute(
        select(func.count(), func.min(outbox.c.created_at)).where(outbox.c.status.in_(NON_FINAL_STATUSES))
    ).one()
    return int(count), oldest


def latency_histogram(conn: Connection, bounds: tuple[float, ...]) -> dict[str, tuple[list[int], int, float]]:
    """Per kind, finish -> outcome (``done_at - created_at``) of the done rows: (cumulative count
    at or below each bound, count, sum of seconds). One grouped scan of every done row: what each
    /metrics scrape ran before stack/web/lane_latency.py, now the reference its tests and
    loadtests/bench_metrics_scrape.py compare against."""
    latency = outbox.c.done_at - outbox.c.created_at
    buckets = [func.sum(case((latency <= bound, 1), else_=0)) for bound in bounds]
    rows = conn.execute(
        select(outbox.c.kind, func.count(), func.coalesce(func.sum(latency), 0.0), *buckets)
        .where(outbox.c.status == "done", outbox.c.done_at.is_not(None)).group_by(outbox.c.kind)
    )
    return {kind: ([int(c or 0) for c in counts], int(count), float(total)) for kind, count, total, *counts in rows}


def done_since_query(since: float | None) -> Select:
    """The done rows with ``done_at >= since`` (all of them for None); ``ix_outbox_done_at``
    (status, done_at) makes a recent ``since`` an index range, whatever the table's size."""
    query = select(outbox.c.operation_id, outbox.c.kind, outbox.c.created_at, outbox.c.done_at).where(
        outbox.c.status == "done", outbox.c.done_at.is_not(None))
    return query if since is None else query.where(outbox.c.done_at >= since)


def done_since(conn: Connection, since: float | None, batch: int = 5000) -> Iterator[tuple[str, str, float, float]]:
    """(operation_id, kind, created_at, done_at) of ``done_since_query(since)``, streamed in batches."""
    for row in conn.execution_options(yield_per=batch).execute(done_since_query(since)):
        yield row.operation_id, row.kind, float(row.created_at), float(row.done_at)
