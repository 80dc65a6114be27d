"""Builders for literal histories and ledgers in checker tests (no I/O, no stack).

Times are small made-up numbers so expected latencies can be written by hand.
"""

from __future__ import annotations

from typing import Any, Iterable

from chaos.history import Op
from chaos.ledgers import OUTBOX_KINDS, Ledgers

__all__ = [
    "HistoryBuilder",
    "answer",
    "answer_row",
    "attempt_row",
    "effect",
    "good_exports",
    "ledgers_from",
    "outbox_rows",
    "outcome_rows",
]


class HistoryBuilder:
    """Appends ops with dense indexes; ``call`` writes an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.clock = 0.0

    def op(self, process: int | str, type: str, f: str, value: Any = None, at: float | None = None, **fields: Any) -> Op:
        self.clock = self.clock + 0.01 if at is None else at
        op = Op(index=len(self.ops), time=round(self.clock, 6), process=process, type=type, f=f, value=value, **fields)
        self.ops.append(op)
        return op

    def call(self, process: int, f: str, value: Any = None, outcome: str | None = "ok", latency: float = 0.01, **fields: Any) -> None:
        """One try; ``outcome=None`` leaves the invoke without completion."""
        invoked = self.op(process, "invoke", f, value)
        if f == "answer" and outcome == "ok" and isinstance(value, dict) and "receipt_id" not in fields:
            fields["receipt_id"] = f"r-{value.get('attempt_id')}-{value.get('question')}"  # as answer_row's default
        if outcome is not None:
            self.op(process, outcome, f, value, at=invoked.time + latency, latency=latency, **fields)

    def fault(self, fault_id: int, kind: str, target: str, start: float, end: float | None) -> None:
        value = {"fault_id": fault_id, "kind": kind, "target": target}
        self.op("nemesis", "info", "fault-start", value, at=start)
        if end is not None:
            self.op("nemesis", "info", "fault-end", value, at=end)

    def sample(self, at: float, pace: float | None = None, **lanes: tuple[int, float]) -> None:
        value = {"lanes": {lane: {"depth": d, "oldest_age": age} for lane, (d, age) in lanes.items()}, "pending_outcomes": 0}
        if pace is not None:  # the machine-pace probe's seconds (chaos/observe/pace.py)
            value["pace"] = pace
        self.op("monitor", "info", "sample", value, at=at)


def answer(attempt_id: str, question: str, content: str, key: str | None = None) -> dict[str, Any]:
    return {"attempt_id": attempt_id, "question": question, "content": content, "idempotency_key": key or f"k-{attempt_id}-{question}"}


def answer_row(attempt_id: str, question: str, content: str, receipt_id: str | None = None) -> dict[str, Any]:
    return {
        "receipt_id": receipt_id or f"r-{attempt_id}-{question}",
        "attempt_id": attempt_id,
        "student_id": "s1",
        "question": question,
        "content": content,
        "idempotency_key": f"k-{attempt_id}-{question}",
        "node": "web_1",
        "created_at": 100.0,
    }


def attempt_row(attempt_id: str, status: str = "finished", finished_at: float | None = 100.0) -> dict[str, Any]:
    return {
        "attempt_id": attempt_id,
        "student_id": "s1",
        "exam_code": "NOVA-101",
        "status": status,
        "started_at": 90.0,
        "finished_at": finished_at if status == "finished" else None,
    }


def outbox_rows(attempt_id: str, status: str = "done", kinds: Iterable[str] = OUTBOX_KINDS, took: float = 0.5) -> list[dict[str, Any]]:
    rows = []
    for kind in kinds:
        done = status == "done"
        rows.append(
            {
                "operation_id": f"{kind}-{attempt_id}",
                "attempt_id": attempt_id,
                "kind": kind,
                "status": status,
                "attempts": 1,
                "job_id": f"{kind}-{attempt_id}-1",
                "last_error": None,
                "created_at": 100.0,
                "enqueued_at": 100.1 if status != "pending" else None,
                "done_at": 100.0 + took if done else None,
            }
        )
    return rows


def outcome_rows(attempt_id: str, status: str = "ready", kinds: Iterable[str] = OUTBOX_KINDS, at: float = 100.5) -> list[dict[str, Any]]:
    return [
        {
            "id": f"o-{kind}-{attempt_id}",
            "operation_id": f"{kind}-{attempt_id}",
            "attempt_id": attempt_id,
            "kind": kind,
            "status": status,
            "payload": {},
            "created_at": at,
        }
        for kind in kinds
    ]


def effect(operation_id: str, effect_id: int = 1) -> dict[str, Any]:
    return {"id": effect_id, "operation_id": operation_id, "idempotency_key": operation_id, "created_at": 100.3, "request": {}}


def good_exports(*attempt_ids: str) -> dict[str, list[dict[str, Any]]]:
    """A final read where every attempt finished and every job ran exactly once."""
    exports: dict[str, list[dict[str, Any]]] = {k: [] for k in ("attempts", "answers", "outbox", "outcomes", "ai_effects", "sms_effects")}
    for n, aid in enumerate(attempt_ids):
        exports["attempts"].append(attempt_row(aid))
        exports["outbox"] += outbox_rows(aid)
        exports["outcomes"] += outcome_rows(aid)
        exports["sms_effects"].append(effect(f"sms-{aid}", n + 1))
        exports["ai_effects"].append(effect(f"narrative-{aid}", n + 1))
    return exports


def ledgers_from(exports: dict[str, Any], **overrides: Any) -> Ledgers:
    return Ledgers.from_exports(**{**exports, **overrides})
