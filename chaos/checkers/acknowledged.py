"""What the history says the clients were told: facts several checkers judge the ledgers by.

The ledgers are the stack's word; the history is the client's. An attempt whose
finish was acknowledged (an ``ok`` finish) is owed its outcomes even if its row
vanished from the ledger, and a student id is the one the client signed in with,
not whatever the ledger now holds.
"""

from __future__ import annotations

from typing import Sequence

from chaos.history import Op, client_ops, pair_ops

__all__ = ["acknowledged_finishes", "attempt_students"]


def acknowledged_finishes(history: Sequence[Op]) -> tuple[dict[str, int], int]:
    """attempt_id -> index of its first ``ok`` finish, and how many finish invokes were malformed
    (no attempt_id: a finish nobody can be held to is a history the checkers cannot judge)."""
    finished: dict[str, int] = {}
    malformed = 0
    for invoked, done in pair_ops(history):
        if invoked.f != "finish":
            continue
        attempt_id = invoked.value.get("attempt_id") if isinstance(invoked.value, dict) else None
        if not attempt_id:
            malformed += 1
            continue
        if done is not None and done.type == "ok":
            finished.setdefault(str(attempt_id), done.index)
    return finished, malformed


def attempt_students(history: Sequence[Op]) -> dict[str, str]:
    """attempt_id -> student_id the client started it for.

    The workload starts an attempt on the process that signed the student in, and
    the first call after an ``ok`` start, on that same process, names the new
    attempt (chaos/load/exam.py): that pair links the two ids.
    """
    started_for: dict[int | str, str] = {}
    students: dict[str, str] = {}
    for op in client_ops(history):
        value = op.value if isinstance(op.value, dict) else {}
        if op.f == "start" and op.type == "ok" and value.get("student_id"):
            started_for[op.process] = str(value["student_id"])
        elif op.type == "invoke" and op.process in started_for:
            student = started_for.pop(op.process)
            if value.get("attempt_id"):
                students.setdefault(str(value["attempt_id"]), student)
    return students
