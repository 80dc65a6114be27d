"""The exam workload's pacing (chaos.load.exam): think time before each answer, checked options."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest

from chaos.load import exam
from chaos.load.exam import WorkloadSpec


class AnsweringClient:
    """Accepts every call; records the order of answers and pauses."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def call(self, process: int, call: Any) -> SimpleNamespace:
        self.events.append(f"answer {call.path.rsplit('/', 1)[-1]}")
        return SimpleNamespace(type="ok", process=process)


def _answer_all(think_time: float, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    events: list[str] = []

    async def sleep(seconds: float) -> None:
        events.append(f"think {seconds}")

    monkeypatch.setattr(exam.asyncio, "sleep", sleep)
    process = asyncio.run(exam._answer_all(AnsweringClient(events), 1, {}, "att-1", ["q1", "q2"],
                                           random.Random(0), think_time))
    assert process == 1
    return events


def test_a_student_thinks_before_each_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _answer_all(0.25, monkeypatch) == ["think 0.25", "answer q1", "think 0.25", "answer q2"]


def test_without_think_time_answers_follow_each_other(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _answer_all(0.0, monkeypatch) == ["answer q1", "answer q2"]


def test_a_negative_think_time_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="think_time must be >= 0"):
        WorkloadSpec(think_time=-0.1)
