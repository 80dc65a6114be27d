"""The secret answer key in the ledger (``answer_keys``): stored once per exam at
provisioning, read by scoring and the admin ``exams`` export only (stack/ledger/grading.py
draws it and scores with it)."""

from __future__ import annotations

from sqlalchemy import Connection, select

from stack.ledger.grading import draw_key
from stack.ledger.schema import answer_keys

__all__ = ["exam_key", "provision_key"]


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
