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

from stack.ledger.revisions import RevisionPolicy, RevisionReceipt, revision_row, submit_revision

__all__ = ["AnswerSink", "DurableAnswers"]


class AnswerSink(Protocol):
    def accept(self, attempt_id: str, question: str, revision: int, content: str, key: str) -> RevisionReceipt:
        """A receipt for the answer revision, or ``AnswerRejected`` when it will never be accepted."""
        ...

    def close(self) -> None: ...


class DurableAnswers:
    """Commit before the reply: the receipt exists only once the ledger has the answer."""

    def __init__(self, engine: Engine, node: str, policy: RevisionPolicy | None = None) -> None:
        self.engine, self.node = engine, node
        self.policy = RevisionPolicy() if policy is None else policy  # the highest revision is current

    def accept(self, attempt_id: str, question: str, revision: int, content: str, key: str) -> RevisionReceipt:
        return submit_revision(self.engine, self.policy, revision_row(attempt_id, question, revision, content, key, self.node))

    def close(self) -> None:
        """Nothing is held in memory, so nothing to flush."""
