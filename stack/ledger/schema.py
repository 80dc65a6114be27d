"""The durable ledger: the authoritative record of what the stack accepted.

Valkey holds queues, never truth. Every answer is committed here before the
reply, every job that must happen is an ``outbox`` row written in the same
transaction that finishes the attempt, and every outcome is a row here.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "metadata",
    "students",
    "exams",
    "attempts",
    "answers",
    "answer_revisions",
    "outbox",
    "IX_OUTBOX_DONE_AT",
    "outcomes",
    "audit_log",
    "exam_windows",
    "answer_keys",
    "exam_policies",
    "attempt_slots",
    "roster",
    "ai_reservations",
    "lane_state",
    "alerts",
    "OUTBOX_KINDS",
    "OUTCOME_READY_INDEX",
    "OUTBOX_STATUSES",
    "OUTCOME_STATUSES",
]

metadata = MetaData()

OUTBOX_KINDS = ("merit", "narrative", "sms")
"""One outbox row of each kind per finished attempt."""

OUTBOX_STATUSES = ("pending", "enqueued", "done", "failed")
"""pending: not yet in Valkey; enqueued: a job id is in Valkey; done: outcome written;
failed: gave up after max attempts -> outcome 'failed_for_review' (retained, reviewable)."""

OUTCOME_STATUSES = ("ready", "failed_for_review")

# Times are UNIX epoch seconds (float) so SQLite and PostgreSQL agree and exports are plain JSON.

students = Table(
    "students",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("created_at", Float, nullable=False),
)

roster = Table(
    "roster",
    metadata,
    # Who may sit which exam, and the keyed hash (HMAC-SHA256, hex) of their access code.
    # The code itself is never stored: it exists only in the run folder's roster.json (0600).
    Column("exam_code", String(64), ForeignKey("exams.code"), primary_key=True),
    Column("student_id", String(64), ForeignKey("students.id"), primary_key=True),
    Column("code_hmac", String(64), nullable=False),
)

exams = Table(
    "exams",
    metadata,
    Column("code", String(64), primary_key=True),
    Column("question_count", Integer, nullable=False),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("student_id", String(64), ForeignKey("students.id"), nullable=False),
    Column("exam_code", String(64), ForeignKey("exams.code"), nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("status", String(16), nullable=False),  # open | finished
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
    # Answers matching the key, stored by the finish transaction (answers are closed from then
    # on), so ranking reads one row per attempt instead of re-scoring every answer of the exam.
    # NULL while open, and for attempts finished by a release before this column.
    Column("score", Integer, nullable=True),
    UniqueConstraint("student_id", "idempotency_key", name="uq_attempt_start_key"),
)
Index("ix_attempts_rank", attempts.c.exam_code, attempts.c.status, attempts.c.score)

answers = Table(
    "answers",
    metadata,
    Column("receipt_id", String(64), primary_key=True),
    Column("attempt_id", String(64), ForeignKey("attempts.id"), nullable=False),
    Column("question", String(32), nullable=False),
    Column("content", Text, nullable=False),
    Column("idempotency_key", String(255), nullable=False),
    Column("body_sha256", String(64), nullable=False),
    Column("node", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    # the revision this row holds: the current one, highest accepted (stack/ledger/revisions.py)
    Column("revision", Integer, nullable=False, server_default="1"),
    UniqueConstraint("attempt_id", "question", name="uq_answer_per_question"),
)

answer_revisions = Table(
    "answer_revisions",
    metadata,
    # Append-only: one row per accepted revision, never updated or deleted. ``answers`` holds
    # the current value (the highest revision); this is the log every receipt can be found in.
    Column("receipt_id", String(64), primary_key=True),
    Column("attempt_id", String(64), ForeignKey("attempts.id"), nullable=False),
    Column("question", String(32), nullable=False),
    Column("revision", Integer, nullable=False),
    Column("content", Text, nullable=False),
    Column("idempotency_key", String(255), nullable=False),
    Column("body_sha256", String(64), nullable=False),
    Column("node", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("superseded", Integer, nullable=False),  # 1: a higher revision was current when this one arrived
    UniqueConstraint("attempt_id", "question", "revision", name="uq_revision_per_question"),
    UniqueConstraint("attempt_id", "idempotency_key", name="uq_revision_key"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("operation_id", String(128), primary_key=True),  # "<kind>-<attempt_id>"
    Column("attempt_id", String(64), ForeignKey("attempts.id"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),  # enqueues so far
    Column("job_id", String(160), nullable=True),  # "<operation_id>-<attempts>"
    Column("last_error", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("enqueued_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
    Column("done_at", Float, nullable=True),
    Column("not_before", Float, nullable=True),  # a waiting row (limiter, backoff) goes to a lane only then
    Column("replays", Integer, nullable=False, default=0),  # audited replays from the review queue
    # enqueues a job ended by handing the row back to wait (limiter, backoff, paused lane): those
    # runs were not lost, so the relay's max_job_attempts counts attempts - deferrals
    Column("deferrals", Integer, nullable=False, default=0),
    UniqueConstraint("attempt_id", "kind", name="uq_outbox_per_kind"),
)
Index("ix_outbox_status", outbox.c.status)
# The lane-latency scrape reads only rows done since its previous high-water mark (stack/web/lane_latency.py);
# with status first, SQLite's planner takes it for ``status = 'done' AND done_at >= ?`` (it picked
# ix_outbox_status, every done row, when this index was on done_at alone).
IX_OUTBOX_DONE_AT = Index("ix_outbox_done_at", outbox.c.status, outbox.c.done_at)

outcomes = Table(
    "outcomes",
    metadata,
    # Write-once is the database's rule (uq_outcome_ready below), not only the job's: a
    # check-then-insert holds on SQLite's BEGIN IMMEDIATE but not under PostgreSQL's read
    # committed, where a re-enqueued job racing its paused original would write twice.
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("operation_id", String(128), nullable=False),
    Column("attempt_id", String(64), ForeignKey("attempts.id"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("status", String(24), nullable=False),
    Column("payload", Text, nullable=False),  # JSON
    Column("created_at", Float, nullable=False),
)
Index("ix_outcomes_operation", outcomes.c.operation_id)
OUTCOME_READY_INDEX = "uq_outcome_ready"
Index(
    OUTCOME_READY_INDEX,
    outcomes.c.operation_id,
    unique=True,
    sqlite_where=outcomes.c.status == "ready",
    postgresql_where=outcomes.c.status == "ready",
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("actor", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("detail", Text, nullable=False),  # JSON
)

ai_reservations = Table(
    # Internal allowance reserved before each provider call (issue #11, docs/ai-lane.md):
    # pending until the provider's answer or a look-up settles it as completed or released.
    "ai_reservations",
    metadata,
    Column("call_id", String(160), primary_key=True),  # "<operation_id>#<n>"
    Column("operation_id", String(128), nullable=False),
    Column("state", String(16), nullable=False),  # pending | completed | released
    Column("cost", Float, nullable=False),
    Column("reserved_at", Float, nullable=False),
    Column("settled_at", Float, nullable=True),
    Column("note", Text, nullable=True),
)
Index("ix_ai_reservations_operation", ai_reservations.c.operation_id)

lane_state = Table(
    "lane_state",  # a paused lane makes no provider calls until an operator resumes it
    metadata,
    Column("lane", String(16), primary_key=True),
    Column("paused", Integer, nullable=False),
    Column("reason", Text, nullable=True),
    Column("since", Float, nullable=False),
)

alerts = Table(
    "alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("lane", String(16), nullable=False),
    Column("kind", String(32), nullable=False),  # credit_exhausted | key_revoked | ...
    Column("detail", Text, nullable=False),  # JSON
)

exam_windows = Table(
    "exam_windows",
    metadata,
    # The exam lock (stack/ledger/exam_lock.py): while opens_at <= now < closes_at, scaling
    # below min_web web nodes or below min_workers[lane] workers is refused unless forced.
    Column("exam_code", String(64), ForeignKey("exams.code"), primary_key=True),
    Column("opens_at", Float, nullable=False),
    Column("closes_at", Float, nullable=False),
    Column("min_web", Integer, nullable=False),
    Column("min_workers", Text, nullable=False),  # JSON {lane: minimum}
    Column("updated_at", Float, nullable=False),
)

answer_keys = Table(
    "answer_keys",
    metadata,
    # The secret answer key (stack/ledger/grading.py): one option per question, drawn from
    # ``secrets`` when the exam is provisioned. Read by scoring and by the admin export only.
    Column("exam_code", String(64), ForeignKey("exams.code"), primary_key=True),
    Column("question", String(32), primary_key=True),
    Column("option", String(1), nullable=False),
)

exam_policies = Table(
    "exam_policies",
    metadata,
    # The exam's rules, stored at provisioning (stack/ledger/exam_rules.py): every exam has a
    # window (a row in exam_windows) or is explicitly open-ended until one is set.
    Column("exam_code", String(64), ForeignKey("exams.code"), primary_key=True),
    Column("open_ended", Integer, nullable=False),  # 1: no window was given at provisioning
    Column("max_attempts", Integer, nullable=False),  # attempts per student
    Column("grace_seconds", Float, nullable=False),  # after the close, an open attempt may still finish
)

attempt_slots = Table(
    "attempt_slots",
    metadata,
    # The attempts-per-student limit as a key: slot n of (exam, student) exists at most once, so
    # two racing starts cannot both take the last slot, on SQLite or under PostgreSQL's read committed.
    Column("exam_code", String(64), ForeignKey("exams.code"), primary_key=True),
    Column("student_id", String(64), ForeignKey("students.id"), primary_key=True),
    Column("slot", Integer, primary_key=True),
    Column("attempt_id", String(64), ForeignKey("attempts.id"), nullable=False),
)
