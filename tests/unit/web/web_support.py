"""Helpers of the web tests; their fixtures are in conftest.py beside this file.

The ledger is SQLite in tmp_path, created by ``init_ledger`` as the runner would;
Valkey is a closed port unless a test starts its own, so every test proves the
accept path does not need it.
"""

from __future__ import annotations

import socket
import uuid
import warnings

from sqlalchemy import Engine, func, select

with warnings.catch_warnings():
    # Starlette 1.10 deprecates its TestClient's use of httpx (in favour of "httpx2", not
    # installed). The client works; the warning would only fail collection under
    # filterwarnings=error. Test modules import TestClient from here for that reason.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

__all__ = [
    "ADMIN",
    "ROSTER",
    "ROSTER_KEY",
    "STUDENTS",
    "TestClient",
    "LOOPBACK",
    "RecordingDispatcher",
    "answer",
    "auth",
    "closed_port",
    "count_rows",
    "start",
    "token_for",
]

ADMIN = "test-admin-token"
ROSTER_KEY = "test-roster-key"
STUDENTS = [f"s-{n}" for n in range(1, 10)]
ROSTER: dict[str, dict[str, str]] = {}
"""{exam: {student: access code}} of the current test's ledger (the ``ledger`` fixture fills it)."""
LOOPBACK = ("127.0.0.1", 50000)


def closed_port() -> int:
    """A local port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RecordingDispatcher:
    """Stands in for Valkey: remembers what finish asked to dispatch, enqueues nothing."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.closed = False

    def submit(self, attempt_id: str) -> None:
        self.submitted.append(attempt_id)

    def close(self) -> None:
        self.closed = True


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token_for(client: TestClient, student: str = "s-1", exam: str = "NOVA-101") -> str:
    code = ROSTER[exam][student]
    response = client.post("/v1/sessions", json={"student_id": student, "exam_code": exam, "access_code": code})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def start(client: TestClient, token: str, key: str | None = None) -> str:
    headers = auth(token) | ({"Idempotency-Key": key} if key else {})
    response = client.post("/v1/attempts", headers=headers)
    assert response.status_code in (200, 201), response.text
    return str(response.json()["attempt_id"])


def answer(client: TestClient, token: str, attempt: str, question: str, content: str, key: str | None = None):  # type: ignore[no-untyped-def]
    headers = auth(token) | {"Idempotency-Key": key or uuid.uuid4().hex}
    return client.put(f"/v1/attempts/{attempt}/answers/{question}", json={"content": content}, headers=headers)


def count_rows(engine: Engine, table) -> int:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())
