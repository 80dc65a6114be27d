"""A student of the ramp, one request per step, and the per-process history it writes.

Under gevent, so standard library only (no chaos/, no stack/). The history lines follow
the chaos workload's format (docs/architecture.md, "History"): an ``invoke`` before each
request and one completion after it (``ok`` 2xx, ``fail`` a 4xx, ``info`` a 5xx or no
response: it may have happened), plus ``wall`` (epoch seconds) so that
``chaos.ramp.merge`` can merge the files of several Locust processes into one.

Like the chaos workload, a student signs in with its roster access code, starts with an
Idempotency-Key, answers each question with its own key, retries an unknown outcome under
the same key as a new process (the old request may still be in flight), finishes and
polls its merit card. A definite failure (4xx) ends the student; the next one begins.

A request whose kept-alive connection the server closed as it went out (no response at all)
is sent once more on a new connection within the same operation, as browsers do
(``SlotConnection``); every call of a student may be repeated safely (keys, or idempotent).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.ops.answers import ANSWER, answer_body, answer_headers, answer_path, answer_value
from stack.ledger.grading import OPTIONS

__all__ = ["QUESTIONS", "HistoryWriter", "RosterExhausted", "Student", "StudentCursor", "StudentPool", "classify",
           "history_for", "students_needed"]

QUESTIONS = 20  # the embedded stack's exam (PROCTOR_EXAMS NOVA-101:20): q1 .. q20
_writers: dict[str, "HistoryWriter"] = {}
_cursors: dict[tuple[str, str], "StudentCursor"] = {}


def classify(status: int | None) -> str:
    """The chaos client's outcome contract (chaos/load/client.py)."""
    if status is None or status >= 500:
        return "info"
    return "ok" if 200 <= status < 300 else "fail"


class HistoryWriter:
    """Append-only JSONL, one per Locust process (greenlets share it). Lines go to a file
    (0600, line-buffered) or, on a remote worker, to a ``sink`` that streams them to the master.
    ``counts`` is how many ops of each ``f`` and ``type`` were written (what a worker says it sent)."""

    def __init__(self, path: Path | None = None, sink: Any = None) -> None:
        self.path, self._sink, self._file = path, sink, None
        self._origin = time.monotonic()
        self._index = itertools.count()
        self._processes = itertools.count()
        self.counts: dict[str, int] = {}
        if sink is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._file = open(fd, "a", encoding="utf-8", buffering=1)

    def new_process(self) -> int:
        return next(self._processes)

    def append(self, process: int, type_: str, f: str, value: dict[str, Any], **fields: Any) -> None:
        op = {"index": next(self._index), "time": round(time.monotonic() - self._origin, 6), "process": process,
              "type": type_, "f": f, "value": value, "wall": time.time()}
        op.update({k: v for k, v in fields.items() if v is not None})
        line = json.dumps(op, separators=(",", ":")) + "\n"
        key = f"{f} {type_}"
        self.counts[key] = self.counts.get(key, 0) + 1
        if self._file is not None:
            self._file.write(line)  # one write per line: never interleaved
        else:
            self._sink.write(line)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def students_needed(total_requests: float, questions: int, senders: int = 0) -> int:
    """Students a plan of ``total_requests`` uses up at most when every student makes its whole
    flow (session, start, ``questions`` answers, finish; polls only add requests, so fewer
    students), plus the students that can be part-way through when the plan ends, one per
    sender (``senders``): a closed-model user holds one student at a time, and an open-model
    StudentPool takes a new student only when all of its unfinished ones are in flight, so it
    never holds more of them than in-flight slots (a slow stack keeps every slot busy, and
    each slot then holds a student of its own; rehearsal run 38 ran out of students so). One ending
    early on a definite failure uses fewer requests: the cursor then stops the run with
    RosterExhausted instead of reusing a student."""
    return -(-int(total_requests) // (questions + 3)) + senders


def history_for(run_dir: Path, role: str) -> HistoryWriter:
    path = run_dir / "histories" / f"history-{role}-{os.getpid()}.jsonl"
    if str(path) not in _writers:
        _writers[str(path)] = HistoryWriter(path)
    return _writers[str(path)]


class RosterExhausted(RuntimeError):
    """Every rostered student of this process has sat the exam: the roster is too small."""


class StudentCursor:
    """Hands out each rostered student once: the exam allows one attempt per student
    (PROCTOR_MAX_ATTEMPTS, default 1), so a student who sat it cannot sit it again. Locust
    process ``offset`` of ``stride`` takes every stride-th student, so processes never share one."""

    def __init__(self, roster: dict[str, str], exam_code: str, offset: int, stride: int = 1) -> None:
        if not roster:
            raise ValueError(f"--ramp-roster: no student of exam {exam_code!r}")
        self.students = sorted(roster.items())[offset % max(1, stride)::max(1, stride)]
        self.exam_code = exam_code
        self._next = iter(self.students)
        self._numbers = itertools.count()
        self._stride = max(1, stride)

    @classmethod
    def from_students(cls, students: dict[str, str], exam_code: str) -> "StudentCursor":
        """A worker's own part of the roster, as the master sent it (no file, no offset)."""
        return cls(students, exam_code, 0)

    @classmethod
    def shared(cls, roster_path: str, exam_code: str, offset: int, stride: int = 1) -> "StudentCursor":
        key = (roster_path, exam_code)
        if key not in _cursors:
            data = json.loads(Path(roster_path).read_text())
            exams = data.get("exams", {})
            if exam_code not in exams:
                raise ValueError(f"--ramp-roster {roster_path}: no exam {exam_code!r} (has {sorted(exams)})")
            _cursors[key] = cls(exams[exam_code], exam_code, offset, stride)
        return _cursors[key]

    def next_student(self, options: Any, history: HistoryWriter) -> "Student":
        try:
            student_id, code = next(self._next)
        except StopIteration:
            raise RosterExhausted(
                f"all {len(self.students)} students of this Locust process (1 in {self._stride} of the roster of "
                f"{self.exam_code}) have sat the exam, which allows one attempt each: enrol more "
                "(PROCTOR_ROSTER_SIZE) or shorten the plan") from None
        rng = random.Random(f"{options.ramp_seed}-{os.getpid()}-{next(self._numbers)}")
        return Student(student_id, code, self.exam_code, rng, history, options)


class StudentPool:
    """Open model: the students of one process, shared by its in-flight slots. An arrival takes
    the idle student waiting longest (a new one only when every student is in flight), so the
    students in progress are about as many as the requests in flight and each one finishes,
    instead of one student per slot crawling through its exam at rate / slots."""

    def __init__(self, cursor: StudentCursor, options: Any, history: HistoryWriter) -> None:
        self.cursor, self.options, self.history = cursor, options, history
        self._idle: list[Student] = []

    def acquire(self) -> "Student":
        return self._idle.pop(0) if self._idle else self.cursor.next_student(self.options, self.history)

    def release(self, student: "Student") -> None:
        if not student.done:
            self._idle.append(student)


STALE_CONNECTION_ERRORS = (ConnectionResetError, BrokenPipeError)
CLOSED_BEFORE_ANY_RESPONSE = "HTTPConnectionClosed"
"""What a request meets when the server closed its kept-alive connection as the request went out: a reset,
a broken pipe, or geventhttpclient's ``HTTPConnectionClosed`` (no byte of a response), known here by its
name because this module must not import gevent (the harness's pytest imports it)."""


@dataclass
class SlotConnection:
    """What a sending slot (a Locust user and its client's pool) knows of its connection.

    HAProxy closes a client connection idle for ``timeout http-keep-alive`` (10 s here), and a
    pooled connection checked alive just before that close carries the next request into it: no
    response, and geventhttpclient resends only idempotent methods. With 1,000 open-model slots
    at 100 req/s each slot idles about 10 s, so a healthy stack lost a login that way in a
    knee run (docs/ramp.md). Browsers resend a request once when a reused connection closes
    before any response (Chromium: ``ShouldResendRequest``, any method), so the student does too,
    on a reused connection only: a new connection closed without an answer is the server's, and
    stays an unknown outcome."""

    kept_alive: bool = False  # the last response left its connection in the pool for the next request

    def after(self, response: Any) -> None:
        if not response.status_code:  # no response: Locust's stand-in has no headers (None), nothing is kept
            self.kept_alive = False
            return
        self.kept_alive = str(response.headers.get("Connection", "")).lower() != "close"

    def closed_under(self, response: Any, reused: bool) -> bool:
        """The request met a close of its reused connection before any response."""
        if not reused or response.status_code:
            return False  # Locust's response has an ``error`` only when no response came
        error = response.error
        return isinstance(error, STALE_CONNECTION_ERRORS) or any(
            cls.__name__ == CLOSED_BEFORE_ANY_RESPONSE for cls in type(error).__mro__)


class Student:
    """A state machine: each ``step`` sends exactly one request (twice at most: ``SlotConnection``)."""

    def __init__(self, student_id: str, access_code: str, exam_code: str, rng: random.Random,
                 history: HistoryWriter, options: Any) -> None:
        self.student_id, self.exam_code, self.history = student_id, exam_code, history
        self._access_code = access_code  # in the request body only, never in the history
        self.process = history.new_process()
        self.max_tries, self.polls_left = options.ramp_max_tries, options.ramp_polls
        numbers = rng.sample(range(1, QUESTIONS + 1), k=options.ramp_questions)
        self.answers = [(f"q{n}", rng.choice(OPTIONS), f"ans-{uuid.UUID(int=rng.getrandbits(128)).hex}") for n in numbers]
        self.start_key = f"start-{uuid.UUID(int=rng.getrandbits(128)).hex}"
        self.token = self.attempt_id = None
        self.finished = self.done = False
        self.tries = 0

    def step(self, client: Any, intended: tuple[float, float] | None = None,
             connection: SlotConnection | None = None) -> None:
        """One request. ``intended`` (open model): its scheduled start as (wall, monotonic); the
        invoke and the completion then carry ``intended`` (epoch seconds) and the completion
        ``corrected_latency`` (seconds from the intended start), beside ``latency`` (from the send).
        ``connection``: the slot's; a request its reused connection closed under is sent once more
        (the completion then carries ``resent``), and Locust counts the lost send as a failure."""
        f, method, path, value, body, headers = self._next_call()
        connection = connection or SlotConnection()
        scheduled = {"intended": round(intended[0], 6)} if intended else {}
        self.history.append(self.process, "invoke", f, value, **scheduled)
        started = time.monotonic()
        try:
            for send in (1, 2):  # a resend goes out on a new connection, which is never resent (closed_under)
                status, node, data, error, closed = self._send(client, connection, method, path, body, headers, f)
                if not closed:
                    break
        except Exception as exc:
            # Whatever broke the send (the client, this code), the request may have taken effect: its
            # outcome is unknown, and an invoke left open would make the whole history not well-formed.
            # Locust still reports the exception.
            self.history.append(self.process, "info", f, value, latency=round(time.monotonic() - started, 6),
                                error=f"{type(exc).__name__}: {exc}"[:300], **scheduled)
            self._advance(f, "info", {})
            raise
        resent = {"resent": send - 1} if send > 1 else {}
        kind = classify(status)
        if kind != "ok" and error is None:
            error = str(data.get("detail", data))[:300] if data else f"HTTP {status}"
        self.history.append(self.process, kind, f, value, status=status, node=node, receipt_id=data.get("receipt_id"),
                            latency=round(time.monotonic() - started, 6), error=error, **scheduled, **resent,
                            corrected_latency=round(time.monotonic() - intended[1], 6) if intended else None)
        self._advance(f, kind, data)

    def _send(self, client: Any, connection: SlotConnection, method: str, path: str, body: Any,
              headers: dict[str, str], f: str) -> tuple[int | None, Any, dict[str, Any], str | None, bool]:
        """One send: (status, node, body, error, closed under a reused connection and to be resent)."""
        reused = connection.kept_alive
        with client.request(method, path, json=body, headers=headers, name=f, catch_response=True) as response:
            status = response.status_code or None  # FastHttpUser: 0 when no response came
            node = response.headers.get("X-Proctor-Node") if status else None
            data = _json(response)
            error = None if status else f"{type(response.error).__name__}: {response.error}"[:300]
            closed = connection.closed_under(response, reused)
            if status and 200 <= status < 300:
                response.success()
            else:
                response.failure(f"{error} (resent on a new connection)" if closed else error or f"HTTP {status}")
        connection.after(response)
        return status, node, data, error, closed

    def _next_call(self) -> tuple[str, str, str, dict[str, Any], dict[str, Any] | None, dict[str, str]]:
        auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if self.token is None:
            return ("session", "POST", "/v1/sessions", {"student_id": self.student_id},
                    {"student_id": self.student_id, "exam_code": self.exam_code, "access_code": self._access_code}, {})
        if self.attempt_id is None:
            return ("start", "POST", "/v1/attempts", {"student_id": self.student_id, "idempotency_key": self.start_key},
                    None, {**auth, "Idempotency-Key": self.start_key})
        if self.answers:
            question, content, key = self.answers[0]
            return (ANSWER, "PUT", answer_path(self.attempt_id, question),
                    answer_value(self.attempt_id, question, content, key), answer_body(content), answer_headers(auth, key))
        value = {"attempt_id": self.attempt_id}
        if not self.finished:
            return "finish", "POST", f"/v1/attempts/{self.attempt_id}/finish", value, None, auth
        return "merit_card", "GET", f"/v1/attempts/{self.attempt_id}/merit-card", value, None, auth

    def _advance(self, f: str, kind: str, data: dict[str, Any]) -> None:
        if kind == "info":  # unknown: retry the same call (same key) as a new process, a bounded number of times
            self.process = self.history.new_process()
            self.tries += 1
            self.done = self.tries >= self.max_tries
            return
        self.tries = 0
        if kind == "fail":
            self.done = True
            return
        if f == "session":
            self.token = data.get("token")
        elif f == "start":
            self.attempt_id = data.get("attempt_id")
        elif f == ANSWER:
            self.answers.pop(0)
        elif f == "finish":
            self.finished = True
        else:
            self.polls_left -= 1
            self.done = self.polls_left <= 0 or data.get("status") in {"ready", "failed_for_review"}


def _json(response: Any) -> dict[str, Any]:
    try:
        data = response.json()
    except Exception:  # noqa: BLE001 - no body, HTML from the load balancer, a reset
        return {}
    return data if isinstance(data, dict) else {}
