"""Per-run secrets and the roster file: drawn fresh by every ``proctor up``, private to the run.

The token secret, admin token and roster key go only into the 0600 manifest (and the
components' environment). The access codes go only into ``<run_dir>/roster.json`` (0600),
which is how the exam office hands them to the harness; the ledger keeps their HMACs.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any, Mapping

from stack.deploy import StackError

__all__ = [
    "HAPROXY_SOURCE",
    "ROSTER_NAME",
    "login_body",
    "read_roster",
    "roster_student_ids",
    "run_secrets",
    "write_private_json",
]

ROSTER_NAME = "roster.json"
HAPROXY_SOURCE = "127.0.0.2"
"""HAProxy connects to the web nodes from this loopback address. It is not a credential (any
local process can bind it): a node believes X-Forwarded-For only with the per-run proxy secret
HAProxy adds (PROCTOR_PROXY_SECRET, stack.web.guards.client_address)."""


def run_secrets() -> dict[str, str]:
    """Fresh random secrets (256 bits each) for one run, as Settings overrides."""
    names = ("token_secret", "admin_token", "roster_key", "proxy_secret", "ai_client_token", "sms_client_token",
             "log_store_token")
    return {name: secrets.token_urlsafe(32) for name in names}


def roster_student_ids(size: int) -> list[str]:
    return [f"student-{index:05d}" for index in range(size)]


def write_private_json(path: Path, data: Mapping[str, Any]) -> Path:
    """Write JSON readable by the owner only (0600 from creation, never briefly wider)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


def read_roster(run_dir: Path, exam_code: str) -> dict[str, str]:
    """{student_id: access code} of one exam from the run folder's roster.json."""
    path = Path(run_dir) / ROSTER_NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise StackError(f"no roster at {path}: is {run_dir} a run folder started by `proctor up`?") from None
    exams = data.get("exams", {})
    if exam_code not in exams:
        raise StackError(f"{path}: no roster for exam {exam_code!r} (has {sorted(exams)})")
    return dict(exams[exam_code])


def login_body(run_dir: Path, exam_code: str, index: int = 0) -> dict[str, str]:
    """The POST /v1/sessions body of the ``index``-th rostered student of an exam."""
    student_id = roster_student_ids(index + 1)[index]
    return {"student_id": student_id, "exam_code": exam_code, "access_code": read_roster(run_dir, exam_code)[student_id]}
