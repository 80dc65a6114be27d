"""Seeding an AI backlog: N finished attempts whose narrative jobs wait, without N real exams.

The seed's headline (#12) was a merit card stuck behind about 2,000 ten-second AI jobs.
Reproducing that through 2,000 real finishes would spend most of a test's budget on HTTP,
so this module writes the same ledger state a finish and its merit job write, through the
same functions:

- ``attempts.start_attempt`` and ``attempts.finish_attempt``: the finish transaction itself,
  with its three ``pending`` outbox rows (merit, narrative, sms) and its audit record;
- the merit card as the merit job writes it: ``jobs.merit_of`` ranks the attempt,
  ``outcomes.write_ready`` stores it, ``outbox.mark_done`` closes the merit row (in one
  transaction, as ``compute_merit_card`` does). Only the job's CPU stand-in is skipped,
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
from dataclasses import dataclass
from typing import Sequence

from sqlalchemy import Engine, insert, select

from stack.config import load_settings
from stack.lanes.jobs import merit_of
from stack.lanes.queues import operation_id
from stack.ledger import outbox, outcomes
from stack.ledger.attempts import ensure_student, finish_attempt, start_attempt
from stack.ledger.engine import make_engine
from stack.ledger.schema import exams

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


def seed_backlog(engine: Engine, count: int, per_exam: int = 10) -> Backlog:
    """Finish ``count`` one-question attempts and write their merit cards; their narrative and
    SMS rows stay ``pending`` for the relay. Raises ValueError for a bad count or per_exam."""
    _check_size(count, per_exam)
    started = time.perf_counter()
    codes = sorted({backlog_exam(i, per_exam) for i in range(count)})
    _ensure_exams(engine, codes)
    for index in range(count):
        _seed_one(engine, backlog_exam(index, per_exam), f"backlog-{index:05d}")
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


def _seed_one(engine: Engine, exam_code: str, student_id: str) -> None:
    ensure_student(engine, student_id)
    attempt, _ = start_attempt(engine, student_id, exam_code, key=f"{exam_code}/{student_id}")
    finish_attempt(engine, attempt.id, SEED_NODE)
    op = operation_id("merit", attempt.id)
    with engine.begin() as conn:  # as compute_merit_card's _commit_outcome: card and done together
        card = {**merit_of(conn, attempt.id), "computed_at": time.time()}
        outcomes.write_ready(conn, op, attempt.id, "merit", card)
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
