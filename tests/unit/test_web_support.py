"""Shared fixtures and helpers of the web tests (imported by the test_web_* modules).

The ledger is SQLite in tmp_path, created by ``init_ledger`` as the runner would;
Valkey is a closed port unless a test starts its own, so every test proves the
accept path does not need it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Iterator

import warnings

import pytest
from sqlalchemy import Engine, func, select

from stack.config import Settings
from stack.ledger.engine import init_ledger, make_engine
from stack.web.app import create_app

with warnings.catch_warnings():
    # Starlette 1.10 deprecates its TestClient's use of httpx (in favour of "httpx2", not
    # installed). The client works; the warning would only fail collection under
    # filterwarnings=error. Test modules import TestClient from here for that reason.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

__all__ = [
    "ADMIN",
    "TestClient",
    "RecordingDispatcher",
    "answer",
    "app_client",
    "auth",
    "closed_port",
    "count_rows",
    "dispatcher",
    "ledger",
    "settings",
    "start",
    "token_for",
    "valkey_server",
]

ADMIN = "test-admin-token"
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


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        run_dir=tmp_path,
        valkey_url=f"redis://127.0.0.1:{closed_port()}/0",
        exams={"NOVA-101": 3, "NOVA-102": 2},
        token_secret="test-secret",
        admin_token=ADMIN,
        node_name="web_test",
        max_body_bytes=1024,
    )


@pytest.fixture
def ledger(settings: Settings) -> Iterator[Engine]:
    engine = make_engine(settings)
    init_ledger(engine, settings)
    yield engine
    engine.dispose()


@pytest.fixture
def dispatcher() -> RecordingDispatcher:
    return RecordingDispatcher()


@pytest.fixture
def app_client(settings: Settings, ledger: Engine, dispatcher: RecordingDispatcher) -> Iterator[TestClient]:
    app = create_app(settings, dispatcher=dispatcher)
    with TestClient(app, client=LOOPBACK) as client:
        yield client


@pytest.fixture
def valkey_server(tmp_path: Path) -> Iterator[str]:
    """A throwaway plain-TCP valkey-server (no TLS, no persistence); its redis:// URL."""
    binary = shutil.which("valkey-server")
    if binary is None:
        pytest.skip("valkey-server not installed")
    port = closed_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=5)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token_for(client: TestClient, student: str = "s-1", exam: str = "NOVA-101") -> str:
    response = client.post("/v1/sessions", json={"student_id": student, "exam_code": exam})
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
