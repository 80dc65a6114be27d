"""Round two on a real embedded stack (HAProxy, two uvicorn nodes): findings 4, 5 and the
``Server`` header of 9, each tried as the issue's attacker: a local process, for finding 5
running as ``nobody`` (no access to the 0700 run folder), holding one student's own code.

- 4: huge request heads straight to the node ports took both nodes out of HAProxy; now a node
  refuses them itself (431) and a bystander through HAProxy is unaffected;
- 5: ``X-Forwarded-For`` from 127.0.0.2 (which any local process can bind) was believed and
  bypassed the per-network login limit; now only HAProxy's per-run secret header makes a node
  believe it;
- 9: ``Server: uvicorn``, and /metrics through HAProxy.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from stack.deploy.secrets import read_roster
from stack.embedded.stack import EmbeddedStack, StackSpec

pytestmark = pytest.mark.integration

EXAM = "NOVA-101"
NETWORK_LIMIT = 6
"""Logins per client network in this stack: the bypass must meet it."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    spec = StackSpec(name="security-r2", web=2, merit_workers=1, ai_workers=0, sms_workers=0,
                     run_dir=tmp_path_factory.mktemp("security-r2") / "run",
                     settings_overrides={"roster_size": 20, "login_network_limit": f"{NETWORK_LIMIT}/hour"})
    with EmbeddedStack(spec) as running:
        yield running


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port


# ------------------------------------------------------------------ finding 5, as nobody

_BYPASS = r"""
import http.client, json, sys
host, port, student, code, tries = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
statuses = []
for i in range(tries):
    conn = http.client.HTTPConnection(host, port, timeout=10, source_address=("127.0.0.2", 0))
    body = json.dumps({"student_id": student, "exam_code": "NOVA-101", "access_code": code})
    conn.request("POST", "/v1/sessions", body, {"Content-Type": "application/json",
                                                 "X-Forwarded-For": f"198.51.100.{i % 250 + 1}"})
    statuses.append(conn.getresponse().status)
    conn.close()
print(json.dumps(statuses))
"""


def _as_nobody(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run as ``nobody`` when the test is root (the attacker is another local user); the system
    Python, since the attacker has no access to this checkout's environment."""
    drop = {"user": "nobody", "group": "nogroup", "extra_groups": []} if os.geteuid() == 0 else {}
    return subprocess.run([sys.executable if not drop else "/usr/bin/python3", *argv], capture_output=True,
                          text=True, timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin"}, **drop)  # type: ignore[call-overload]


def _clear_login_counts(stack: EmbeddedStack) -> None:
    valkey = stack.valkey_as("limiter")  # only the limiter's user may touch its counters (stack/valkey_acl.py)
    for key in valkey.scan_iter("proctor-limits*"):
        valkey.delete(key)


def test_forwarded_for_from_127_0_0_2_straight_to_a_node_is_not_believed(stack: EmbeddedStack) -> None:
    _clear_login_counts(stack)
    student, code = sorted(read_roster(stack.run_dir, EXAM).items())[0]  # the attacker's own code
    host, port = _host_port(stack.urls["web_1"])
    attack = _as_nobody(["-c", _BYPASS, host, str(port), student, code, str(NETWORK_LIMIT + 4)])
    assert attack.returncode == 0, attack.stderr
    statuses = json.loads(attack.stdout)
    print(f"\nas nobody from 127.0.0.2 with a rotating X-Forwarded-For: {statuses}")
    # One network, whatever the header says: the limit holds.
    assert statuses == [201] * NETWORK_LIMIT + [429] * 4


def test_through_haproxy_the_forwarded_address_is_believed(stack: EmbeddedStack) -> None:
    """Control: on the authenticated path the node keys the limit on the address HAProxy saw
    (this test's 127.0.0.1), not on HAProxy's own source address."""
    _clear_login_counts(stack)
    student, code = sorted(read_roster(stack.run_dir, EXAM).items())[1]
    body = {"student_id": student, "exam_code": EXAM, "access_code": code}
    with httpx.Client(base_url=stack.urls["api"], trust_env=False, timeout=10) as api:
        assert api.post("/v1/sessions", json=body, headers={"X-Forwarded-For": "198.51.100.9"}).status_code == 201
    keys = [key.decode() if isinstance(key, bytes) else key for key in stack.valkey_as("limiter").scan_iter("proctor-limits*")]
    login_keys = [key for key in keys if "/login/" in key]
    assert login_keys and all("/login/127.0.0.1/" in key for key in login_keys), login_keys


# ------------------------------------------------------------------ finding 4

def _send_head(host: str, port: int, head: bytes) -> str:
    """Send one request head; the status the node answered, or how the connection ended."""
    with socket.create_connection((host, port), timeout=30) as sock:
        try:
            for start in range(0, len(head), 1 << 20):
                sock.sendall(head[start:start + (1 << 20)])
        except OSError:
            pass  # the node closed on us mid-head: its reply, if any, is read below
        try:
            reply = sock.recv(4096)
        except OSError as exc:
            return type(exc).__name__
    return reply.split(b" ", 2)[1].decode() if reply.startswith(b"HTTP/") else "closed"


def _huge_heads() -> list[bytes]:
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (8 << 20) + b"\r\n\r\n"
    huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (50 << 20) + b"\r\n\r\n"
    many = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(100_000)) + b"\r\n"
    return [huge, many] + [big] * 22


def test_huge_heads_straight_to_the_nodes_get_431_and_spare_the_bystander(stack: EmbeddedStack) -> None:
    nodes = [_host_port(stack.urls[name]) for name in ("web_1", "web_2")]
    answers: list[str] = []
    done = threading.Event()

    def attack(worker: int) -> None:
        heads = _huge_heads()
        rounds = 0
        while rounds < 1 or (not done.is_set() and rounds < 20):  # every head once, then on until the bystander is done
            for n, head in enumerate(heads[worker::4]):
                answers.append(_send_head(*nodes[(n + worker) % 2], head))
            rounds += 1

    with ThreadPoolExecutor(4) as pool:
        attackers = [pool.submit(attack, worker) for worker in range(4)]
        with httpx.Client(base_url=stack.urls["api"], trust_env=False, timeout=10) as api:
            bystander = [api.get("/healthz").status_code for _ in range(40)]  # the finding's 40 requests
        done.set()
        for attacker in attackers:
            attacker.result()
    print(f"\n{len(answers)} huge heads straight to the nodes: {dict((a, answers.count(a)) for a in set(answers))}; "
          f"bystander through HAProxy: {len(bystander)} requests, {sum(s != 200 for s in bystander)} not 200")
    assert "200" not in answers and answers.count("431") >= 1  # refused, never served
    assert set(answers) <= {"431", "400", "ConnectionResetError", "BrokenPipeError", "closed"}
    assert bystander == [200] * 40
    # A normal head still gets through.
    with httpx.Client(trust_env=False, timeout=10) as client:
        assert client.get(f"{stack.urls['web_1']}/healthz", headers={"X-Fine": "a" * 4000}).status_code == 200


# ------------------------------------------------------------------ finding 9 (served parts)

def test_no_server_header_and_no_metrics_through_haproxy(stack: EmbeddedStack) -> None:
    with httpx.Client(trust_env=False, timeout=10) as client:
        for name in ("ai_provider", "sms_gateway"):  # the fakes name no server either
            reply = client.get(f"{stack.urls[name]}/healthz")
            assert reply.status_code == 200 and "server" not in reply.headers, (name, dict(reply.headers))
        for url in (stack.urls["api"], stack.urls["web_1"]):
            reply = client.get(f"{url}/healthz")
            assert reply.status_code == 200 and "server" not in reply.headers, dict(reply.headers)
            assert client.get(f"{url}/metrics").status_code == 404
            assert client.get(f"{url}/openapi.json").status_code == 404
        admin_metrics = f"{stack.urls['web_1_admin']}/metrics"
        assert client.get(admin_metrics).status_code == 403  # a loopback peer is no credential
        assert "proctor_http_requests_total" in client.get(
            admin_metrics, headers={"X-Admin-Token": stack.settings.admin_token}).text
