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

from typing import Any

from sqlalchemy import Connection, Engine, Row, and_, bindparam, delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from stack.ledger.prepared import Prepared
from stack.ledger.schema import answer_revisions, answers, attempts

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


# The answer transaction in four statements for a new answer (it was six, plus the ownership
# read): the attempt with the question's current revision, every earlier revision this request
# could collide with (its key, or its question and revision under another key), the log row,
# and the current value. Each is compiled once (stack/ledger/prepared.py).
_ATTEMPT_AND_CURRENT = Prepared(
    select(attempts.c.status, select(answers.c.revision).where(
        answers.c.attempt_id == bindparam("attempt_id"), answers.c.question == bindparam("question"),
    ).scalar_subquery().label("current_revision"))
    .where(attempts.c.id == bindparam("attempt_id"))
    # serialises writers of one attempt on PostgreSQL (answers against finish); SQLite already
    # holds the write lock from BEGIN IMMEDIATE and compiles no FOR UPDATE
    .with_for_update(of=attempts)
)
_COLLIDING_REVISIONS = Prepared(
    select(answer_revisions.c.receipt_id, answer_revisions.c.question, answer_revisions.c.revision,
           answer_revisions.c.body_sha256, answer_revisions.c.idempotency_key)
    .where(answer_revisions.c.attempt_id == bindparam("attempt_id"),
           or_(answer_revisions.c.idempotency_key == bindparam("idempotency_key"),
               and_(answer_revisions.c.question == bindparam("question"),
                    answer_revisions.c.revision == bindparam("revision"))))
)
_LOG_REVISION = Prepared(answer_revisions.insert().values(
    {column.name: bindparam(column.name) for column in answer_revisions.c}))
_CURRENT_VALUES = ("receipt_id", "content", "idempotency_key", "body_sha256", "node", "created_at", "revision")
_INSERT_CURRENT = Prepared(answers.insert().values(
    {name: bindparam(name) for name in ("attempt_id", "question", *_CURRENT_VALUES)}))
_UPDATE_CURRENT = Prepared(
    update(answers).where(answers.c.attempt_id == bindparam("attempt_id"), answers.c.question == bindparam("question"))
    .values({name: bindparam(f"new_{name}") for name in _CURRENT_VALUES})  # SET names must differ from columns
)


def _replay(earlier: list[Row[Any]], row: dict, current: int | None) -> RevisionReceipt | None:
    """The receipt of an earlier request under this row's key, or None if the key is new."""
    same_key = next((e for e in earlier if e.idempotency_key == row["idempotency_key"]), None)
    if same_key is None:
        return None
    if same_key.question != row["question"]:
        raise AnswerRejected(AnswerRejected.KEY_OTHER_QUESTION)
    if same_key.body_sha256 != row["body_sha256"] or same_key.revision != row["revision"]:
        raise AnswerRejected(AnswerRejected.KEY_OTHER_BODY)
    return RevisionReceipt(same_key.receipt_id, row["attempt_id"], row["question"], row["revision"],
                           current or row["revision"], replayed=True)


def _make_current(conn: Connection, row: dict, exists: bool) -> None:
    if exists:
        _UPDATE_CURRENT.run(conn, {"attempt_id": row["attempt_id"], "question": row["question"],
                                   **{f"new_{name}": row[name] for name in _CURRENT_VALUES}})
    else:
        _INSERT_CURRENT.run(conn, row)


def _accept(conn: Connection, policy: RevisionPolicy, row: dict, current: int | None) -> RevisionReceipt:
    attempt_id, question, revision = row["attempt_id"], row["question"], row["revision"]
    wins = policy.becomes_current(current, revision)
    _LOG_REVISION.run(conn, {**row, "superseded": int(not wins)})
    if wins:
        _make_current(conn, row, exists=current is not None)
        policy.after_current(conn, attempt_id, question, revision)
    now_current = revision if wins else current
    return RevisionReceipt(row["receipt_id"], attempt_id, question, revision, now_current, replayed=False)


def submit_in(conn: Connection, policy: RevisionPolicy, row: dict) -> RevisionReceipt:
    """Log the revision ``row`` (from ``revision_row``) inside the caller's write transaction;
    raises AnswerRejected before it writes anything. Nothing is durable until the caller commits."""
    attempt = _ATTEMPT_AND_CURRENT.run(conn, row).first()
    if attempt is None:
        raise AnswerRejected(AnswerRejected.UNKNOWN_ATTEMPT)
    earlier = _COLLIDING_REVISIONS.run(conn, row).all()
    # A replay is told what happened to its revision, even after the finish: it was accepted.
    replay = _replay(earlier, row, attempt.current_revision)
    if replay is not None:
        return replay
    if attempt.status != "open":
        raise AnswerRejected(AnswerRejected.FINISHED)
    if earlier:  # not this key's (that was a replay): the question's revision under another key
        raise AnswerRejected(REVISION_TAKEN)
    return _accept(conn, policy, row, attempt.current_revision)


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
