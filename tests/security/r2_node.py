"""A node as the round-two attacker meets it: default exam rules (not the web tests' relaxed
attempt limit), a 20-question exam, a roster, and the attacker's one access code.

Each test builds its own (a ``Node``) so that provisioning runs with the settings under test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from contextlib import contextmanager
from sqlalchemy import Engine
from web_support import ADMIN, LOOPBACK, ROSTER_KEY, RecordingDispatcher, TestClient, closed_port

from stack.config import Settings
from stack.ledger.engine import init_ledger, make_engine
from stack.ledger.roster import issue_roster
from stack.web.app import create_admin_app, create_app

EXAM = "NOVA-101"
QUESTIONS = 20
STUDENTS = [f"r2-{n:02d}" for n in range(40)]


@dataclass
class Node:
    client: TestClient
    admin: TestClient
    engine: Engine
    roster: dict[str, str]
    settings: Settings

    def login(self, student: str, code: str | None = None, client: TestClient | None = None):  # type: ignore[no-untyped-def]
        body = {"student_id": student, "exam_code": EXAM, "access_code": self.roster[student] if code is None else code}
        return (client or self.client).post("/v1/sessions", json=body)

    def token(self, student: str) -> str:
        response = self.login(student)
        assert response.status_code == 201, response.text
        return str(response.json()["token"])


def node_settings(tmp_path: Path, **overrides: object) -> Settings:
    return Settings(run_dir=tmp_path, valkey_url=f"redis://127.0.0.1:{closed_port()}/0", exams={EXAM: QUESTIONS},
                    token_secret="r2-token-secret", admin_token=ADMIN, roster_key=ROSTER_KEY,
                    node_name="web_r2").with_overrides(**overrides)


@contextmanager
def running_node(tmp_path: Path, client_address: tuple[str, int] = LOOPBACK, **overrides: object) -> Iterator[Node]:
    settings = node_settings(tmp_path, **overrides)
    engine = make_engine(settings)
    init_ledger(engine, settings)
    roster = issue_roster(engine, ROSTER_KEY, EXAM, STUDENTS)
    app = create_app(settings, dispatcher=RecordingDispatcher())
    with TestClient(app, client=client_address) as client, TestClient(create_admin_app(app), client=LOOPBACK) as admin:
        yield Node(client, admin, engine, roster, settings)
    engine.dispose()
