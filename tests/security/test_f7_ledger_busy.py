"""Finding 7: a stepped ramp gave 80 HTTP 500s from "database is locked". A ledger lock or
busy timeout is now a 503 with Retry-After: nothing was committed and a retry may succeed.
The lock here is real (another connection holds SQLite's write lock); only the busy timeout
is shortened so the test need not wait the production 10 s."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from web_support import RecordingDispatcher, TestClient, answer, auth, start, token_for

from stack.config import Settings
from stack.ledger import engine as ledger_engine
from stack.web.app import create_app


def test_a_held_write_lock_is_a_503_with_retry_after(
    settings: Settings, ledger: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_engine, "SQLITE_BUSY_TIMEOUT_MS", 50)
    with TestClient(create_app(settings, dispatcher=RecordingDispatcher())) as client:
        token = token_for(client)
        attempt = start(client, token)
        with ledger.begin():  # BEGIN IMMEDIATE: holds the write lock until the block ends
            locked = answer(client, token, attempt, "q1", "A", key="k1")
        assert locked.status_code == 503 and locked.headers["Retry-After"] == "1"
        assert locked.json() == {"detail": "ledger busy, retry later"}
        # Control: with the lock released the same request is accepted (the 503 was the lock's).
        assert answer(client, token, attempt, "q1", "A", key="k1").status_code == 201


def test_an_operational_error_that_is_not_a_lock_stays_a_500(app_client: TestClient, ledger: Engine) -> None:
    from sqlalchemy import text

    with ledger.begin() as conn:  # a broken ledger is a bug to see, not a reason to retry
        conn.execute(text("DROP TABLE audit_log"))
    token = token_for(app_client)
    attempt = start(app_client, token)
    assert app_client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code == 500

