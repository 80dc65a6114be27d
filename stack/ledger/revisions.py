"""Answers as revisions: an append-only log, and the highest accepted revision is current.

A client autosaves: every PUT of a question carries a revision number that only grows on
the client (docs/architecture.md, "Answer revisions"). Over a flaky network an older
revision can arrive after a newer one. The arbiter is the revision number, never the
arrival order:

- every accepted revision is a row of ``answer_revisions`` with its receipt, never
  updated or deleted;
- ``answers`` holds the current value of each question: the highest revision accepted;
- a revision lower than the current one is logged and acknowledged as ``superseded``,
  and never becomes current;
- same Idempotency-Key and same body (content and revision) is a replay; the key with
  another body, or a revision number already taken under another key, is refused;
- a finished attempt takes no new revision: the current values are frozen, and merit
  scores them.

The order rule is a ``RevisionPolicy`` chosen once at start-up (``PROCTOR_ANSWER_REVISIONS``).
Two policies exist only as negative controls the checkers must catch: ``last-arrival``
(whatever arrives last becomes current: the lost update) and ``compacting`` (the log
keeps only the current revision: acknowledged revisions vanish from it).
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, select, update
from sqlalchemy.exc import IntegrityError

from stack.ledger.attempts import get_attempt
from stack.ledger.schema import answer_revisions, answers

__all__ = [
    "AnswerRejected",
    "CompactingLog",
    "LastArrivalWins",
    "REVISION_POLICIES",
    "REVISION_TAKEN",
    "RevisionPolicy",
    "RevisionReceipt",
    "body_digest",
    "current_answers",
    "revision_policy",
    "revision_row",
    "submit_in",
    "submit_revision",
]

log = logging.getLogger(__name__)

REVISION_TAKEN = "revision_already_written"
"""AnswerRejected reason: this revision number of the question was accepted under another key."""

_RACE_RETRIES = 3


class AnswerRejected(Exception):
    """The revision was not (and will never be) accepted under this key; ``reason`` says why."""

    UNKNOWN_ATTEMPT = "unknown_attempt"
    FINISHED = "attempt_finished"
    KEY_OTHER_BODY = "key_reused_with_other_body"
    KEY_OTHER_QUESTION = "key_reused_for_other_question"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def body_digest(content: str) -> str:
    """What "the same body" means for a replay: the same content, byte for byte."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


class RevisionPolicy:
    """The correct rule: the highest revision is current, and the log keeps every row."""

    name = "highest"

    def becomes_current(self, current: int | None, incoming: int) -> bool:
        return current is None or incoming > current

    def after_current(self, conn: Connection, attempt_id: str, question: str, revision: int) -> None:
        """Runs after ``revision`` became current; the correct log needs nothing more."""


class LastArrivalWins(RevisionPolicy):
    """Negative control: the revision that arrives last is current, whatever its number."""

    name = "last-arrival"

    def becomes_current(self, current: int | None, incoming: int) -> bool:
        return True


class CompactingLog(RevisionPolicy):
    """Negative control: "tidies" the log down to the current revision, deleting the older
    rows, so revisions the students were told were saved disappear from the log."""

    name = "compacting"

    def after_current(self, conn: Connection, attempt_id: str, question: str, revision: int) -> None:
        conn.execute(delete(answer_revisions).where(
            answer_revisions.c.attempt_id == attempt_id, answer_revisions.c.question == question,
            answer_revisions.c.revision != revision,
        ))


REVISION_POLICIES: dict[str, RevisionPolicy] = {
    policy.name: policy for policy in (RevisionPolicy(), LastArrivalWins(), CompactingLog())
}


def revision_policy(rule: str) -> RevisionPolicy:
    """The policy named by PROCTOR_ANSWER_REVISIONS (validated by stack.config)."""
    policy = REVISION_POLICIES[rule]
    if type(policy) is not RevisionPolicy:
        log.warning("answer revisions follow %r: a negative control, never a real configuration", rule)
    return policy


@dataclass(frozen=True)
class RevisionReceipt:
    receipt_id: str
    attempt_id: str
    question: str
    revision: int
    current_revision: int
    """The question's current revision after this request."""
    replayed: bool

    @property
    def superseded(self) -> bool:
        """Logged and acknowledged, but a higher revision is the answer."""
        return self.revision != self.current_revision

    def as_reply(self) -> dict:
        return {
            "receipt_id": self.receipt_id, "attempt_id": self.attempt_id, "question": self.question,
            "revision": self.revision, "current_revision": self.current_revision,
            "superseded": self.superseded, "replayed": self.replayed,
        }


def _current_revision(conn: Connection, attempt_id: str, question: str) -> int | None:
    return conn.execute(select(answers.c.revision).where(
        answers.c.attempt_id == attempt_id, answers.c.question == question,
    )).scalar()


def _replay(conn: Connection, attempt_id: str, question: str, revision: int, digest: str, key: str) -> RevisionReceipt | None:
    """The receipt of an earlier request under ``key``, or None if the key is new."""
    row = conn.execute(select(answer_revisions).where(
        answer_revisions.c.attempt_id == attempt_id, answer_revisions.c.idempotency_key == key,
    )).first()
    if row is None:
        return None
    if row.question != question:
        raise AnswerRejected(AnswerRejected.KEY_OTHER_QUESTION)
    if row.body_sha256 != digest or row.revision != revision:
        raise AnswerRejected(AnswerRejected.KEY_OTHER_BODY)
    current = _current_revision(conn, attempt_id, question)
    return RevisionReceipt(row.receipt_id, attempt_id, question, revision, current or revision, replayed=True)


def _make_current(conn: Connection, row: dict, exists: bool) -> None:
    values = {name: row[name] for name in
              ("receipt_id", "content", "idempotency_key", "body_sha256", "node", "created_at", "revision")}
    if exists:
        conn.execute(update(answers).where(
            answers.c.attempt_id == row["attempt_id"], answers.c.question == row["question"],
        ).values(**values))
    else:
        conn.execute(answers.insert().values(attempt_id=row["attempt_id"], question=row["question"], **values))


def _accept(conn: Connection, policy: RevisionPolicy, row: dict) -> RevisionReceipt:
    attempt_id, question, revision = row["attempt_id"], row["question"], row["revision"]
    taken = conn.execute(select(answer_revisions.c.receipt_id).where(
        answer_revisions.c.attempt_id == attempt_id, answer_revisions.c.question == question,
        answer_revisions.c.revision == revision,
    )).first()
    if taken is not None:
        raise AnswerRejected(REVISION_TAKEN)
    current = _current_revision(conn, attempt_id, question)
    wins = policy.becomes_current(current, revision)
    conn.execute(answer_revisions.insert().values(**row, superseded=int(not wins)))
    if wins:
        _make_current(conn, row, exists=current is not None)
        policy.after_current(conn, attempt_id, question, revision)
    now_current = revision if wins else current
    return RevisionReceipt(row["receipt_id"], attempt_id, question, revision, now_current, replayed=False)


def submit_in(conn: Connection, policy: RevisionPolicy, row: dict) -> RevisionReceipt:
    """Log the revision ``row`` (from ``revision_row``) inside the caller's write transaction;
    raises AnswerRejected before it writes anything. Nothing is durable until the caller commits."""
    attempt = get_attempt(conn, row["attempt_id"], for_update=True)  # serialises writers of one attempt
    if attempt is None:
        raise AnswerRejected(AnswerRejected.UNKNOWN_ATTEMPT)
    # A replay is told what happened to its revision, even after the finish: it was accepted.
    replay = _replay(conn, row["attempt_id"], row["question"], row["revision"], row["body_sha256"], row["idempotency_key"])
    if replay is not None:
        return replay
    if attempt.status != "open":
        raise AnswerRejected(AnswerRejected.FINISHED)
    return _accept(conn, policy, row)


def revision_row(attempt_id: str, question: str, revision: int, content: str, key: str, node: str,
                 now: float | None = None) -> dict:
    """The ``answer_revisions`` row a request would add, with a fresh receipt id."""
    return {
        "receipt_id": uuid.uuid4().hex, "attempt_id": attempt_id, "question": question, "revision": revision,
        "content": content, "idempotency_key": key, "body_sha256": body_digest(content), "node": node,
        "created_at": time.time() if now is None else now,
    }


def submit_revision(engine: Engine, policy: RevisionPolicy, row: dict) -> RevisionReceipt:
    """Log the revision ``row`` (from ``revision_row``), or recognise its replay, in a transaction of
    its own, committed before returning; raises AnswerRejected."""
    for _ in range(_RACE_RETRIES):
        try:
            with engine.begin() as conn:
                return submit_in(conn, policy, row)
        except IntegrityError:
            continue  # a concurrent writer committed first; the next pass reads its row
    raise RuntimeError(f"answer {row['attempt_id']}/{row['question']} revision {row['revision']}: kept losing insert races")


def current_answers(conn: Connection, attempt_id: str) -> list[dict]:
    """The current revision of every answered question of an attempt, by question."""
    query = select(answers.c.question, answers.c.revision, answers.c.content, answers.c.receipt_id).where(
        answers.c.attempt_id == attempt_id).order_by(answers.c.question)
    return [dict(r._mapping) for r in conn.execute(query)]
