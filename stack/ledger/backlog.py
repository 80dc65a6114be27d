"""Seeding an AI backlog: N finished attempts whose narrative jobs wait, without N real exams.

The seed's headline (#12) was a merit card stuck behind about 2,000 ten-second AI jobs.
Reproducing that through 2,000 real finishes would spend most of a test's budget on HTTP,
so this module writes the same ledger state a finish and its merit job write, through the
same functions:

- the student and an open attempt, as ``ensure_student`` and ``start_attempt`` write them,
  then ``attempts.finish_in``: the finish transaction's own code, with its three
  ``pending`` outbox rows (merit, narrative, sms) and its audit record;
- the merit card as the merit job writes it: ``jobs.merit_of`` ranks the attempt,
  ``outcomes.write_ready`` stores it, ``outbox.mark_done`` closes the merit row (in the
  same transaction, as ``compute_merit_card`` writes them together). Only the job's CPU stand-in is skipped,
  and the row keeps ``enqueued_at`` NULL: no job ran it.

After that the narrative and SMS rows are ``pending`` with a ready card, so the relay's
next pass enqueues them exactly as it enqueues a real exam's: the backlog is real RQ jobs
on the ``ai`` (and ``sms``) lane, created by the production relay.

The attempts belong to their own small exams (``BACKLOG-0001``… with one question,
``per_exam`` attempts each), so a card ranks against ``per_exam`` attempts, not against
the whole backlog (a card lists every attempt it was ranked against: 2,000 in one exam
would write 72 MB of cards), and the exam under test is not ranked against the seed.

``python -m stack.ledger.backlog --count 2000`` seeds the ledger of ``$DATABASE_URL`` /
``$PROCTOR_RUN_DIR`` (the settings every component reads).
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Sequence

from sqlalchemy import Connection, Engine, insert, select

from stack.config import load_settings
from stack.ledger import outbox, outcomes
from stack.ledger.outbox import operation_id
from stack.ledger.ranking import merit_of
from stack.ledger.attempts import finish_in
from stack.ledger.engine import make_engine
from stack.ledger.schema import attempts, exams, students

__all__ = ["BACKLOG_EXAM_PREFIX", "Backlog", "backlog_exam", "main", "seed_backlog"]

BACKLOG_EXAM_PREFIX = "BACKLOG-"
SEED_NODE = "seed"
"""The ``node`` the finish's audit record names: the seeding path, not a web node."""


@dataclass(frozen=True)
class Backlog:
    attempts: int
    exams: int
    seconds: float  # wall time the seeding took

    def as_dict(self) -> dict[str, float | int]:
        return {"attempts": self.attempts, "exams": self.exams, "seconds": round(self.seconds, 3)}


def backlog_exam(index: int, per_exam: int) -> str:
    return f"{BACKLOG_EXAM_PREFIX}{index // per_exam + 1:04d}"


def seed_backlog(engine: Engine, count: int, per_exam: int = 10, batch: int = 250) -> Backlog:
    """Finish ``count`` one-question attempts and write their merit cards; their narrative and
    SMS rows stay ``pending`` for the relay. Raises ValueError for a bad count or per_exam.

    ``batch`` attempts share one commit (one fsync): 2,000 one-by-one commits took 220 s on
    the 2-core CI machine."""
    _check_size(count, per_exam)
    started = time.perf_counter()
    codes = sorted({backlog_exam(i, per_exam) for i in range(count)})
    _ensure_exams(engine, codes)
    for first in range(0, count, batch):
        with engine.begin() as conn:
            for index in range(first, min(first + batch, count)):
                _seed_one(conn, backlog_exam(index, per_exam), f"backlog-{index:05d}")
    return Backlog(count, len(codes), time.perf_counter() - started)


def _check_size(count: int, per_exam: int) -> None:
    if count < 1:
        raise ValueError(f"backlog count={count}: expected at least 1 attempt")
    if per_exam < 1:
        raise ValueError(f"backlog per_exam={per_exam}: expected at least 1 attempt per exam")


def _ensure_exams(engine: Engine, codes: Sequence[str]) -> None:
    with engine.begin() as conn:
        known = set(conn.execute(select(exams.c.code).where(exams.c.code.in_(codes))).scalars())
        fresh = [{"code": code, "question_count": 1} for code in codes if code not in known]
        if fresh:
            conn.execute(insert(exams), fresh)


def _seed_one(conn: Connection, exam_code: str, student_id: str) -> None:
    """One student, one attempt started and finished, its merit card written: the same
    statements as ``ensure_student``, ``start_attempt``, the finish and the merit job."""
    now = time.time()
    if conn.execute(select(students.c.id).where(students.c.id == student_id)).first() is None:
        conn.execute(students.insert().values(id=student_id, created_at=now))
    attempt_id = uuid.uuid4().hex
    conn.execute(attempts.insert().values(id=attempt_id, student_id=student_id, exam_code=exam_code,
                                          idempotency_key=None, status="open", started_at=now, finished_at=None))
    finish_in(conn, attempt_id, SEED_NODE, now)
    op = operation_id("merit", attempt_id)
    card = {**merit_of(conn, attempt_id), "computed_at": time.time()}
    outcomes.write_ready(conn, op, attempt_id, "merit", card)
    outbox.mark_done(conn, op)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.ledger.backlog",
                                     description="Seed finished attempts whose narrative (AI) jobs the relay will enqueue.")
    parser.add_argument("--count", type=int, default=2000, help="attempts to seed (default 2000)")
    parser.add_argument("--per-exam", type=int, default=10, help="attempts per backlog exam (default 10)")
    args = parser.parse_args(argv)
    try:
        _check_size(args.count, args.per_exam)  # before any ledger is opened
    except ValueError as exc:
        parser.error(str(exc))
    seeded = seed_backlog(make_engine(load_settings()), args.count, args.per_exam)
    print(f"seeded {seeded.attempts} finished attempts in {seeded.exams} exams in {seeded.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
