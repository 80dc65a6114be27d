"""The answer key and the score: the one place either is computed.

The key is secret: drawn per exam from ``secrets`` when the exam is provisioned
(``provision_key``, from ``init_ledger``) and kept in the ledger's ``answer_keys`` table.
It used to be ``sha256("<exam>:qN")``, which anyone holding the source could print (a key
computed offline scored 20/20). Only scoring and the admin ``exams`` export read it, so a
checker still re-scores every attempt from the exports alone. No RQ or HTTP import here:
the export path of a web node must not pull them in.
"""

from __future__ import annotations

import secrets
from typing import Mapping

from sqlalchemy import Connection, select

from stack.ledger.schema import answer_keys

__all__ = ["OPTIONS", "draw_key", "exam_key", "provision_key", "score"]

OPTIONS = "ABCD"
"""Every question is multiple choice."""


def draw_key(question_count: int) -> dict[str, str]:
    """A fresh key, ``q1`` … ``qN``, each option from the OS's CSPRNG."""
    return {f"q{n}": secrets.choice(OPTIONS) for n in range(1, question_count + 1)}


def provision_key(conn: Connection, exam_code: str, question_count: int) -> None:
    """Store a drawn key for the exam unless it has one. Two processes provisioning at once:
    the primary key refuses the second key (an IntegrityError the caller's transaction ends
    with, stack.ledger.engine.init_ledger), so the first key committed is the key."""
    if conn.execute(select(answer_keys.c.question).where(answer_keys.c.exam_code == exam_code).limit(1)).first():
        return
    rows = [{"exam_code": exam_code, "question": q, "option": o} for q, o in draw_key(question_count).items()]
    conn.execute(answer_keys.insert(), rows)


def exam_key(conn: Connection, exam_code: str) -> dict[str, str]:
    """{question: option} of the exam ({} for an exam without a key: nothing scores)."""
    rows = conn.execute(select(answer_keys.c.question, answer_keys.c.option).where(answer_keys.c.exam_code == exam_code))
    return {row.question: row.option for row in rows}


def score(key: Mapping[str, str], contents: Mapping[str, str]) -> int:
    """Answers (question -> content) that match the key, ignoring case and surrounding blanks."""
    return sum(1 for question, content in contents.items() if content.strip().upper() == key.get(question))
