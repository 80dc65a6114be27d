"""Attempts in the ledger: students, starting, finishing, and what a finish owes.

Every write is one transaction. ``finish_attempt`` flips the attempt and writes its
outbox rows together, so a crash leaves either an open attempt or a finished one
with all of its work recorded, never a finished attempt that owes nothing.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace

from sqlalchemy import Connection, Engine, bindparam, select, update
from sqlalchemy.exc import IntegrityError

from stack.ledger import exam_rules, outbox, outcomes, ranking
from stack.ledger.exam_rules import ExamRuleRefused
from stack.ledger.outbox import operation_id
from stack.ledger.prepared import Prepared
from stack.ledger.schema import attempt_slots, attempts, exams, students

__all__ = [
    "Attempt",
    "ExamRuleRefused",
    "FinishResult",
    "OutcomeView",
    "StartKeyConflict",
    "ensure_student",
    "finish_attempt",
    "finish_in",
    "get_attempt",
    "outcome_for",
    "question_count",
    "start_attempt",
]


class StartKeyConflict(Exception):
    """The student already used this Idempotency-Key to start an attempt of another exam."""


@dataclass(frozen=True)
class Attempt:
    id: str
    student_id: str
    exam_code: str
    status: str  # open | finished
    started_at: float
    finished_at: float | None
    idempotency_key: str | None


@dataclass(frozen=True)
class FinishResult:
    attempt: Attempt
    operation_ids: list[str]  # empty on a replay: nothing new was written


@dataclass(frozen=True)
class OutcomeView:
    """What a student may be told about one piece of owed work."""

    operation_id: str
    status: str  # pending | ready | failed_for_review
    outbox_status: str | None
    payload: dict | None
    created_at: float | None


def _attempt(row: object) -> Attempt:
    m = row._mapping  # type: ignore[attr-defined]
    return Attempt(
        id=m["id"],
        student_id=m["student_id"],
        exam_code=m["exam_code"],
        status=m["status"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        idempotency_key=m["idempotency_key"],
    )


def question_count(conn: Connection, exam_code: str) -> int | None:
    """Questions of an exam, or None for an exam the ledger does not know."""
    return conn.execute(select(exams.c.question_count).where(exams.c.code == exam_code)).scalar_one_or_none()


_ATTEMPT_BY_ID = select(attempts).where(attempts.c.id == bindparam("id"))
_ATTEMPT = Prepared(_ATTEMPT_BY_ID)
# Serialises answer submission against finish on PostgreSQL; SQLite already holds the write
# lock from BEGIN IMMEDIATE and compiles no FOR UPDATE.
_ATTEMPT_FOR_UPDATE = Prepared(_ATTEMPT_BY_ID.with_for_update())


def get_attempt(conn: Connection, attempt_id: str, *, for_update: bool = False) -> Attempt | None:
    """Compiled once (stack/ledger/prepared.py): a finish reads the attempt twice under the
    ledger's write lock, and every finish, merit card and narrative read checks its owner."""
    row = (_ATTEMPT_FOR_UPDATE if for_update else _ATTEMPT).run(conn, {"id": attempt_id}).first()
    return None if row is None else _attempt(row)


# A start's statements (the student's registration, then the attempt), compiled once and run as
# driver SQL (stack/ledger/prepared.py): each transaction holds the ledger's one write lock, and
# SQLAlchemy built them inside it (a start's hold p50 about 4 ms, 1.3-2.4 ms since; docs/ramp.md,
# "Who holds the write lock now; starts and finishes under it").
_STUDENT = Prepared(select(students.c.id).where(students.c.id == bindparam("id")))
_INSERT_STUDENT = Prepared(students.insert().values(id=bindparam("id"), created_at=bindparam("created_at")))
_ATTEMPT_BY_KEY = Prepared(select(attempts).where(attempts.c.student_id == bindparam("student_id"),
                                                  attempts.c.idempotency_key == bindparam("idempotency_key")))
_INSERT_ATTEMPT = Prepared(attempts.insert().values(
    {name: bindparam(name) for name in ("id", "student_id", "exam_code", "idempotency_key", "status", "started_at",
                                        "finished_at")}))
_INSERT_SLOT = Prepared(attempt_slots.insert().values(
    {name: bindparam(name) for name in ("exam_code", "student_id", "slot", "attempt_id")}))


def ensure_student(engine: Engine, student_id: str, now: float | None = None) -> None:
    """Register the student on first sight; a concurrent registration is not an error."""
    now = time.time() if now is None else now
    try:
        with engine.begin() as conn:
            if _STUDENT.run(conn, {"id": student_id}).first() is None:
                _INSERT_STUDENT.run(conn, {"id": student_id, "created_at": now})
    except IntegrityError:
        pass  # another node registered the same student between our read and insert


def _attempt_by_key(conn: Connection, student_id: str, key: str) -> Attempt | None:
    row = _ATTEMPT_BY_KEY.run(conn, {"student_id": student_id, "idempotency_key": key}).first()
    return None if row is None else _attempt(row)


def _replayed(found: Attempt, exam_code: str) -> tuple[Attempt, bool]:
    if found.exam_code != exam_code:
        raise StartKeyConflict(found.id)
    return found, False


_START_TRIES = 5
"""Starts of one student that race for the same slot: each loser counts again (bounded)."""


def start_attempt(
    engine: Engine, student_id: str, exam_code: str, key: str | None, now: float | None = None
) -> tuple[Attempt, bool]:
    """Start an attempt; with a key, a replay returns the first attempt. Returns (attempt, created).
    Refuses (ExamRuleRefused) outside the exam's window or past its attempts per student."""
    now = time.time() if now is None else now
    for _ in range(_START_TRIES):
        try:
            return _start_in_one_transaction(engine, student_id, exam_code, key, now)
        except IntegrityError:
            pass
        # A concurrent start committed first: the same key (answer with its attempt), or the same
        # slot (count again: the limit may now refuse).
        if key:
            with engine.connect() as conn:
                found = _attempt_by_key(conn, student_id, key)
            if found is not None:
                return _replayed(found, exam_code)
    raise RuntimeError(f"attempt start of {student_id!r} lost {_START_TRIES} races in a row")


def _start_in_one_transaction(engine: Engine, student_id: str, exam_code: str, key: str | None,
                              now: float) -> tuple[Attempt, bool]:
    new = Attempt(uuid.uuid4().hex, student_id, exam_code, "open", now, None, key)
    with engine.begin() as conn:
        found = _attempt_by_key(conn, student_id, key) if key else None
        if found is not None:
            return _replayed(found, exam_code)
        rules = exam_rules.rules_of(conn, exam_code)
        rules.check_start(now)
        slot = exam_rules.next_slot(conn, rules, student_id)
        _INSERT_ATTEMPT.run(conn, {"id": new.id, "student_id": student_id, "exam_code": exam_code,
                                   "idempotency_key": key, "status": "open", "started_at": now, "finished_at": None})
        _INSERT_SLOT.run(conn, {"exam_code": exam_code, "student_id": student_id, "slot": slot, "attempt_id": new.id})
        return new, True


def finish_attempt(engine: Engine, attempt_id: str, node: str, now: float | None = None) -> FinishResult:
    """Finish the attempt and write its outbox rows in one transaction; a replay writes nothing.
    An open attempt finishes only before the exam's close plus its grace (ExamRuleRefused)."""
    now = time.time() if now is None else now
    with engine.begin() as conn:
        current = get_attempt(conn, attempt_id, for_update=True)
        if current is not None and current.status == "open":
            exam_rules.rules_of(conn, current.exam_code).check_finish(now)
        return finish_in(conn, attempt_id, node, now)


def finish_in(conn: Connection, attempt_id: str, node: str, now: float) -> FinishResult:
    """The finish transaction's work, on the caller's transaction (``finish_attempt``; the
    backlog seeding path batches many finishes in one commit, stack/ledger/backlog.py)."""
    current = get_attempt(conn, attempt_id, for_update=True)
    if current is None:
        raise LookupError(attempt_id)
    # Scored under the write lock that closes the attempt: no answer can land after it.
    score = ranking.score_from_answers(conn, current.exam_code, [attempt_id])[attempt_id]
    moved = conn.execute(
        update(attempts)
        .where(attempts.c.id == attempt_id, attempts.c.status == "open")
        .values(status="finished", finished_at=now, score=score)
    ).rowcount
    if moved != 1:
        return FinishResult(current, [])
    ops = outbox.create_rows(conn, attempt_id, now=now)
    outcomes.audit(
        conn, current.student_id, "attempt.finish",
        {"attempt_id": attempt_id, "node": node, "operation_ids": ops}, now,
    )
    # What the update above wrote, without reading it back under the lock.
    return FinishResult(replace(current, status="finished", finished_at=now), ops)


def outcome_for(conn: Connection, attempt_id: str, kind: str) -> OutcomeView | None:
    """The honest status of one kind of work; None when the attempt owes none (not finished)."""
    op = operation_id(kind, attempt_id)
    rows = outcomes.find(conn, op)
    owed = outbox.get_row(conn, op)
    outbox_status = None if owed is None else owed["status"]
    # Prefer a ready outcome: a duplicate row must not hide a result the student already has.
    for wanted in ("ready", "failed_for_review"):
        for row in rows:
            if row["status"] == wanted:
                return OutcomeView(op, wanted, outbox_status, row["payload"], row["created_at"])
    if owed is None:
        return None
    status = "failed_for_review" if outbox_status == "failed" else "pending"
    return OutcomeView(op, status, outbox_status, None, None)
