"""Answer acceptance: the one write a student must never lose.

An answer is acknowledged only after its row is committed. The unique constraint
(attempt, question) is the arbiter between concurrent submits: the loser of a race
gets an IntegrityError, rolls back, and re-reads to learn whether it was a replay of
the same request (same key, same body) or a conflict.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import IntegrityError

from stack.ledger.attempts import get_attempt
from stack.ledger.schema import answers

__all__ = ["AnswerRejected", "Receipt", "body_digest", "submit_answer"]

_RACE_RETRIES = 3


class AnswerRejected(Exception):
    """The answer was not (and will never be) accepted under this key; ``reason`` says why."""

    UNKNOWN_ATTEMPT = "unknown_attempt"
    FINISHED = "attempt_finished"
    KEY_OTHER_BODY = "key_reused_with_other_body"
    KEY_OTHER_QUESTION = "key_reused_for_other_question"
    QUESTION_ANSWERED = "question_already_answered"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Receipt:
    receipt_id: str
    attempt_id: str
    question: str
    replayed: bool


def body_digest(content: str) -> str:
    """What "the same body" means for a replay: the same content, byte for byte."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def _classify(existing: object, key: str, digest: str) -> Receipt:
    m = existing._mapping  # type: ignore[attr-defined]
    if m["idempotency_key"] != key:
        raise AnswerRejected(AnswerRejected.QUESTION_ANSWERED)
    if m["body_sha256"] != digest:
        raise AnswerRejected(AnswerRejected.KEY_OTHER_BODY)
    return Receipt(m["receipt_id"], m["attempt_id"], m["question"], replayed=True)


def _submit_in(conn: Connection, attempt_id: str, question: str, content: str, key: str, node: str, now: float) -> Receipt:
    attempt = get_attempt(conn, attempt_id, for_update=True)
    if attempt is None:
        raise AnswerRejected(AnswerRejected.UNKNOWN_ATTEMPT)
    digest = body_digest(content)
    existing = conn.execute(
        select(answers).where(answers.c.attempt_id == attempt_id, answers.c.question == question)
    ).first()
    if existing is not None:
        # Checked before "finished" on purpose: a replay of an accepted answer is told it
        # was accepted, even after the finish, because it was.
        return _classify(existing, key, digest)
    if attempt.status != "open":
        raise AnswerRejected(AnswerRejected.FINISHED)
    elsewhere = conn.execute(
        select(answers.c.question).where(answers.c.attempt_id == attempt_id, answers.c.idempotency_key == key)
    ).first()
    if elsewhere is not None:
        raise AnswerRejected(AnswerRejected.KEY_OTHER_QUESTION)
    receipt = Receipt(uuid.uuid4().hex, attempt_id, question, replayed=False)
    conn.execute(
        answers.insert().values(
            receipt_id=receipt.receipt_id, attempt_id=attempt_id, question=question, content=content,
            idempotency_key=key, body_sha256=digest, node=node, created_at=now,
        )
    )
    return receipt


def submit_answer(
    engine: Engine, attempt_id: str, question: str, content: str, key: str, node: str, now: float | None = None
) -> Receipt:
    """Commit the answer (or recognise its replay) before returning; raises AnswerRejected."""
    now = time.time() if now is None else now
    for _ in range(_RACE_RETRIES):
        try:
            with engine.begin() as conn:
                return _submit_in(conn, attempt_id, question, content, key, node, now)
        except IntegrityError:
            continue  # a concurrent submit committed first; the next pass reads its row
    raise RuntimeError(f"answer {attempt_id}/{question}: kept losing insert races")
