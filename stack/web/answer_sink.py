"""Where an accepted answer goes: chosen once per node by ``stack.web.app``.

The answer handler calls ``state.answers.accept(...)`` and never asks which sink it
has. Production nodes get ``DurableAnswers``: the answer is committed to the ledger
before ``accept`` returns, so the reply is a promise the ledger keeps. The only other
sink is ``stack.web.write_behind.WriteBehind``, the acknowledge-before-commit negative
control (``PROCTOR_ANSWER_WRITE_BEHIND``).
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy import Engine

from stack.ledger.answers import Receipt, submit_answer

__all__ = ["AnswerSink", "DurableAnswers"]


class AnswerSink(Protocol):
    def accept(self, attempt_id: str, question: str, content: str, key: str) -> Receipt:
        """A receipt for the answer, or ``AnswerRejected`` when it will never be accepted."""
        ...

    def close(self) -> None: ...


class DurableAnswers:
    """Commit before the reply: the receipt exists only once the ledger has the answer."""

    def __init__(self, engine: Engine, node: str) -> None:
        self.engine, self.node = engine, node

    def accept(self, attempt_id: str, question: str, content: str, key: str) -> Receipt:
        return submit_answer(self.engine, attempt_id, question, content, key, self.node)

    def close(self) -> None:
        """Nothing is held in memory, so nothing to flush."""
