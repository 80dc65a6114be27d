"""Issue #21 finding 1: Valkey without a password let any local process run code as root.

The attacker is a local process running as ``nobody`` with no access to the run folder.
- Without a credential it gets nothing from Valkey: no PING, no CONFIG, no enqueue, no DEL.
- With a stolen credential that may enqueue (the web nodes'), the injected ``os.system``
  job is refused by the worker before anything is imported, and counted in /metrics.
- The login-failure counters can be reset only by the limiter's own user.
Negative control: ``test_the_attack_enqueues_against_the_old_config`` runs the very same
attacker against a Valkey configured as before this issue (TLS, no users) and watches it
enqueue, so the refusals above are the configuration's doing, not a broken attack.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from lane_stack import EXAM, HANG_GUARD, port_of, run_folder
from local_attacker import run_as_nobody
from stack.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.integration

INJECT = """
port, marker, serializer = sys.argv[1], sys.argv[2], sys.argv[3]
credential = json.loads(sys.argv[4])
client = valkey(port, **credential)
result = {}
for name, call in [("ping", lambda: client.ping()), ("config", lambda: client.config_get("requirepass"))]:
    try:
        result[name] = repr(call())
    except RedisError as exc:
        result[name] = "refused: " + type(exc).__name__
try:
    queue = rq.Queue("sms", connection=client, serializer=None if serializer == "pickle" else rq.serializers.JSONSerializer)
    result["job"] = queue.enqueue("os.system", f"id > {marker}").id
except RedisError as exc:
    result["enqueue"] = "refused: " + type(exc).__name__ + ": " + str(exc)[:120]
emit(**result)
"""

DELETE = """
port, key, credential = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    emit(deleted=valkey(port, **credential).delete(key))
except RedisError as exc:
    emit(refused=type(exc).__name__ + ": " + str(exc)[:120])
"""


def _credential(stack: EmbeddedStack, user: str) -> dict[str, str]:
    """What an attacker who stole ``user``'s password holds (nothing on a stack without users)."""
    passwords = getattr(getattr(stack, "_topo", None), "valkey_passwords", None)
    return {"username": user, "password": passwords[user]} if passwords else {}


def _harness(stack: EmbeddedStack) -> Any:
    return stack.valkey("probe")


def _settle(stack: EmbeddedStack, job_id: str) -> str:
    """The job's final status once the sms worker has dealt with it."""
    client, deadline = _harness(stack), time.monotonic() + HANG_GUARD
    while time.monotonic() < deadline:
        status = client.hget(f"rq:job:{job_id}", "status")
        if status in (b"finished", b"failed"):
            return status.decode()
        time.sleep(0.05)
    raise AssertionError(f"injected job {job_id} still not handled after the hang guard")


def _marker(tmp_path: Path) -> Path:
    """Where the injected command would write: the attacker cannot (tmp_path is root's, 0700),
    so a file there proves that a worker ran the command."""
    tmp_path.chmod(0o700)
    return tmp_path / "marker"


def _inject(stack: EmbeddedStack, marker: Path, serializer: str, credential: dict[str, str]) -> dict[str, Any]:
    import json

    return run_as_nobody(INJECT, port_of(stack.urls["valkey"]), str(marker), serializer, json.dumps(credential),
                         run_dir=run_folder(stack))


def test_without_a_credential_valkey_gives_nothing(lane_stack: EmbeddedStack, tmp_path: Path) -> None:
    marker = _marker(tmp_path)
    seen = _inject(lane_stack, marker, "pickle", {})
    if "job" in seen:
        _settle(lane_stack, seen["job"])
    assert not marker.exists(), f"a worker ran the attacker's command: {marker.read_text().strip()}"
    assert "job" not in seen, f"the attacker enqueued job {seen.get('job')}"
    assert seen["enqueue"].startswith("refused: AuthenticationError"), seen
    assert seen["ping"].startswith("refused") and seen["config"].startswith("refused"), seen


def _refused_total(stack: EmbeddedStack) -> float:
    with httpx.Client(trust_env=False, timeout=10) as client:
        text = client.get(f"{stack.urls['admin']}/metrics", headers={"X-Admin-Token": stack.settings.admin_token}).text
    found = re.search(r"^proctor_refused_jobs_total (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("serializer", ["pickle", "json"])
def test_a_stolen_enqueue_credential_cannot_run_code(lane_stack: EmbeddedStack, tmp_path: Path, serializer: str) -> None:
    """RQ's default (pickle) job and a JSON one naming ``os.system``: enqueued with the web nodes'
    credential, neither runs; each is refused and counted."""
    marker = _marker(tmp_path)
    before = _refused_total(lane_stack)
    seen = _inject(lane_stack, marker, serializer, _credential(lane_stack, "web"))
    assert "job" in seen, f"the web credential could not enqueue at all: {seen}"  # the premise of this test
    status = _settle(lane_stack, seen["job"])
    assert not marker.exists(), f"a worker ran the attacker's command: {marker.read_text().strip()}"
    reason = (_harness(lane_stack).hget(f"rq:job:{seen['job']}", "exc_info") or b"").decode()
    assert status == "failed" and "refused by worker_sms_1" in reason, (status, reason)
    assert _refused_total(lane_stack) == before + 1


def _login_failure_key(stack: EmbeddedStack) -> str:
    student = "student-00011"
    with httpx.Client(base_url=stack.urls["api"], trust_env=False, timeout=10) as api:
        wrong = api.post("/v1/sessions", json={"student_id": student, "exam_code": EXAM, "access_code": "wrong-code"})
    assert wrong.status_code == 401
    keys = [key.decode() for key in _harness(stack).scan_iter("proctor-limits*", count=1000)
            if student in key.decode() and "5/1/minute" in key.decode()]  # the first tier of LOGIN_FAILURE_TIERS
    assert keys, "no login-failure counter for the wrong code"
    return keys[0]


DELETE_AS_EACH = """
port, key, credentials = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
seen = {}
for user, credential in credentials.items():
    try:
        seen[user] = f"deleted {valkey(port, **credential).delete(key)}"
    except RedisError as exc:
        seen[user] = "refused: " + type(exc).__name__
emit(**seen)
"""


def test_only_the_limiter_may_reset_a_login_failure_counter(lane_stack: EmbeddedStack) -> None:
    """No credential, then each other component's stolen password: DEL of the counter refused."""
    import json

    key = _login_failure_key(lane_stack)
    credentials = {"none": {}, **{user: _credential(lane_stack, user) for user in ("web", "relay", "worker", "harness")}}
    seen = run_as_nobody(DELETE_AS_EACH, port_of(lane_stack.urls["valkey"]), key, json.dumps(credentials),
                         run_dir=run_folder(lane_stack))
    assert not [user for user, what in seen.items() if what.startswith("deleted")], f"reset the brute-force counter: {seen}"
    assert seen == {"none": "refused: AuthenticationError", **{u: "refused: NoPermissionError" for u in credentials if u != "none"}}
    assert _harness(lane_stack).exists(key)


def test_the_limiter_user_may_reset_its_counter(lane_stack: EmbeddedStack) -> None:
    """Control for the test above: the key name is right, and its owner can delete it."""
    import json

    key = _login_failure_key(lane_stack)
    seen = run_as_nobody(DELETE, port_of(lane_stack.urls["valkey"]), key, json.dumps(_credential(lane_stack, "limiter")),
                         run_dir=run_folder(lane_stack))
    assert seen == {"deleted": 1}


def test_the_attack_enqueues_against_the_old_config(tmp_path: Path) -> None:
    """Negative control: Valkey as configured before issue #21 (TLS, no ACL users); the same
    attacker, with no credential, enqueues its ``os.system`` job."""
    from stack.embedded.binaries import find_valkey
    from stack.embedded.certs import make_certs
    from stack.deploy.ports import free_port
    from stack.embedded.valkey import tls_ping, valkey_url, write_valkey_config
    from stack.valkey_acl import draw_passwords

    certs, port = make_certs(tmp_path / "tls"), free_port()
    conf = write_valkey_config(tmp_path, port, certs, passwords=draw_passwords())
    conf.write_text("".join(line for line in conf.read_text().splitlines(keepends=True) if not line.startswith("user ")))
    server = subprocess.Popen([find_valkey().path, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not tls_ping(valkey_url(port), certs.ca_cert) and time.monotonic() < deadline:
            time.sleep(0.05)
        seen = run_as_nobody(INJECT, str(port), str(tmp_path / "marker"), "pickle", "{}")
        assert "job" in seen and seen["ping"] == "True", seen
    finally:
        server.terminate()
        server.wait(10)
