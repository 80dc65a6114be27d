"""The history ops of answer revisions, in one place: how they are written and read back.

Two client ops (docs/checkers.md, "Answer revisions"):

- ``revise``: ``PUT /v1/attempts/{id}/answers/{q}`` with a revision number. The invoke
  value holds ``attempt_id``, ``question``, ``revision``, ``content`` and
  ``idempotency_key`` (and ``deliberate_duplicate`` on the workload's on-purpose resend,
  chaos/history.py); an ``ok`` completion adds ``superseded`` and ``current_revision``
  from the reply and carries the ``receipt_id``.
- ``read_answers``: ``GET /v1/attempts/{id}/answers``. The invoke value holds
  ``attempt_id``; an ``ok`` completion adds ``answers``: ``{question: [revision,
  receipt_id, content]}``, the current answers the read saw.

The checkers (chaos/checkers/revisions.py, final_answers.py, answer_reads.py) read the
ops through :func:`read_revision_ops` only: one pass gives the tries, the reads, the
grouping by question and the reasons a checker cannot judge some of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from chaos.load.client import Call
from chaos.history import Op, pair_ops

__all__ = [
    "AnswerRead",
    "READ_ANSWERS",
    "REVISE",
    "RevisionOps",
    "RevisionWrite",
    "Shown",
    "NOTHING_TO_CHECK",
    "QuestionKey",
    "answer_reads",
    "by_question",
    "read_call",
    "read_revision_ops",
    "revise_call",
    "revision_writes",
]

REVISE = "revise"
READ_ANSWERS = "read_answers"

_WRITE_FIELDS = ("attempt_id", "question", "revision", "content", "idempotency_key")

QuestionKey = tuple[str, str]
"""(attempt_id, question): one register of the final answers."""

NOTHING_TO_CHECK = "no answer revisions in the history: nothing to check"


def revise_call(attempt_id: str, question: str, revision: int, content: str, key: str, auth: dict[str, str]) -> Call:
    value = {"attempt_id": attempt_id, "question": question, "revision": revision, "content": content,
             "idempotency_key": key}
    return Call(REVISE, "PUT", f"/v1/attempts/{attempt_id}/answers/{question}", value,
                json={"content": content, "revision": revision}, headers={**auth, "Idempotency-Key": key},
                observe=_write_verdict)


def read_call(attempt_id: str, auth: dict[str, str]) -> Call:
    return Call(READ_ANSWERS, "GET", f"/v1/attempts/{attempt_id}/answers", {"attempt_id": attempt_id},
                headers=auth, observe=_read_result)


def _write_verdict(body: dict[str, Any]) -> dict[str, Any]:
    return {"superseded": body.get("superseded"), "current_revision": body.get("current_revision")}


def _read_result(body: dict[str, Any]) -> dict[str, Any]:
    rows = body.get("answers") or []
    return {"answers": {r["question"]: [r["revision"], r["receipt_id"], r["content"]] for r in rows}}


@dataclass(frozen=True)
class RevisionWrite:
    """One try of one revision, and how it completed (no completion = info)."""

    attempt_id: str
    question: str
    revision: int
    content: str
    key: str
    outcome: str
    receipt_id: str | None
    superseded: bool | None
    invoked_at: float
    completed_at: float | None

    @property
    def qkey(self) -> QuestionKey:
        return (self.attempt_id, self.question)


@dataclass(frozen=True)
class Shown:
    revision: int
    receipt_id: str | None
    content: str | None


@dataclass(frozen=True)
class AnswerRead:
    """One ok read of an attempt's current answers."""

    attempt_id: str
    invoked_at: float
    completed_at: float
    shown: dict[str, Shown]


def revision_writes(history: Sequence[Op]) -> tuple[list[RevisionWrite], int]:
    """Every ``revise`` try, and how many invokes lacked a field (they cannot be judged)."""
    writes, malformed = [], 0
    for invoked, done in pair_ops(history):
        if invoked.f != REVISE:
            continue
        value = invoked.value if isinstance(invoked.value, dict) else {}
        if any(value.get(name) in (None, "") for name in _WRITE_FIELDS) or not isinstance(value["revision"], int):
            malformed += 1
            continue
        outcome = done.type if done is not None else "info"
        verdict = done.value if done is not None and isinstance(done.value, dict) else {}
        writes.append(RevisionWrite(
            str(value["attempt_id"]), str(value["question"]), value["revision"], str(value["content"]),
            str(value["idempotency_key"]), outcome, done.receipt_id if done is not None else None,
            verdict.get("superseded") if outcome == "ok" else None, invoked.time,
            done.time if done is not None else None,
        ))
    return writes, malformed


def by_question(writes: Sequence[RevisionWrite]) -> dict[QuestionKey, list[RevisionWrite]]:
    """The tries of each (attempt, question), in history order."""
    grouped: dict[QuestionKey, list[RevisionWrite]] = {}
    for write in writes:
        grouped.setdefault(write.qkey, []).append(write)
    return grouped


def answer_reads(history: Sequence[Op]) -> tuple[list[AnswerRead], int]:
    """Every ``ok`` read with what it showed, and how many ok reads were malformed."""
    reads, malformed = [], 0
    for invoked, done in pair_ops(history):
        if invoked.f != READ_ANSWERS or done is None or done.type != "ok":
            continue
        value = done.value if isinstance(done.value, dict) else {}
        try:
            shown = {str(q): Shown(int(v[0]), v[1], v[2]) for q, v in value["answers"].items()}
            reads.append(AnswerRead(str(value["attempt_id"]), invoked.time, done.time, shown))
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            malformed += 1
    return reads, malformed


@dataclass(frozen=True)
class RevisionOps:
    """What the revision checkers read from a history, read once: the ``revise`` tries
    (all and by question), the ``ok`` reads, and how many of each could not be read."""

    writes: list[RevisionWrite]
    tries_of: dict[QuestionKey, list[RevisionWrite]]
    malformed: int
    reads: list[AnswerRead]
    bad_reads: int

    @property
    def nothing_to_check(self) -> bool:
        """No revise invoke at all, readable or not: the checkers have nothing to judge."""
        return not self.writes and not self.malformed

    def unjudged(self, *, with_reads: bool) -> list[str]:
        """The reasons some ops could not be judged (unknown unless a violation is proven);
        ``with_reads`` for a checker that judges the reads too."""
        reasons = [f"{self.malformed} revise invoke(s) lack a field: they cannot be judged"] if self.malformed else []
        if with_reads and self.bad_reads:
            reasons.append(f"{self.bad_reads} ok read(s) of the answers carry no readable result")
        return reasons


def read_revision_ops(history: Sequence[Op]) -> RevisionOps:
    """The revision ops of ``history``, as every revision checker starts from them."""
    writes, malformed = revision_writes(history)
    reads, bad_reads = answer_reads(history)
    return RevisionOps(writes, by_question(writes), malformed, reads, bad_reads)
