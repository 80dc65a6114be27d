"""The security model through a real HAProxy and real web nodes (one embedded stack).

- admin is not reachable through the load balancer, only on a node's loopback listener;
- HAProxy replaces a client's X-Forwarded-For (the node's network login limit sees the
  real client, whatever it claims), and a client talking to a node directly cannot spoof it;
- the run folder's secrets and evidence are 0600 (the folder itself 0700);
- logs stay clean: a canary answer, canary access codes, every real code, the session
  tokens and the admin token are planted, then every log of the run is searched for them.
"""

from __future__ import annotations

import json
import stat
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from stack.deploy.secrets import ROSTER_NAME, read_roster
from stack.embedded.stack import EmbeddedStack, StackSpec

pytestmark = pytest.mark.integration

EXAM = "NOVA-101"
CANARY_ANSWER = f"CANARY-ANSWER-{uuid.uuid4().hex}"
CANARY_CODE = f"CANARY-CODE-{uuid.uuid4().hex}"
NETWORK_LIMIT = 6
"""Logins per client address in this stack."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    spec = StackSpec(name="security", web=1, merit_workers=1, ai_workers=0, sms_workers=0,
                     run_dir=tmp_path_factory.mktemp("security") / "run", settings_overrides={"roster_size": 20, "login_network_limit": f"{NETWORK_LIMIT}/hour"})
    with EmbeddedStack(spec) as running:
        yield running


def _login(api: httpx.Client, student: str, code: str, **headers: str) -> httpx.Response:
    return api.post("/v1/sessions", json={"student_id": student, "exam_code": EXAM, "access_code": code},
                    headers=headers)


def test_admin_is_only_on_the_loopback_listener(stack: EmbeddedStack) -> None:
    token = {"X-Admin-Token": stack.settings.admin_token}
    with httpx.Client(trust_env=False, timeout=10) as client:
        assert client.get(f"{stack.urls['api']}/admin/export/answers", headers=token).status_code == 404
        assert client.get(f"{stack.urls['web_1']}/admin/export/answers", headers=token).status_code == 404
        assert client.get(f"{stack.urls['admin']}/admin/export/answers", headers=token).status_code == 200
        assert client.get(f"{stack.urls['admin']}/admin/export/answers").status_code == 403


def test_secrets_and_evidence_are_private(stack: EmbeddedStack) -> None:
    run = stack.run_dir
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    for name in ("manifest.json", ROSTER_NAME, "ledger.db"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o600, name
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["settings"]["PROCTOR_TOKEN_SECRET"] == stack.settings.token_secret  # only here (0600)
    assert stack.settings.token_secret not in (run / ROSTER_NAME).read_text()


def _plant_canaries(stack: EmbeddedStack) -> list[str]:
    roster = read_roster(stack.run_dir, EXAM)
    student, code = sorted(roster.items())[1]
    with httpx.Client(base_url=stack.urls["api"], trust_env=False, timeout=10) as api:
        assert _login(api, student, CANARY_CODE).status_code == 401
        session = _login(api, student, code)
        token = session.json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        attempt = api.post("/v1/attempts", headers=auth).json()["attempt_id"]
        put = api.put(f"/v1/attempts/{attempt}/answers/q1", json={"content": CANARY_ANSWER},
                      headers={**auth, "Idempotency-Key": "canary-1"})
        assert put.status_code == 201
        conflict = api.put(f"/v1/attempts/{attempt}/answers/q1", json={"content": CANARY_ANSWER + "-2"},
                           headers={**auth, "Idempotency-Key": "canary-1"})
        assert conflict.status_code == 409 and CANARY_ANSWER not in conflict.text
        bad = api.put(f"/v1/attempts/{attempt}/answers/q1", json={"content": 7, "echo": CANARY_ANSWER},
                      headers={**auth, "Idempotency-Key": "canary-2"})
        assert bad.status_code == 422 and CANARY_ANSWER not in bad.text
        assert api.post(f"/v1/attempts/{attempt}/finish", headers=auth).status_code == 202
        assert api.post("/v1/attempts", headers={"Authorization": f"Bearer {token}x"}).status_code == 401
    return [CANARY_ANSWER, CANARY_CODE, token, stack.settings.admin_token, stack.settings.token_secret,
            stack.settings.roster_key, *roster.values()]


def test_logs_hold_no_answer_token_or_code(stack: EmbeddedStack) -> None:
    secrets = _plant_canaries(stack)
    # Evidence by design (0600, listed in the README): the ledger, the roster, the manifest.
    evidence = {"ledger.db", "ledger.db-wal", "ledger.db-shm", ROSTER_NAME, "manifest.json"}
    searched = [p for p in Path(stack.run_dir).rglob("*") if p.is_file() and p.name not in evidence]
    assert any(p.suffix == ".log" for p in searched), "no logs to search"
    leaks = {str(p.relative_to(stack.run_dir)): [s[:12] for s in secrets if s in p.read_text(errors="replace")]
             for p in searched}
    assert {path: found for path, found in leaks.items() if found} == {}
    # Control: the canary did reach the evidence, so searching would have found it.
    assert CANARY_ANSWER.encode() in b"".join(
        p.read_bytes() for p in Path(stack.run_dir).glob("ledger.db*"))


def test_the_balancer_replaces_a_spoofed_forwarded_for(stack: EmbeddedStack) -> None:
    """The guest (network) login limit keys on the client address the node believes. Through
    HAProxy that is HAProxy's X-Forwarded-For: a client rotating its own header still counts as
    one network, so the header it sent must have been dropped."""
    valkey = stack.valkey_as("limiter")  # the only Valkey user allowed the limiter's counters
    for key in valkey.scan_iter("proctor-limits*"):  # start from zero: other tests logged in from here too
        valkey.delete(key)
    roster = read_roster(stack.run_dir, EXAM)
    student, code = sorted(roster.items())[0]
    with httpx.Client(base_url=stack.urls["api"], trust_env=False, timeout=10) as api:
        seen = [_login(api, student, code, **{"X-Forwarded-For": f"198.51.100.{i}"}).status_code
                for i in range(NETWORK_LIMIT + 1)]
        assert seen == [201] * NETWORK_LIMIT + [429]  # rotating the header bought nothing
        limited = _login(api, student, code, **{"X-Forwarded-For": "203.0.113.77"})
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    # Directly at the node (127.0.0.1 is not the configured proxy) the header is ignored too.
    with httpx.Client(base_url=stack.urls["web_1"], trust_env=False, timeout=10) as direct:
        assert _login(direct, student, code, **{"X-Forwarded-For": "203.0.113.78"}).status_code == 429
