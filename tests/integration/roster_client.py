"""An httpx client of the stack's API that logs students in from the run's roster."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx

from stack.deploy.secrets import read_roster

__all__ = ["RosterClient"]


_CURSORS: dict[tuple[str, str], "itertools.count[int]"] = {}
"""One cursor per stack and exam, shared by every client of it: the exam allows one attempt
per student, so a module's tests (each with its own client) must not sign the same student in."""


class RosterClient(httpx.Client):
    """``login()`` signs in the next rostered student (each call a different one, across every
    client of the same run folder)."""

    def __init__(self, run_dir: Path, exam_code: str = "NOVA-101", **kwargs: Any) -> None:
        super().__init__(trust_env=False, **kwargs)
        self.exam_code = exam_code
        self.roster = sorted(read_roster(run_dir, exam_code).items())
        self._next = _CURSORS.setdefault((str(Path(run_dir).resolve()), exam_code), itertools.count())

    def login(self) -> dict[str, str]:
        """Authorization headers of a fresh session of the next student."""
        student, code = self.roster[next(self._next)]
        response = self.post("/v1/sessions", json={"student_id": student, "exam_code": self.exam_code,
                                                   "access_code": code})
        assert response.status_code == 201, response.text
        return {"Authorization": f"Bearer {response.json()['token']}"}
