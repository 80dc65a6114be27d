"""Graceful scale-in against HAProxy's runtime API, with fake web nodes whose requests end
only when the test says so (``/hold``): a drained node gets no new request, keeps its
in-flight ones until they finish, and only then is stopped; an added node is in the
backend only once ready. Negative control: killing a node with requests in flight (the
abrupt removal) fails them, so the graceful test's "all answered" can fail."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from fake_components import FAKE_HTTP, FORKING_WORKER

from stack.embedded.haproxy import server_sessions, server_states
from stack.embedded.stack import EmbeddedStack, StackSpec

pytestmark = pytest.mark.integration


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[EmbeddedStack]:
    (tmp_path / "fake_http.py").write_text(FAKE_HTTP)
    (tmp_path / "fake_worker.py").write_text(FORKING_WORKER)
    http = ["{python}", str(tmp_path / "fake_http.py"), "{port}"]
    commands = {"ai_provider": http, "sms_gateway": http, "web": http, "relay": ["{python}", "-c", "import time; time.sleep(600)"],
                "worker": ["{python}", str(tmp_path / "fake_worker.py"), "{run_dir}/{name}.horse"]}
    spec = StackSpec(name="drain", web=2, merit_workers=1, run_dir=tmp_path / "run", commands=commands, worker_settle=0.3)
    with EmbeddedStack(spec) as running:
        yield running


def _wait(predicate: Any, what: str, limit: float = 30.0) -> None:
    """Poll for a state the test caused; the limit only turns a hang into a named failure."""
    deadline = time.monotonic() + limit
    while not predicate():
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.01)


def _held_requests(stack: EmbeddedStack, release: Path, count: int) -> tuple[ThreadPoolExecutor, list[Any]]:
    pool = ThreadPoolExecutor(count)
    url = f"{stack.urls['api']}/hold?until={release}"
    futures = [pool.submit(httpx.get, url, timeout=60, trust_env=False) for _ in range(count)]
    sock = stack.urls["haproxy_socket"]
    _wait(lambda: server_sessions(sock).get("web_2", 0) >= 1 and sum(server_sessions(sock).values()) == count,
          "the held requests on both nodes")
    return pool, futures


def test_scale_in_drains_waits_for_in_flight_requests_then_stops(stack: EmbeddedStack, tmp_path: Path) -> None:
    sock, release = stack.urls["haproxy_socket"], tmp_path / "release"
    pool, futures = _held_requests(stack, release, 4)
    result: dict[str, Any] = {}
    scaler = threading.Thread(target=lambda: result.update(stack.scale("web", 1)))
    scaler.start()
    _wait(lambda: server_states(sock).get("web_2") == "DRAIN", "web_2 draining")
    new = [httpx.get(f"{stack.urls['api']}/", trust_env=False).headers["X-Proctor-Node"] for _ in range(4)]
    assert new == ["web_1"] * 4  # drained: no new request reaches web_2
    assert scaler.is_alive() and stack.supervisor.pids("web_2"), "web_2 was stopped with requests in flight"
    release.touch()
    scaler.join()
    pool.shutdown()
    answers = [f.result() for f in futures]
    assert [r.status_code for r in answers] == [200] * 4
    assert "web_2" in {r.headers["X-Proctor-Node"] for r in answers}
    [drain] = result["drains"]
    assert drain["node"] == "web_2" and drain["in_flight_at_drain"] >= 1 and drain["idle"] is True
    assert set(server_states(sock)) == {"web_1"} and "web_2" not in stack.supervisor.names()
    assert "web_2" not in (stack.run_dir / "haproxy" / "haproxy.cfg").read_text()


def test_scale_out_admits_a_node_only_once_ready(stack: EmbeddedStack) -> None:
    result = stack.scale("web", 3)
    assert result["drains"] == [] and set(server_states(stack.urls["haproxy_socket"])) == {"web_1", "web_2", "web_3"}
    assert "web_3" in (stack.run_dir / "haproxy" / "haproxy.cfg").read_text()
    _wait(lambda: "web_3" in {httpx.get(f"{stack.urls['api']}/", trust_env=False).headers["X-Proctor-Node"]
                              for _ in range(3)}, "web_3 in rotation")


@pytest.mark.negative_control
def test_abrupt_removal_fails_the_requests_in_flight(stack: EmbeddedStack, tmp_path: Path) -> None:
    pool, futures = _held_requests(stack, tmp_path / "release", 4)
    stack.supervisor.set_autorestart("web_2", False)
    stack.supervisor.kill("web_2")
    (tmp_path / "release").touch()
    pool.shutdown()
    statuses = [f.result().status_code for f in futures]
    assert statuses.count(200) == 2 and sorted(statuses)[2:] == [502, 502], statuses
