"""Ledger exports in the contract format of docs/architecture.md (what checkers read)."""

from __future__ import annotations

import json
from typing import Callable

from sqlalchemy import Connection, select

from stack.ledger.answer_keys import exam_key
from stack.ledger.schema import (
    ai_reservations,
    alerts,
    answer_revisions,
    answers,
    attempts,
    audit_log,
    exams,
    lane_state,
    outbox,
    outcomes,
)

__all__ = ["EXPORT_TABLES", "export_rows"]


def _attempts(conn: Connection) -> list[dict]:
    query = select(
        attempts.c.id.label("attempt_id"), attempts.c.student_id, attempts.c.exam_code,
        attempts.c.status, attempts.c.started_at, attempts.c.finished_at,
    ).order_by(attempts.c.started_at, attempts.c.id)
    return [dict(r._mapping) for r in conn.execute(query)]


def _answers(conn: Connection) -> list[dict]:
    query = (
        select(
            answers.c.receipt_id, answers.c.attempt_id, attempts.c.student_id, answers.c.question,
            answers.c.content, answers.c.idempotency_key, answers.c.node, answers.c.created_at,
            answers.c.revision,
        )
        .join(attempts, attempts.c.id == answers.c.attempt_id)
        .order_by(answers.c.created_at, answers.c.receipt_id)
    )
    return [dict(r._mapping) for r in conn.execute(query)]


def _answer_revisions(conn: Connection) -> list[dict]:
    """The append-only revision log; ``answers`` is its current value per question."""
    log = answer_revisions.c
    query = select(
        log.receipt_id, log.attempt_id, log.question, log.revision, log.content, log.idempotency_key,
        log.node, log.created_at, log.superseded,
    ).order_by(log.created_at, log.receipt_id)
    return [{**dict(r._mapping), "superseded": bool(r.superseded)} for r in conn.execute(query)]


def _outbox(conn: Connection) -> list[dict]:
    query = select(
        outbox.c.operation_id, outbox.c.attempt_id, outbox.c.kind, outbox.c.status, outbox.c.attempts,
        outbox.c.job_id, outbox.c.last_error, outbox.c.created_at, outbox.c.enqueued_at, outbox.c.done_at,
    ).order_by(outbox.c.created_at, outbox.c.operation_id)
    return [dict(r._mapping) for r in conn.execute(query)]


def _outcomes(conn: Connection) -> list[dict]:
    query = select(
        outcomes.c.id, outcomes.c.operation_id, outcomes.c.attempt_id, outcomes.c.kind,
        outcomes.c.status, outcomes.c.payload, outcomes.c.created_at,
    ).order_by(outcomes.c.id)
    # payload is stored as JSON text; the export hands checkers an object.
    return [{**dict(r._mapping), "payload": json.loads(r.payload)} for r in conn.execute(query)]


def _exams(conn: Connection) -> list[dict]:
    """Each exam with its secret answer key (admin export only), so a checker can re-score
    attempts from the exports."""
    query = select(exams.c.code, exams.c.question_count).order_by(exams.c.code)
    return [
        {"exam_code": r.code, "question_count": r.question_count, "answer_key": exam_key(conn, r.code)}
        for r in conn.execute(query).all()
    ]


def _ai_reservations(conn: Connection) -> list[dict]:
    """Billing reservations (issue #11): what the billing and paused-calls checkers judge."""
    query = select(ai_reservations).order_by(ai_reservations.c.reserved_at, ai_reservations.c.call_id)
    return [dict(r._mapping) for r in conn.execute(query)]


def _audit_log(conn: Connection) -> list[dict]:
    """Every audited action; lane_pause/lane_resume rows bound the paused windows."""
    query = select(audit_log).order_by(audit_log.c.id)
    return [{**dict(r._mapping), "detail": json.loads(r.detail)} for r in conn.execute(query)]


def _alerts(conn: Connection) -> list[dict]:
    query = select(alerts).order_by(alerts.c.id)
    return [{**dict(r._mapping), "detail": json.loads(r.detail)} for r in conn.execute(query)]


def _lane_state(conn: Connection) -> list[dict]:
    """A lane still paused at the final read is evidence, not an error: the report says so."""
    query = select(lane_state).order_by(lane_state.c.lane)
    return [{**dict(r._mapping), "paused": bool(r.paused)} for r in conn.execute(query)]


# One reader per name of stack/ledger/export_names.py, in its order (tests/unit/test_single_definitions.py).
EXPORT_TABLES: dict[str, Callable[[Connection], list[dict]]] = {
    "attempts": _attempts,
    "answers": _answers,
    "answer_revisions": _answer_revisions,
    "outbox": _outbox,
    "outcomes": _outcomes,
    "exams": _exams,
    "ai_reservations": _ai_reservations,
    "audit_log": _audit_log,
    "alerts": _alerts,
    "lane_state": _lane_state,
}


def export_rows(conn: Connection, table: str) -> list[dict]:
    """All rows of one exported table, oldest first; KeyError for a table not exported."""
    return EXPORT_TABLES[table](conn)
