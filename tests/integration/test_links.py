"""Links behind named proxies of the fault proxy (StackSpec.links) and NetworkNemesis.

One real stack (web=2, one worker per lane) with the Valkey link of the web nodes,
every web node and both provider links behind proxies; plus two small stacks with
fake components for the other fault proxy backends (toxiproxy-server on PATH,
TOXIPROXY_URL).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
from fake_components import FAKE_HTTP
from roster_client import RosterClient

from chaos.faultproxy import ThreadedFaultProxy
from chaos.nemesis.base import FaultSpec, NemesisError
from chaos.nemesis.network import NetworkNemesis
from stack.embedded import EmbeddedStack, StackError, StackSpec
from stack.embedded.haproxy import server_states
from stack.embedded.manifest import read_manifest

pytestmark = pytest.mark.integration

LINKS = ["valkey_web", "web_*", "ai_provider", "sms_gateway"]


def _wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    spec = StackSpec(name="links", web=2, links=LINKS, run_dir=tmp_path_factory.mktemp("links") / "run",
                     faultproxy_seed=7, settings_overrides={"time_scale": 0.01, "max_job_attempts": 50})
    with EmbeddedStack(spec) as running:
        yield running


@pytest.fixture
def nemesis(stack: EmbeddedStack) -> Iterator[NetworkNemesis]:
    nem = NetworkNemesis(stack)
    try:
        yield nem
    finally:
        nem.heal()


@pytest.fixture
def api(stack: EmbeddedStack) -> Iterator[RosterClient]:
    with RosterClient(stack.run_dir, base_url=stack.urls["api"], timeout=10) as client:
        yield client


def _start_attempt(client: RosterClient, student: str) -> tuple[str, dict[str, str]]:
    auth = client.login()  # ``student`` only labels the call site; the roster picks who
    started = client.post("/v1/attempts", headers={**auth, "Idempotency-Key": uuid.uuid4().hex})
    assert started.status_code == 201, started.text
    return started.json()["attempt_id"], auth


def _answer(client: httpx.Client, attempt: str, auth: dict[str, str], content: str = "B") -> httpx.Response:
    return client.put(f"/v1/attempts/{attempt}/answers/q1", json={"content": content},
                      headers={**auth, "Idempotency-Key": uuid.uuid4().hex})


def _finish(client: RosterClient, student: str) -> str:
    attempt, auth = _start_attempt(client, student)
    assert _answer(client, attempt, auth).status_code == 201
    finished = client.post(f"/v1/attempts/{attempt}/finish", headers=auth)
    assert finished.status_code == 202, finished.text
    return attempt


def _export(stack: EmbeddedStack, table: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{stack.urls['admin']}/admin/export/{table}", timeout=10, trust_env=False,
                         headers={"X-Admin-Token": stack.settings.admin_token})
    response.raise_for_status()
    return response.json()["rows"]


def _outbox(stack: EmbeddedStack, attempts: set[str], kind: str) -> list[dict[str, Any]]:
    return [row for row in _export(stack, "outbox") if row["attempt_id"] in attempts and row["kind"] == kind]


def _valkey_up(stack: EmbeddedStack, node: str) -> int:
    admin = stack.urls[f"{node}_admin"]  # /metrics is on the admin listener only
    text = httpx.get(f"{admin}/metrics", timeout=10, trust_env=False,
                     headers={"X-Admin-Token": stack.settings.admin_token}).text
    line = next(line for line in text.splitlines() if line.startswith("proctor_valkey_up"))
    return int(float(line.rsplit(" ", 1)[1]))  # prometheus_client writes every value as a float ("1.0")


# ---------------------------------------------------------------------- the map
def test_links_map_consumers_through_proxies(stack: EmbeddedStack) -> None:
    links = stack.links()
    assert sorted(links) == ["ai_provider", "sms_gateway", "valkey_web", "web_1", "web_2"]
    ports = {name: int(link["listen"].rsplit(":", 1)[1]) for name, link in links.items()}
    assert links["valkey_web"]["upstream"] == stack.urls["valkey"].split("//")[1].split("/")[0]
    assert links["ai_provider"]["upstream"] == stack.urls["ai_provider"].split("//")[1]
    assert links["web_1"]["upstream"] == stack.urls["web_1"].split("//")[1]

    manifest = read_manifest(stack.run_dir)
    assert manifest["links"] == links
    assert manifest["urls"]["faultproxy"] == stack.urls["faultproxy"]
    assert manifest["faultproxy"]["backend"] == "faultproxy" and manifest["faultproxy"]["seed"] == 7
    comps = manifest["components"]
    assert "faultproxy" in comps and "--seed" in comps["faultproxy"]["argv"]
    for web in ("web_1", "web_2"):
        assert comps[web]["via_links"] == {"PROCTOR_VALKEY_URL": f"rediss://127.0.0.1:{ports['valkey_web']}/0"}
    assert comps["worker_sms_1"]["via_links"] == {"PROCTOR_AI_URL": f"http://127.0.0.1:{ports['ai_provider']}",
                                                  "PROCTOR_SMS_URL": f"http://127.0.0.1:{ports['sms_gateway']}"}
    assert "via_links" not in comps["relay"]  # valkey_relay was not requested: direct
    haproxy_cfg = (stack.run_dir / "haproxy" / "haproxy.cfg").read_text()
    assert f"server web_1 127.0.0.1:{ports['web_1']} check" in haproxy_cfg
    # the populate file that a restarted fault proxy reads
    config = json.loads(Path(manifest["faultproxy"]["config"]).read_text())
    assert {item["name"]: item["listen"] for item in config} == {n: link["listen"] for n, link in links.items()}


def test_unknown_links_are_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(StackError, match=r"unknown links \['valkey'\]; known: valkey_web, valkey_workers"):
        EmbeddedStack(StackSpec(links=["valkey"], run_dir=tmp_path / "a"))
    with pytest.raises(StackError, match=r"web_3.*web_\*"):
        EmbeddedStack(StackSpec(web=2, links=["web_3"], run_dir=tmp_path / "b"))


def test_network_nemesis_errors_name_the_known_links(stack: EmbeddedStack, nemesis: NetworkNemesis) -> None:
    with pytest.raises(NemesisError, match=r"unknown link 'valkey_relay'.*'ai_provider', 'sms_gateway', 'valkey_web'"):
        nemesis.start(FaultSpec(0, "link_down", "valkey_relay", 1))
    with pytest.raises(NemesisError, match=r"unknown toxic type 'jitter'; known: \['latency'"):
        nemesis.start(FaultSpec(0, "toxic", "web_1", 1, {"type": "jitter"}))
    with pytest.raises(NemesisError, match="stream"):
        nemesis.start(FaultSpec(0, "toxic", "web_1", 1, {"type": "latency", "stream": "sideways"}))

    class NoProxy:
        urls: ClassVar[dict[str, str]] = {}

    with pytest.raises(NemesisError, match="no fault proxy"):
        NetworkNemesis(NoProxy())
    nemesis.heal()
    nemesis.heal()  # idempotent


# ---------------------------------------------------------------------- Valkey link
def test_valkey_web_down_keeps_answers_and_recovers(stack: EmbeddedStack, nemesis: NetworkNemesis,
                                                     api: httpx.Client) -> None:
    attempt, auth = _start_attempt(api, "s-valkey-down")
    assert _valkey_up(stack, "web_1") == 1
    fault = FaultSpec(0, "link_down", "valkey_web", 1)
    detail = nemesis.start(fault)
    assert detail["link"] == "valkey_web" and detail["enabled"] is False and detail["listen"]
    try:
        _wait_for(lambda: _valkey_up(stack, "web_1") == 0 and _valkey_up(stack, "web_2") == 0, 10,
                  "proctor_valkey_up 0 on both nodes")
        answered = _answer(api, attempt, auth)
        assert answered.status_code == 201, answered.text  # acceptance writes only the ledger
    finally:
        assert nemesis.end(fault)["enabled"] is True
    _wait_for(lambda: _valkey_up(stack, "web_1") == 1 and _valkey_up(stack, "web_2") == 1, 15,
              "proctor_valkey_up 1 after the link is back")


# ---------------------------------------------------------------------- web links
def test_web_1_link_down_routes_to_web_2(stack: EmbeddedStack, nemesis: NetworkNemesis, api: httpx.Client) -> None:
    sock = stack.urls["haproxy_socket"]
    _wait_for(lambda: server_states(sock) == {"web_1": "UP", "web_2": "UP"}, 10, "both nodes UP")
    nemesis.start(FaultSpec(0, "link_down", "web_1", 1))
    try:
        nodes = []
        for _ in range(20):
            response = api.get("/readyz")
            assert response.status_code == 200, response.text
            nodes.append(response.headers["X-Proctor-Node"])
            time.sleep(0.05)
        assert set(nodes) == {"web_2"}
        _wait_for(lambda: server_states(sock)["web_1"].startswith("DOWN"), 5, "web_1 DOWN in HAProxy")
    finally:
        nemesis.heal()
    _wait_for(lambda: server_states(sock)["web_1"] == "UP", 10, "web_1 UP again")
    assert {api.get("/readyz").headers["X-Proctor-Node"] for _ in range(6)} == {"web_1", "web_2"}


# ---------------------------------------------------------------------- provider links
def test_latency_on_the_ai_link_slows_calls_and_narrative_jobs(stack: EmbeddedStack, nemesis: NetworkNemesis,
                                                                api: httpx.Client) -> None:
    health = f"http://{stack.links()['ai_provider']['listen']}/healthz"

    def timed_call() -> float:
        with httpx.Client(trust_env=False, timeout=10) as client:  # a fresh connection each time
            t0 = time.monotonic()
            assert client.get(health).status_code == 200
            return time.monotonic() - t0

    fault = FaultSpec(0, "toxic", "ai_provider", 5,
                      {"type": "latency", "stream": "downstream", "attributes": {"latency": 300}})
    detail = nemesis.start(fault)
    assert detail["toxic"] == "latency_downstream" and detail["attributes"]["latency"] == 300
    try:
        slowed = min(timed_call() for _ in range(2))
        attempt = _finish(api, "s-ai-latency")
        rows = _wait_for(lambda: [r for r in _outbox(stack, {attempt}, "narrative") if r["status"] == "done"], 20,
                         "the narrative job")
    finally:
        assert nemesis.end(fault)["removed"] is True
    assert slowed >= 0.3, slowed  # a lower bound: a loaded machine is slower, never faster
    job_seconds = rows[0]["done_at"] - rows[0]["enqueued_at"]
    assert job_seconds >= 0.3, rows[0]  # the AI answer crossed the 300 ms toxic
    # removed at end: the proxy holds no toxic on the link any more (asked, not timed)
    assert httpx.get(f"{stack.urls['faultproxy']}/proxies/ai_provider/toxics", timeout=5).json() == []


def test_sms_link_down_fails_jobs_then_exactly_one_sms_each(stack: EmbeddedStack, nemesis: NetworkNemesis,
                                                            api: httpx.Client) -> None:
    ledger_url = f"{stack.urls['sms_gateway']}/admin/ledger"
    headers = {"X-Admin-Token": stack.settings.admin_token}

    def effects() -> list[dict[str, Any]]:
        return httpx.get(ledger_url, headers=headers, timeout=10, trust_env=False).json()["effects"]

    fault = FaultSpec(0, "link_down", "sms_gateway", 3)
    nemesis.start(fault)
    try:
        attempts = {_finish(api, f"s-sms-{i}") for i in range(3)}
        ops = {f"sms-{a}" for a in attempts}
        _wait_for(lambda: all(r["last_error"] for r in _outbox(stack, attempts, "sms")) and
                  len(_outbox(stack, attempts, "sms")) == 3, 15, "failed SMS jobs while the link is down")
        assert not [e for e in effects() if e["operation_id"] in ops]
        assert all(r["status"] != "done" for r in _outbox(stack, attempts, "sms"))
    finally:
        nemesis.heal()
    _wait_for(lambda: all(r["status"] == "done" for r in _outbox(stack, attempts, "sms")), 30,
              "every SMS done after heal")
    per_op = [e["operation_id"] for e in effects() if e["operation_id"] in ops]
    assert sorted(per_op) == sorted(ops), per_op  # exactly one effect per finished attempt


# ---------------------------------------------------------------------- restart
def test_a_restarted_fault_proxy_recreates_its_proxies_on_the_same_ports(
    stack: EmbeddedStack, nemesis: NetworkNemesis, api: httpx.Client
) -> None:
    before = stack.links()
    nemesis.start(FaultSpec(0, "toxic", "web_2", 5, {"type": "latency", "attributes": {"latency": 50}}))
    pid = stack.supervisor.pids("faultproxy")[0]
    stack.supervisor.kill("faultproxy")
    _wait_for(lambda: (pids := stack.supervisor.pids("faultproxy")) and pid not in pids, 10, "a new fault proxy")
    stack.wait_healthy("faultproxy", 10)
    proxies = httpx.get(f"{stack.urls['faultproxy']}/proxies", timeout=5, trust_env=False).json()
    assert {name: {"listen": p["listen"], "upstream": p["upstream"]} for name, p in proxies.items()} == before
    assert all(p["enabled"] and p["toxics"] == [] for p in proxies.values())  # fresh: no toxics
    assert stack.links() == before
    _wait_for(lambda: server_states(stack.urls["haproxy_socket"]) == {"web_1": "UP", "web_2": "UP"}, 10,
              "both nodes UP through the new proxies")
    attempt, auth = _start_attempt(api, "s-after-restart")
    assert _answer(api, attempt, auth).status_code == 201


# ---------------------------------------------------------------------- other backends
# Stands in for Toxiproxy's binary: translates its flags to our fault proxy's.
FAKE_TOXIPROXY_SERVER = """#!/bin/sh
[ "$1 $3 $5" = "-host -port -config" ] || { echo "unexpected flags: $*" >&2; exit 2; }
exec {python} -m chaos.faultproxy --host "$2" --port "$4" --config "$6"
"""


def _fake_spec(tmp_path: Path, name: str) -> StackSpec:
    (tmp_path / "fake_http.py").write_text(FAKE_HTTP)
    http = ["{python}", str(tmp_path / "fake_http.py"), "{port}"]
    sleeper = ["{python}", "-c", "import time; time.sleep(600)"]
    commands = {"ai_provider": http, "sms_gateway": http, "web": http, "relay": sleeper, "worker": sleeper}
    return StackSpec(name=name, web=1, merit_workers=0, ai_workers=0, sms_workers=1, links=["web_1", "ai_provider"],
                     run_dir=tmp_path / "run", commands=commands, worker_settle=0.3)


def test_toxiproxy_server_on_path_is_started_instead_of_ours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "toxiproxy-server"
    script.write_text(FAKE_TOXIPROXY_SERVER.replace("{python}", sys.executable))
    script.chmod(0o755)
    monkeypatch.delenv("TOXIPROXY_URL", raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    with EmbeddedStack(_fake_spec(tmp_path, "toxibin")) as running:
        manifest = read_manifest(running.run_dir)
        assert manifest["faultproxy"]["backend"] == "toxiproxy-server"
        assert manifest["components"]["faultproxy"]["argv"][:2] == [str(script), "-host"]
        assert httpx.get(running.urls["api"], timeout=5, trust_env=False).text == "web_1"  # via the web_1 proxy
        nem = NetworkNemesis(running)
        nem.start(FaultSpec(0, "link_down", "web_1", 1))
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://{running.links()['web_1']['listen']}/", timeout=2, trust_env=False)
        nem.heal()
        assert httpx.get(f"http://{running.links()['web_1']['listen']}/", timeout=5, trust_env=False).text == "web_1"


def test_toxiproxy_url_proxies_are_created_through_its_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with ThreadedFaultProxy(port=0, seed=1) as external:
        monkeypatch.setenv("TOXIPROXY_URL", external.url)
        with EmbeddedStack(_fake_spec(tmp_path, "toxiurl")) as running:
            assert "faultproxy" not in running.supervisor.names()
            assert running.urls["faultproxy"] == external.url
            proxies = httpx.get(f"{external.url}/proxies", timeout=5, trust_env=False).json()
            assert sorted(proxies) == ["ai_provider", "web_1"]
            assert proxies["web_1"]["listen"] == running.links()["web_1"]["listen"]
            assert httpx.get(running.urls["api"], timeout=5, trust_env=False).text == "web_1"
        assert httpx.get(f"{external.url}/proxies", timeout=5, trust_env=False).json() == {}
