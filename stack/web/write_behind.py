"""Write-behind answer acceptance: the anti-pattern, kept only as a negative control.

With ``PROCTOR_ANSWER_WRITE_BEHIND=<seconds>`` a web node replies 201 at once and
commits the answer to the ledger that many seconds later, from memory. The student
holds a receipt for an answer that exists only in one process: kill the node and it
is gone; and a finish that reaches the ledger first makes the late commit a refusal.
The answers checker must report both as lost acknowledged writes.
The default (0) commits before the reply and never uses this module.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass

from sqlalchemy import Engine

from stack.ledger.answers import AnswerRejected, submit_answer

__all__ = ["PendingAnswer", "WriteBehind"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PendingAnswer:
    due: float
    attempt_id: str
    question: str
    content: str
    key: str
    receipt_id: str


class WriteBehind:
    def __init__(self, engine: Engine, node: str, delay: float) -> None:
        self.engine, self.node, self.delay = engine, node, delay
        self._pending: deque[PendingAnswer] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="write-behind", daemon=True)
        self._thread.start()
        log.warning("answers are acknowledged before they are committed (write-behind %.2fs): "
                    "a negative control, never a real configuration", delay)

    def accept(self, attempt_id: str, question: str, content: str, key: str) -> str:
        receipt = uuid.uuid4().hex
        with self._lock:
            self._pending.append(PendingAnswer(time.monotonic() + self.delay, attempt_id, question, content, key, receipt))
        return receipt

    def _due(self) -> list[PendingAnswer]:
        now = time.monotonic()
        with self._lock:
            due = []
            while self._pending and self._pending[0].due <= now:
                due.append(self._pending.popleft())
            return due

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            for item in self._due():
                try:
                    submit_answer(self.engine, item.attempt_id, item.question, item.content, item.key, self.node)
                except AnswerRejected as exc:  # e.g. finished meanwhile: the acknowledged answer is dropped
                    log.warning("write-behind dropped %s/%s: %s", item.attempt_id, item.question, exc.reason)
                except Exception:
                    log.exception("write-behind failed for %s/%s", item.attempt_id, item.question)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
