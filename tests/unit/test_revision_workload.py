"""The revision workload's plan: held-back revisions go out after the newest was
acknowledged, concurrent ones together, duplicates under the same key; reads follow."""

from __future__ import annotations

import asyncio
import random

import pytest

from chaos.load.client import CallResult
from chaos.history import DELIBERATE_DUPLICATE
from chaos.load.revisions import RevisionSpec, _Plan, _Student


class RecordingClient:
    """Answers every call ok at once and records (f, revision, key) in call order."""

    def __init__(self) -> None:
        self.history = self  # the workload asks its client's history for process numbers
        self._process = 0
        self.calls: list[tuple[str, int | None, str | None]] = []
        self.marks: list[object] = []  # each call's deliberate_duplicate field (None: unmarked)

    def new_process(self) -> int:
        self._process += 1
        return self._process

    async def call(self, process: int, call) -> CallResult:  # type: ignore[no-untyped-def]
        self.calls.append((call.f, call.value.get("revision"), call.value.get("idempotency_key")))
        self.marks.append(call.value.get(DELIBERATE_DUPLICATE))
        await asyncio.sleep(0)
        return CallResult("ok", 200, {}, process, 1)


def run_question(plan: _Plan, spec: RevisionSpec) -> list[tuple[str, int | None, str | None]]:
    client = RecordingClient()
    student = _Student(client, spec, random.Random(1), {}, "a1")  # type: ignore[arg-type]
    assert asyncio.run(student.question("q1", plan)) is True
    return client.calls


def test_a_held_back_revision_is_sent_after_the_newest() -> None:
    calls = run_question(_Plan(["A", "B", "C"], concurrent=False, delayed=True), RevisionSpec(duplicate_share=0.0))
    assert [(f, rev) for f, rev, _ in calls] == [("revise", 1), ("revise", 3), ("revise", 2), ("read_answers", None)]


def test_concurrent_revisions_go_out_together_and_duplicates_reuse_the_key() -> None:
    calls = run_question(_Plan(["A", "B", "C"], concurrent=True, delayed=False), RevisionSpec(duplicate_share=1.0))
    revisions = [(rev, key) for f, rev, key in calls if f == "revise"]
    assert sorted(rev for rev, _ in revisions) == [1, 1, 2, 2, 3, 3]
    assert all(revisions.count(item) == 2 for item in revisions)  # each sent twice under one key
    assert calls[-1][0] == "read_answers"


@pytest.mark.parametrize(("field", "value"), [("revised_share", 1.5), ("delayed_share", -0.1), ("max_revisions", 1)])
def test_bad_revision_options_name_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        RevisionSpec(**{field: value})


def test_the_deliberate_second_send_is_marked_and_the_first_is_not() -> None:
    client = RecordingClient()
    student = _Student(client, RevisionSpec(duplicate_share=1.0), random.Random(1), {}, "a1")  # type: ignore[arg-type]
    assert asyncio.run(student.question("q1", _Plan(["A", "B"], concurrent=False, delayed=False))) is True
    assert [(f, rev, mark) for (f, rev, _), mark in zip(client.calls, client.marks)] == [
        ("revise", 1, None), ("revise", 1, 1), ("revise", 2, None), ("revise", 2, 1), ("read_answers", None, None)]
