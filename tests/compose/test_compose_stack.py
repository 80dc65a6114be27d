"""The containerized stack end to end: set-up (engine, images, secrets), `up` to healthy, one
student through HAProxy to a ready merit card, admin only on loopback, `down` leaves nothing.

Runs when a container engine answers or can be installed (root with apt-get); otherwise the
module is skipped with one line saying why. Set-up is scripts/compose-setup.sh, the same as
`make compose-up`; its step timings are printed (run with -s to see them).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.unit.netsupport import free_port  # below the ephemeral range: no outgoing connection takes it
from chaos.deployment.compose_setup import engine_answers as _engine_answers, unavailable_reason
from stack.deploy.secrets import read_roster

REPO = Path(__file__).resolve().parents[2]
# A hang guard for a cold machine (engine install + base + image), not a verdict.
pytestmark = [pytest.mark.compose, pytest.mark.integration, pytest.mark.timeout(1500)]
RESOURCES = ("container", "network", "volume")
NETWORK_LIMIT = 12
"""Logins per client network in this stack: a spoofed X-Forwarded-For must meet it."""


def leftovers(project: str) -> dict[str, list[str]]:
    """Containers, networks and volumes still labelled as the project's."""
    label = f"label=com.docker.compose.project={project}"
    found = {}
    for kind in RESOURCES:
        listing = ["docker", "ps", "-a"] if kind == "container" else ["docker", kind, "ls"]
        out = subprocess.run([*listing, "-q", "--filter", label], capture_output=True, text=True, check=True).stdout
        found[kind] = out.split()
    return {kind: ids for kind, ids in found.items() if ids}


@dataclass
class ComposeRun:
    project: str
    run_dir: Path
    env: dict[str, str]
    http_port: int
    admin_port: int
    setup_output: str

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def container(self, service: str) -> str:
        out = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}",
                              "--filter", f"label=com.docker.compose.service={service}"],
                             capture_output=True, text=True, check=True).stdout.split()
        assert len(out) == 1, f"{service}: {out}"
        return out[0]

    def secret(self, name: str) -> str:
        lines = (self.run_dir / "proctor.env").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines)[name]


@pytest.fixture(scope="module")
def compose_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeRun]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    engine_was_running = _engine_answers()
    project = f"proctortest{uuid.uuid4().hex[:8]}"
    http_port, admin_port = free_port(), free_port()
    run_dir = tmp_path_factory.mktemp("compose-run")
    env = {**os.environ, "PROCTOR_COMPOSE_PROJECT": project, "PROCTOR_COMPOSE_RUN": str(run_dir),
           "PROCTOR_HTTP_PORT": str(http_port), "PROCTOR_ADMIN_HTTP_PORT": str(admin_port),
           "PROCTOR_COMPOSE_NET": "172.29.113", "PROCTOR_ROSTER_SIZE": "5",
           "PROCTOR_LOGIN_NETWORK_LIMIT": f"{NETWORK_LIMIT}/hour"}
    started = time.monotonic()
    setup = subprocess.run(["scripts/compose-setup.sh", "--up"], cwd=REPO, env=env, capture_output=True, text=True,
                           check=False)
    print(f"\n{setup.stdout}compose set-up + up to healthy: {time.monotonic() - started:.1f}s")
    try:
        assert setup.returncode == 0, setup.stdout + setup.stderr
        yield ComposeRun(project, run_dir, env, http_port, admin_port, setup.stdout)
    finally:
        started = time.monotonic()
        subprocess.run(["scripts/compose-down.sh"], cwd=REPO, env=env, check=True)
        print(f"compose down: {time.monotonic() - started:.1f}s")
        left = leftovers(project)
        if not engine_was_running:  # the dockerd set-up started for this test, by its pid
            subprocess.run(["scripts/compose-down.sh", "--stop-engine"], cwd=REPO, env=env, check=True)
        assert left == {}, f"left behind by `down`: {left}"
        assert not (run_dir / "proctor.env").exists(), "the run's secrets outlived it"


def test_a_student_gets_a_merit_card_through_haproxy(compose_run: ComposeRun) -> None:
    roster = sorted(read_roster(compose_run.run_dir / "roster", "NOVA-101").items())
    assert len(roster) == 5  # PROCTOR_ROSTER_SIZE reached the ledger-init container
    student, code = roster[0]
    with httpx.Client(base_url=compose_run.api, trust_env=False, timeout=30) as client:
        nodes = {client.get("/readyz").headers.get("X-Proctor-Node") for _ in range(6)}
        assert nodes == {"web_1", "web_2"}
        login = client.post("/v1/sessions", json={"student_id": student, "exam_code": "NOVA-101", "access_code": code})
        assert login.status_code == 201, login.text
        auth = {"Authorization": f"Bearer {login.json()['token']}"}
        wrong = client.post("/v1/sessions", json={"student_id": student, "exam_code": "NOVA-101", "access_code": "x" * 22})
        assert wrong.status_code == 401  # the roster is enforced, not just present
        attempt = client.post("/v1/attempts", headers=auth).json()["attempt_id"]
        answer = client.put(f"/v1/attempts/{attempt}/answers/q1", headers={**auth, "Idempotency-Key": "q1"},
                            json={"content": "B"})
        assert answer.status_code == 201, answer.text
        assert client.post(f"/v1/attempts/{attempt}/finish", headers=auth).status_code == 202
        card = _merit_card_when_settled(client, attempt, auth)
    assert card["status"] == "ready" and card["merit_card"] is not None, card


def _merit_card_when_settled(client: httpx.Client, attempt: str, auth: dict[str, str]) -> dict:
    """Polls until the card is ready or held for review: no deadline here (the module's timeout
    guards a hang); relay, merit workers and Valkey must all work for it to turn ready."""
    while True:
        body = client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth).json()
        if body["status"] != "pending":
            return body
        time.sleep(0.2)


def test_admin_is_404_through_haproxy_and_served_on_the_loopback_port(compose_run: ComposeRun) -> None:
    token = {"X-Admin-Token": compose_run.secret("PROCTOR_ADMIN_TOKEN")}
    with httpx.Client(trust_env=False, timeout=30) as client:
        assert client.get(f"{compose_run.api}/admin/export/exams", headers=token).status_code == 404
        exported = client.get(f"{compose_run.admin}/admin/export/exams", headers=token)
        assert exported.status_code == 200, exported.text
        assert [row["exam_code"] for row in exported.json()["rows"]] == ["NOVA-101"]
        assert client.get(f"{compose_run.admin}/admin/export/exams").status_code == 403  # the token still counts


def test_only_two_ports_are_published_and_both_on_loopback(compose_run: ComposeRun) -> None:
    ids = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={compose_run.project}"],
                         capture_output=True, text=True, check=True).stdout.split()
    bindings = []
    for cid in ids:
        raw = subprocess.run(["docker", "inspect", "-f", "{{json .HostConfig.PortBindings}}", cid],
                             capture_output=True, text=True, check=True).stdout
        bindings += [b for spec in (json.loads(raw) or {}).values() for b in spec]
    assert sorted(b["HostPort"] for b in bindings) == sorted([str(compose_run.http_port), str(compose_run.admin_port)])
    assert {b["HostIp"] for b in bindings} == {"127.0.0.1"}


def test_another_container_cannot_reach_the_admin_forward(compose_run: ComposeRun) -> None:
    probe = ("import socket\n"
             "s = socket.create_connection(('{host}', {port}), 5)\n"
             "s.sendall(b'GET /admin/export/exams HTTP/1.0\\r\\n\\r\\n')\n"
             "try:\n    print(s.recv(64))\nexcept OSError as exc:\n    print('refused', exc)\n")
    web_2 = compose_run.container("web-2")
    refused = subprocess.run(["docker", "exec", web_2, "python", "-c", probe.format(host="web-1", port=9001)],
                             capture_output=True, text=True, check=False)
    assert "HTTP/" not in refused.stdout, refused.stdout
    # Positive control: the same probe reaches a port that does answer (web-1's public API).
    answered = subprocess.run(["docker", "exec", web_2, "python", "-c", probe.format(host="web-1", port=8000)],
                              capture_output=True, text=True, check=False)
    assert "HTTP/" in answered.stdout, answered.stdout + answered.stderr


_SPOOF = ("import http.client, json\n"
          "codes = []\n"
          "for i in range({tries}):\n"
          "    c = http.client.HTTPConnection('web-1', 8000, timeout=10)\n"
          "    body = json.dumps({{'student_id': '{student}', 'exam_code': 'NOVA-101', 'access_code': '{code}'}})\n"
          "    c.request('POST', '/v1/sessions', body, {{'Content-Type': 'application/json',\n"
          "              'X-Forwarded-For': f'198.51.100.{{i + 1}}', 'X-Proctor-Proxy': 'a-guess'}})\n"
          "    codes.append(c.getresponse().status)\n"
          "print(json.dumps(codes))\n")


def test_a_node_believes_forwarded_for_only_from_haproxy(compose_run: ComposeRun) -> None:
    """Finding 5 of issue #21 on compose: another container of the project sends a rotating
    X-Forwarded-For (and a guessed proxy header) straight to a node: one network, limited."""
    web_2 = compose_run.container("web-2")
    student, code = sorted(read_roster(compose_run.run_dir / "roster", "NOVA-101").items())[1]  # one student's own code
    spoof = _SPOOF.format(tries=NETWORK_LIMIT + 3, student=student, code=code)
    spoofed = subprocess.run(["docker", "exec", web_2, "python", "-c", spoof],
                             capture_output=True, text=True, check=False)
    assert spoofed.returncode == 0, spoofed.stderr
    codes = json.loads(spoofed.stdout)
    print(f"\nfrom web-2 straight to web-1 with a rotating X-Forwarded-For: {codes}")
    assert codes == [201] * NETWORK_LIMIT + [429] * 3  # one network, whatever the header says
    # Control: through HAProxy (the secret's path) the host is its own network, not limited by the above.
    with httpx.Client(base_url=compose_run.api, trust_env=False, timeout=30) as client:
        body = {"student_id": student, "exam_code": "NOVA-101", "access_code": code}
        assert client.post("/v1/sessions", json=body).status_code == 201


def test_leftovers_sees_a_labelled_volume() -> None:
    """Negative control of the clean-up check: a volume with a project's label is reported."""
    if not _engine_answers():
        pytest.skip("no container engine answers (the stack fixture stops the one it started)")
    project = f"proctorleak{uuid.uuid4().hex[:8]}"
    name = subprocess.run(["docker", "volume", "create", "--label", f"com.docker.compose.project={project}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        assert leftovers(project) == {"volume": [name]}
    finally:
        subprocess.run(["docker", "volume", "rm", name], capture_output=True, check=True)
    assert leftovers(project) == {}


_VALKEY_PROBE = """
import os, sys, redis, rq
from redis.exceptions import RedisError
user = os.environ.get("PROCTOR_VALKEY_USER") if sys.argv[1] == "own" else None
credential = {"username": user, "password": os.environ["PROCTOR_VALKEY_PASSWORD"]} if user else {}
client = redis.Redis(host="valkey", port=6380, ssl=True, ssl_cert_reqs="none", socket_timeout=5, **credential)
for name, call in [("enqueue", lambda: rq.Queue("sms", connection=client).enqueue("os.system", "id > /tmp/pwned")),
                   ("delete", lambda: client.delete("proctor-limits:LIMITER/NOVA-101/student-00000/10/1/minute"))]:
    try:
        print(name, "DONE", call())
    except RedisError as exc:
        print(name, "REFUSED", type(exc).__name__, str(exc)[:80])
"""


def _in(compose_run: ComposeRun, service: str, code: str, *args: str) -> str:
    done = subprocess.run(["docker", "exec", compose_run.container(service), "python", "-c", code, *args],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_valkey_gives_a_container_without_a_credential_nothing(compose_run: ComposeRun) -> None:
    """Finding 1 on compose: the SMS gateway's container reaches Valkey but holds no Valkey user."""
    seen = _in(compose_run, "sms-gateway", _VALKEY_PROBE, "none")
    assert "enqueue REFUSED AuthenticationError" in seen and "delete REFUSED AuthenticationError" in seen, seen


def test_a_web_nodes_credential_cannot_reset_the_login_counters(compose_run: ComposeRun) -> None:
    seen = _in(compose_run, "web-2", _VALKEY_PROBE, "own")
    assert "enqueue DONE" in seen, seen  # the web user may enqueue: the workers' allow-list refuses it (embedded test)
    assert "delete REFUSED NoPermissionError" in seen, seen


def test_each_service_holds_only_its_own_valkey_user(compose_run: ComposeRun) -> None:
    show = "import os; print(os.environ.get('PROCTOR_VALKEY_USER'), 'PROCTOR_VALKEY_LIMITER_PASSWORD' in os.environ)"
    seen = {service: _in(compose_run, service, show).split() for service in ("web-1", "relay", "worker-sms-1", "ai-provider")}
    assert seen == {"web-1": ["web", "True"], "relay": ["relay", "False"], "worker-sms-1": ["worker", "False"],
                    "ai-provider": ["None", "False"]}


def test_a_provider_wants_the_lanes_token_not_a_network_address(compose_run: ComposeRun) -> None:
    """Finding 3 on compose: from the AI provider's container (inside the SMS gateway's allow-listed
    network) a victim's SMS read and a forged send get 401; the sms worker's own token still works."""
    probe = ("import os, sys, httpx\n"
             "token = os.environ.get('PROCTOR_SMS_CLIENT_TOKEN') if sys.argv[1] == 'token' else 'student-token'\n"
             "auth = {'Authorization': f'Bearer {token}'}\n"
             "print(httpx.get('http://sms-gateway:8102/v1/messages/sms-x', headers=auth).status_code,\n"
             "      httpx.post('http://sms-gateway:8102/v1/messages', headers={**auth, 'Idempotency-Key': 'sms-x'},\n"
             "                 json={'operation_id': 'sms-x', 'to': 'student:v', 'body': 'forged'}).status_code)\n")
    assert _in(compose_run, "ai-provider", probe, "none").split() == ["401", "401"]
    assert _in(compose_run, "worker-sms-1", probe, "token").split()[0] == "404"  # control: the lanes' token is accepted
