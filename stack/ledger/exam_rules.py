"""The exam's rules, enforced by the server: its window and the attempts a student may start.

- **Window.** Every provisioned exam has one: a row in ``exam_windows`` (the same window the
  exam lock uses, set through ``PUT /admin/exams/{code}/window``), or, when provisioning was
  given none, the explicit ``open_ended`` mark of its policy, which holds until a window is
  set. An exam with neither (not provisioned) is closed. Starting needs the window open
  (``opens_at <= now < closes_at``); so does every answer, so nothing is accepted after the
  close; finishing an attempt that was open at the close is allowed for ``grace_seconds`` more.
- **Attempts.** At most ``max_attempts`` per student and exam (default 1), counted in the
  ledger as numbered slots under a primary key (``attempt_slots``): two racing starts cannot
  both take the last one.

Refusals are ``ExamRuleRefused`` with a reason a student can read; the routes answer 409.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, bindparam, func, select

from stack.ledger.prepared import Prepared
from stack.ledger.schema import attempt_slots, exam_policies, exam_windows

__all__ = ["ExamPolicy", "ExamRuleRefused", "ExamRules", "RuleCache", "next_slot", "provision_policy", "rules_of"]

OPEN_ENDED = "open-ended"


class ExamRuleRefused(Exception):
    """A rule of the exam refuses the request; ``str()`` is the reason given to the student."""


@dataclass(frozen=True)
class ExamPolicy:
    open_ended: bool
    max_attempts: int
    grace_seconds: float


@dataclass(frozen=True)
class ExamRules:
    """What one exam allows: its policy and its window (None: open-ended, or none at all)."""

    exam_code: str
    policy: ExamPolicy | None
    opens_at: float | None
    closes_at: float | None

    def _unwindowed(self) -> None:
        if self.policy is None:
            raise ExamRuleRefused(f"exam {self.exam_code} has no window: it was never provisioned")

    def check_start(self, now: float) -> None:
        self._inside(now, "attempts start")

    def check_answer(self, now: float) -> None:
        self._inside(now, "answers are accepted")

    def _inside(self, now: float, what: str) -> None:
        if self.opens_at is None or self.closes_at is None:
            return self._unwindowed()
        if now < self.opens_at:
            raise ExamRuleRefused(f"exam {self.exam_code} opens at {_utc(self.opens_at)}; {what} only while it is open")
        if now >= self.closes_at:
            raise ExamRuleRefused(f"exam {self.exam_code} closed at {_utc(self.closes_at)}; {what} only while it is open")

    def check_finish(self, now: float) -> None:
        if self.opens_at is None or self.closes_at is None:
            return self._unwindowed()
        grace = self.policy.grace_seconds if self.policy else 0.0
        if now >= self.closes_at + grace:
            raise ExamRuleRefused(f"exam {self.exam_code} closed at {_utc(self.closes_at)} and its grace period "
                                  f"for finishing ({grace:g} s) is over")

    @property
    def max_attempts(self) -> int:
        return self.policy.max_attempts if self.policy else 1


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(epoch))


def provision_policy(conn: Connection, exam_code: str, window: str, max_attempts: int, grace_seconds: float,
                     now: float) -> None:
    """The exam's rules at provisioning (once; an existing policy stands). ``window`` is
    ``open-ended`` or a duration in seconds from now (PROCTOR_EXAM_WINDOW)."""
    if conn.execute(select(exam_policies.c.exam_code).where(exam_policies.c.exam_code == exam_code)).first():
        return
    open_ended = window == OPEN_ENDED
    conn.execute(exam_policies.insert().values(exam_code=exam_code, open_ended=int(open_ended),
                                               max_attempts=max_attempts, grace_seconds=grace_seconds))
    has_window = conn.execute(select(exam_windows.c.exam_code).where(exam_windows.c.exam_code == exam_code)).first()
    if not open_ended and has_window is None:
        conn.execute(exam_windows.insert().values(exam_code=exam_code, opens_at=now, closes_at=now + float(window),
                                                  min_web=0, min_workers="{}", updated_at=now))


# Read inside every start's write transaction (and every finish's): compiled once, run as driver
# SQL (stack/ledger/prepared.py), so SQLAlchemy does not build them while the ledger's one write
# lock is held (docs/ramp.md, "Who holds the write lock now; starts and finishes under it").
_POLICY = Prepared(select(exam_policies.c.open_ended, exam_policies.c.max_attempts, exam_policies.c.grace_seconds)
                   .where(exam_policies.c.exam_code == bindparam("exam_code")))
_WINDOW = Prepared(select(exam_windows.c.opens_at, exam_windows.c.closes_at)
                   .where(exam_windows.c.exam_code == bindparam("exam_code")))
_SLOTS_TAKEN = Prepared(select(func.count()).select_from(attempt_slots).where(
    attempt_slots.c.exam_code == bindparam("exam_code"), attempt_slots.c.student_id == bindparam("student_id")))


def rules_of(conn: Connection, exam_code: str) -> ExamRules:
    policy_row = _POLICY.run(conn, {"exam_code": exam_code}).first()
    policy = None if policy_row is None else ExamPolicy(bool(policy_row.open_ended), policy_row.max_attempts,
                                                        policy_row.grace_seconds)
    window = _WINDOW.run(conn, {"exam_code": exam_code}).first()
    if window is not None:
        return ExamRules(exam_code, policy, window.opens_at, window.closes_at)
    if policy is not None and policy.open_ended:
        return ExamRules(exam_code, policy, float("-inf"), float("inf"))
    return ExamRules(exam_code, policy, None, None)


def next_slot(conn: Connection, rules: ExamRules, student_id: str) -> int:
    """The slot a new attempt takes, on the caller's transaction; refuses past the limit. The
    insert of that slot (by the caller) is what makes it atomic: a racing start that counted
    the same number fails on the primary key and counts again."""
    taken = _SLOTS_TAKEN.run(conn, {"exam_code": rules.exam_code, "student_id": student_id}).scalar_one()
    if taken >= rules.max_attempts:
        limit = rules.max_attempts
        raise ExamRuleRefused(f"exam {rules.exam_code} allows {limit} attempt{'s' if limit != 1 else ''} per student; "
                              "this student has used them")
    return int(taken) + 1


class RuleCache:
    """A node's view of each exam's rules, re-read from the ledger after ``ttl`` seconds: the
    answer path pays no query per answer, and a window changed through the admin API is seen
    within ``ttl`` (the close itself is compared with the clock on every request)."""

    def __init__(self, engine: Engine, ttl: float = 1.0) -> None:
        self._engine, self._ttl = engine, ttl
        self._rules: dict[str, tuple[float, ExamRules]] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Re-read on next use: this node just changed a window (PUT /admin/exams/{code}/window)."""
        with self._lock:
            self._rules.clear()

    def get(self, exam_code: str) -> ExamRules:
        now = time.monotonic()
        cached = self._rules.get(exam_code)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        with self._engine.connect() as conn:
            rules = rules_of(conn, exam_code)
        with self._lock:
            self._rules[exam_code] = (now, rules)
        return rules
