"""Fixtures of the web tests (and tests/security): a SQLite ledger in tmp_path made by init_ledger as the
runner would, an app whose dispatcher records instead of enqueueing, and Valkey on a
closed port unless a test starts its own — so every test proves acceptance needs no Valkey."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

__all__ = ["admin_client", "app_client", "dispatcher", "ledger", "settings", "valkey_server"]
from sqlalchemy import Engine
from web_support import ADMIN, LOOPBACK, ROSTER, ROSTER_KEY, STUDENTS, RecordingDispatcher, TestClient, closed_port

from stack.config import Settings
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.roster import issue_roster
from stack.web.app import create_admin_app, create_app


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        run_dir=tmp_path,
        valkey_url=f"redis://127.0.0.1:{closed_port()}/0",
        exams={"NOVA-101": 3, "NOVA-102": 2},
        token_secret="test-secret",
        admin_token=ADMIN,
        roster_key=ROSTER_KEY,
        node_name="web_test",
        max_body_bytes=1024,
        # Tests of other rules start several attempts per student; the attempt limit's own tests
        # (tests/unit/web/test_exam_rules.py, tests/security) use the default of 1.
        max_attempts=100,
    )


@pytest.fixture
def ledger(settings: Settings) -> Iterator[Engine]:
    engine = make_engine(settings)
    init_ledger(engine, settings)
    ROSTER.clear()
    ROSTER.update({exam: issue_roster(engine, ROSTER_KEY, exam, STUDENTS) for exam in settings.exams})
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
def admin_client(app_client: TestClient) -> Iterator[TestClient]:
    """The admin listener of the node behind ``app_client`` (same state)."""
    with TestClient(create_admin_app(app_client.app), client=LOOPBACK) as client:  # type: ignore[arg-type]
        yield client


@pytest.fixture
def valkey_server(tmp_path: Path) -> Iterator[str]:
    """A throwaway plain-TCP valkey-server (no TLS, no persistence); its redis:// URL."""
    binary = shutil.which("valkey-server")
    assert binary is not None, "valkey-server not found: apt-get install -t bookworm-backports valkey-server"
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
