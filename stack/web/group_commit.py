"""Group commit: answers that arrive together on a node share one ledger transaction.

``GroupCommitAnswers`` is an ``AnswerSink`` beside ``DurableAnswers`` (stack/web/answer_sink.py).
A request thread hands its revision to the node's one committer thread and waits; the committer
takes every revision waiting at that moment, logs each in its own savepoint of one write
transaction (a refused revision rolls back alone), commits once, and only then wakes each
request with its own receipt or refusal. So a 2xx is still sent only after the commit that
holds its own answer, and a crash between batching and commit loses only answers nobody was
told were saved. What it saves: one write-lock turn and one fsync per batch instead of per
answer, and the lock is held by one thread, not by whichever request thread got it.

No batch waits for company: the committer takes what is there when it is free, so at a low rate
a batch is one answer, and batches grow only while the previous commit is running.

``AckAtEnqueue`` is its negative control: the same committer, but the receipt is handed out when
the revision is queued, before anything is checked or committed (``PROCTOR_ANSWER_SINK=ack-at-enqueue``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from stack.ledger.revisions import (AnswerRejected, RevisionPolicy, RevisionReceipt, revision_row,
                                    submit_in)

__all__ = ["AckAtEnqueue", "GroupCommitAnswers", "MAX_BATCH"]

log = logging.getLogger(__name__)

MAX_BATCH = 64
"""Revisions per transaction at most: a node serves at most PROCTOR_MAX_IN_FLIGHT (64) requests."""

_RACE_RETRIES = 3


@dataclass
class _Pending:
    row: dict
    done: threading.Event = field(default_factory=threading.Event)
    receipt: RevisionReceipt | None = None
    error: BaseException | None = None


class GroupCommitAnswers:
    """Commit before the reply, sharing the commit with the answers that arrived meanwhile."""

    def __init__(self, engine: Engine, node: str, policy: RevisionPolicy | None = None,
                 max_batch: int = MAX_BATCH) -> None:
        self.engine, self.node, self.max_batch = engine, node, max_batch
        self.policy = RevisionPolicy() if policy is None else policy
        self.batches = 0  # committed transactions, for tests and the benchmark's note
        self.committing = 0  # answers in the transaction under way (a test waits for the rest to queue)
        self._queue: deque[_Pending] = deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"group-commit-{node}", daemon=True)
        self._thread.start()

    def accept(self, attempt_id: str, question: str, revision: int, content: str, key: str) -> RevisionReceipt:
        pending = self._enqueue(revision_row(attempt_id, question, revision, content, key, self.node))
        pending.done.wait()
        if pending.error is not None:
            raise pending.error
        assert pending.receipt is not None
        return pending.receipt

    def close(self) -> None:
        """Commit what is queued, then stop the committer."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        self._thread.join(timeout=10)

    def _enqueue(self, row: dict) -> _Pending:
        pending = _Pending(row)
        with self._ready:
            if self._stopping:
                raise RuntimeError("the node is shutting down; the answer was not taken")
            self._queue.append(pending)
            self._ready.notify()
        return pending

    def _take_batch(self) -> list[_Pending]:
        with self._ready:
            self._ready.wait_for(lambda: self._queue or self._stopping)
            return [self._queue.popleft() for _ in range(min(len(self._queue), self.max_batch))]

    def _run(self) -> None:
        while True:
            batch = self._take_batch()
            if not batch:
                return  # stopping, and nothing left
            self.committing = len(batch)
            self._commit(batch)
            self.committing = 0

    def _commit(self, batch: list[_Pending]) -> None:
        try:
            with self.engine.begin() as conn:
                for pending in batch:
                    self._submit_one(conn, pending)
            self.batches += 1
        except Exception as exc:  # noqa: BLE001 - the commit failed: nothing of the batch is durable, each request hears it
            for pending in batch:
                pending.receipt, pending.error = None, exc
        finally:
            for pending in batch:
                pending.done.set()

    def _submit_one(self, conn: Connection, pending: _Pending) -> None:
        """One revision in its own savepoint: a refusal or a lost insert race undoes only it."""
        for _ in range(_RACE_RETRIES):
            savepoint = conn.begin_nested()
            try:
                pending.receipt = submit_in(conn, self.policy, pending.row)
                savepoint.commit()
                return
            except AnswerRejected as refused:
                savepoint.rollback()
                pending.error = refused
                return
            except IntegrityError:
                savepoint.rollback()  # PostgreSQL: a writer of another node committed first; read again
        pending.error = RuntimeError(f"answer {pending.row['attempt_id']}/{pending.row['question']}: "
                                     "kept losing insert races")


class AckAtEnqueue(GroupCommitAnswers):
    """Negative control: a receipt as soon as the revision is queued; the commit comes later, if ever."""

    def __init__(self, engine: Engine, node: str, policy: RevisionPolicy | None = None,
                 max_batch: int = MAX_BATCH) -> None:
        super().__init__(engine, node, policy, max_batch)
        log.warning("answers are acknowledged when queued, before their group commit: "
                    "a negative control, never a real configuration")

    def accept(self, attempt_id: str, question: str, revision: int, content: str, key: str) -> RevisionReceipt:
        self._enqueue(revision_row(attempt_id, question, revision, content, key, self.node))
        # nothing has been checked yet, so it claims the revision is current, like write-behind
        return RevisionReceipt(uuid.uuid4().hex, attempt_id, question, revision, revision, replayed=False)
