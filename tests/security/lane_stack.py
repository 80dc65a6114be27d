"""One embedded stack with every lane, shared by the round-two attacks (tests/security/test_r2_*.py),
and the student's side of an exam on it: log in, sit, finish, wait for the merit card."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from stack.deploy.secrets import read_roster
from stack.embedded.stack import EmbeddedStack, StackSpec

EXAM = "NOVA-101"
HANG_GUARD = 120.0
"""Seconds a wait may take before the test gives up: not a verdict (every verdict here is on
what happened), only a guard against a hung stack."""


@pytest.fixture(scope="session")
def lane_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    spec = StackSpec(name="security-lanes", web=1, merit_workers=1, ai_workers=1, sms_workers=1,
                     run_dir=tmp_path_factory.mktemp("security-lanes") / "run", settings_overrides={"roster_size": 12})
    with EmbeddedStack(spec) as running:
        try:
            yield running
        finally:
            while _OPEN:
                _OPEN.pop().close()


_OPEN: list[httpx.Client] = []


class Student:
    """One rostered student of ``lane_stack``, through HAProxy as a browser would."""

    def __init__(self, stack: EmbeddedStack, index: int) -> None:
        self.stack = stack
        self.student_id, code = sorted(read_roster(stack.run_dir, EXAM).items())[index]
        self.api = httpx.Client(base_url=stack.urls["api"], trust_env=False, timeout=10)
        _OPEN.append(self.api)  # closed with the stack
        login = self.api.post("/v1/sessions", json={"student_id": self.student_id, "exam_code": EXAM, "access_code": code})
        assert login.status_code == 201, login.text
        self.token = login.json()["token"]
        self.auth = {"Authorization": f"Bearer {self.token}"}

    def start(self) -> str:
        started = self.api.post("/v1/attempts", headers=self.auth)
        assert started.status_code == 201, started.text
        return started.json()["attempt_id"]

    def answer_and_finish(self, attempt: str, answers: int = 3) -> None:
        for q in range(1, answers + 1):
            put = self.api.put(f"/v1/attempts/{attempt}/answers/q{q}", json={"content": "A"},
                               headers={**self.auth, "Idempotency-Key": f"{attempt}-q{q}"})
            assert put.status_code == 201, put.text
        assert self.api.post(f"/v1/attempts/{attempt}/finish", headers=self.auth).status_code == 202

    def merit_card(self, attempt: str) -> dict[str, Any]:
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            body = self.api.get(f"/v1/attempts/{attempt}/merit-card", headers=self.auth).json()
            if body.get("status") == "ready":
                return body["merit_card"]
            time.sleep(0.1)
        raise AssertionError(f"no merit card for {attempt} within the hang guard")


def export(stack: EmbeddedStack, table: str) -> list[dict[str, Any]]:
    """A table of the admin export (the admin listener, with the admin token)."""
    with httpx.Client(trust_env=False, timeout=10) as client:
        reply = client.get(f"{stack.urls['admin']}/admin/export/{table}", headers={"X-Admin-Token": stack.settings.admin_token})
    reply.raise_for_status()
    body = reply.json()
    return body if isinstance(body, list) else body.get("rows", body.get(table, []))


def wait_for_outcome(stack: EmbeddedStack, operation_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        found = [row for row in export(stack, "outcomes") if row["operation_id"] == operation_id]
        if found and found[0]["status"] in ("ready", "failed_for_review"):
            return found[0]
        time.sleep(0.2)
    raise AssertionError(f"no outcome {operation_id} within the hang guard")


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1].split("/")[0]


def run_folder(stack: EmbeddedStack) -> str:
    return str(Path(stack.run_dir))
