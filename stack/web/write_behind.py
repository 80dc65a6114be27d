"""Write-behind answer acceptance: the anti-pattern, kept only as a negative control.

With ``PROCTOR_ANSWER_WRITE_BEHIND=<seconds>`` a web node replies 201 at once and
commits the answer to the ledger that many seconds later, from memory. The student
holds a receipt for an answer that exists only in one process: kill the node and it
is gone; and a finish that reaches the ledger first makes the late commit a refusal.
The answers checker must report both as lost acknowledged writes.
The default (0) commits before the reply (``stack.web.answer_sink.DurableAnswers``);
``stack.web.app`` picks this sink instead only for the negative control.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Callable

from sqlalchemy import Engine

from stack.ledger.revisions import AnswerRejected, RevisionPolicy, RevisionReceipt, revision_row, submit_revision

__all__ = ["PendingAnswer", "WriteBehind"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingAnswer:
    due: float
    attempt_id: str
    question: str
    revision: int
    content: str
    key: str
    receipt_id: str


class WriteBehind:
    """An ``AnswerSink`` that acknowledges at once and commits ``delay`` seconds later."""

    def __init__(self, engine: Engine, node: str, delay: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine, self.node, self.delay = engine, node, delay
        self.clock = clock  # a seam: tests hold time still, then move it past the delay
        self.handled = 0  # pending answers taken off the queue (committed or dropped)
        self.passes = 0  # completed looks at the queue, so a test can wait for the writer to have looked
        self._pending: deque[PendingAnswer] = deque()
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="write-behind", daemon=True)
        self._thread.start()
        log.warning("answers are acknowledged before they are committed (write-behind %.2fs): "
                    "a negative control, never a real configuration", delay)

    def accept(self, attempt_id: str, question: str, revision: int, content: str, key: str) -> RevisionReceipt:
        # never rejects, and claims the revision is current: nothing has been checked yet
        receipt = RevisionReceipt(uuid.uuid4().hex, attempt_id, question, revision, revision, replayed=False)
        with self._lock:
            self._pending.append(PendingAnswer(self.clock() + self.delay, attempt_id, question, revision, content,
                                               key, receipt.receipt_id))
        return receipt

    def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Block until ``predicate`` (over ``handled`` / ``passes``) holds after a writer pass."""
        with self._progress:
            self._progress.wait_for(predicate)

    def _due(self) -> list[PendingAnswer]:
        now = self.clock()
        with self._lock:
            due = []
            while self._pending and self._pending[0].due <= now:
                due.append(self._pending.popleft())
            return due

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            due = self._due()
            for item in due:
                self._commit(item)
            with self._progress:
                self.handled += len(due)
                self.passes += 1
                self._progress.notify_all()

    def _commit(self, item: PendingAnswer) -> None:
        try:
            submit_revision(self.engine, RevisionPolicy(), revision_row(item.attempt_id, item.question, item.revision,
                                                                      item.content, item.key, self.node))
        except AnswerRejected as exc:  # e.g. finished meanwhile: the acknowledged answer is dropped
            log.warning("write-behind dropped %s/%s: %s", item.attempt_id, item.question, exc.reason)
        except Exception:
            log.exception("write-behind failed for %s/%s", item.attempt_id, item.question)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
