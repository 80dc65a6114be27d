"""The exam workload: students arrive at a target rate, sign in with their roster access
code (``<run_dir>/roster.json``, written by ``proctor up``), start an attempt,
answer questions, finish, and poll for their merit card — for a bounded time.

Arrivals are an open model (a student arrives on schedule whether or not earlier
ones are done), capped by ``max_in_flight`` so a stalled stack cannot make the
harness itself unbounded. Every random choice comes from the seed.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

import httpx

from chaos.load.client import Call, ExamClient
from chaos.history import History
from chaos.load.revisions import RevisionSpec, revise_answers
from chaos.ops.answers import ANSWER, answer_body, answer_headers, answer_path, answer_value
from stack.ledger.grading import OPTIONS

__all__ = ["WorkloadSpec", "WorkloadStats", "run_workload", "student_flow"]


@dataclass(frozen=True)
class WorkloadSpec:
    arrival_rate: float = 4.0  # students per second
    duration: float = 10.0  # seconds of arrivals
    questions: int = 5  # answered per student
    exam_code: str = "NOVA-101"
    exam_questions: int = 20  # questions the exam has (PROCTOR_EXAMS)
    max_in_flight: int = 40
    request_timeout: float = 5.0
    poll_interval: float = 0.25
    poll_deadline: float = 20.0  # seconds a student waits for a merit card
    max_tries: int = 6
    think_time: float = 0.0  # seconds a student reads each question before answering it
    revisions: RevisionSpec | None = None  # answers as autosaved revisions (chaos/load/revisions.py)

    def __post_init__(self) -> None:
        for name in ("arrival_rate", "duration", "request_timeout", "poll_interval", "poll_deadline"):
            if not getattr(self, name) > 0:
                raise ValueError(f"workload option {name} must be > 0, got {getattr(self, name)!r}")
        if not self.think_time >= 0:
            raise ValueError(f"workload option think_time must be >= 0, got {self.think_time!r}")
        for name in ("questions", "exam_questions", "max_in_flight", "max_tries"):
            if getattr(self, name) < 1:
                raise ValueError(f"workload option {name} must be >= 1, got {getattr(self, name)!r}")
        if self.questions > self.exam_questions:
            raise ValueError(f"workload option questions={self.questions} exceeds exam_questions={self.exam_questions}")


@dataclass
class WorkloadStats:
    students: int = 0
    finished: int = 0
    merit_seen: int = 0
    gave_up: int = 0
    retries: int = 0
    merit_latencies: list[float] = field(default_factory=list)
    background: dict[str, Any] = field(default_factory=dict)  # results of background generators

    def as_dict(self) -> dict[str, Any]:
        lat = sorted(self.merit_latencies)
        return {
            "students": self.students,
            "finished": self.finished,
            "merit_seen": self.merit_seen,
            "gave_up": self.gave_up,
            "client_retries": self.retries,
            "merit_card_latency_p50": _quantile(lat, 0.5),
            "merit_card_latency_max": lat[-1] if lat else None,
        }


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def student_flow(
    client: ExamClient, spec: WorkloadSpec, rng: random.Random, student_id: str, stats: WorkloadStats,
    access_code: str = "",
) -> None:
    """One student's exam; stops at the first definite failure or exhausted retries."""
    process = client.history.new_process()
    # The access code goes in the request only: the history's value never holds it.
    session = await client.call(
        process,
        Call("session", "POST", "/v1/sessions", {"student_id": student_id},
             json={"student_id": student_id, "exam_code": spec.exam_code, "access_code": access_code}),
    )
    if session.type != "ok":
        stats.gave_up += 1
        return
    auth = {"Authorization": f"Bearer {session.body['token']}"}
    start_key = f"start-{uuid.UUID(int=rng.getrandbits(128)).hex}"  # seeded, not derivable from the student
    started = await client.call(
        session.process,
        Call("start", "POST", "/v1/attempts", {"student_id": student_id, "idempotency_key": start_key},
             headers={**auth, "Idempotency-Key": start_key}),
    )
    if started.type != "ok":
        stats.gave_up += 1
        return
    attempt_id = started.body["attempt_id"]
    process = started.process
    questions = [f"q{number}" for number in rng.sample(range(1, spec.exam_questions + 1), k=spec.questions)]
    if spec.revisions is not None:
        answered = await revise_answers(client, spec.revisions, rng, auth, attempt_id, questions)
    else:
        answered_on = await _answer_all(client, process, auth, attempt_id, questions, rng, spec.think_time)
        answered = answered_on is not None
        process = process if answered_on is None else answered_on
    if not answered:
        stats.gave_up += 1
        return
    finish = await client.call(
        process,
        Call("finish", "POST", f"/v1/attempts/{attempt_id}/finish", {"attempt_id": attempt_id}, headers=auth),
    )
    if finish.type != "ok":
        stats.gave_up += 1
        return
    stats.finished += 1
    await _poll_merit_card(client, spec, finish.process, auth, attempt_id, stats)


async def _answer_all(
    client: ExamClient, process: int, auth: dict[str, str], attempt_id: str, questions: list[str], rng: random.Random,
    think_time: float = 0.0,
) -> int | None:
    """One answer per question, in order, each after ``think_time``; the process to continue on,
    or None to give up."""
    for question in questions:
        if think_time:
            await asyncio.sleep(think_time)
        next_process = await _answer(client, process, auth, attempt_id, question, rng.choice(OPTIONS))
        if next_process is None:
            return None
        process = next_process
    return process


async def _answer(
    client: ExamClient, process: int, auth: dict[str, str], attempt_id: str, question: str, content: str
) -> int | None:
    key = f"ans-{uuid.uuid4().hex}"
    result = await client.call(
        process,
        Call(ANSWER, "PUT", answer_path(attempt_id, question), answer_value(attempt_id, question, content, key),
             json=answer_body(content), headers=answer_headers(auth, key)),
    )
    return result.process if result.type == "ok" else None


async def _poll_merit_card(
    client: ExamClient, spec: WorkloadSpec, process: int, auth: dict[str, str], attempt_id: str, stats: WorkloadStats
) -> None:
    finished_at = time.monotonic()
    path = f"/v1/attempts/{attempt_id}/merit-card"
    while time.monotonic() - finished_at < spec.poll_deadline:
        result = await client.call(process, Call("merit_card", "GET", path, {"attempt_id": attempt_id}, headers=auth))
        process = result.process
        if result.type == "ok" and result.body.get("status") in {"ready", "failed_for_review"}:
            stats.merit_seen += 1
            stats.merit_latencies.append(time.monotonic() - finished_at)
            return
        await asyncio.sleep(spec.poll_interval)


async def run_workload(
    base_url: str, history: History, spec: WorkloadSpec, seed: int, counts: Counter | None = None,
    roster: Mapping[str, str] | None = None,
) -> WorkloadStats:
    """Drive students at ``spec.arrival_rate`` for ``spec.duration`` seconds, then wait for them.
    ``roster``: {student_id: access code} of ``spec.exam_code`` (stack.deploy.secrets.read_roster)."""
    students = sorted((roster or {}).items())
    wanted = int(spec.arrival_rate * spec.duration)
    if len(students) < wanted:
        raise ValueError(f"workload needs {wanted} rostered students of {spec.exam_code}, the roster has "
                         f"{len(students)} (PROCTOR_ROSTER_SIZE)")
    rng = random.Random(seed)
    stats = WorkloadStats()
    gate = asyncio.Semaphore(spec.max_in_flight)
    limits = httpx.Limits(max_connections=spec.max_in_flight, max_keepalive_connections=spec.max_in_flight)
    timeout = httpx.Timeout(spec.request_timeout)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout, limits=limits) as http:
        client = ExamClient(http, history, max_tries=spec.max_tries, counts=counts)
        tasks = [asyncio.create_task(_arrive(client, spec, gate, rng, i, stats, students[i]))
                 for i in range(wanted)]
        stats.students = len(tasks)
        await asyncio.gather(*tasks)
        stats.retries = client.retries
    return stats


async def _arrive(
    client: ExamClient, spec: WorkloadSpec, gate: asyncio.Semaphore, rng: random.Random, index: int,
    stats: WorkloadStats, student: tuple[str, str],
) -> None:
    student_rng = random.Random(rng.random() + index)
    await asyncio.sleep(index / spec.arrival_rate)
    async with gate:
        await student_flow(client, spec, student_rng, student[0], stats, access_code=student[1])
