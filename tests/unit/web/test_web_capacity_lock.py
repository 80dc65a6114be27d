"""The capacity lock closes the exam lock's race: a window opened while a scale waits for its
executor is refused (never both accepted), a scale is refused while a window write holds the
lock, the lock is freed when the executor fails, and a crashed holder's lock expires by its
TTL without its old holder ever freeing a successor's. Real valkey-server, real ControlServer."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import httpx
import pytest
from redis import Redis
from valkeysupport import filled_past_maxmemory
from web_support import ADMIN, LOOPBACK, RecordingDispatcher, TestClient, closed_port

from stack.config import Settings
from stack.embedded import StackError
from stack.embedded.control import ControlServer
from stack.web.capacity_lock import CAPACITY_LOCK_KEY, CapacityLock
from stack.web.app import create_admin_app, create_app
from stack.web.dispatch import ValkeyClients
from stack.web.routes.scale import CAPACITY_LOCK_TTL, EXECUTOR_TIMEOUT, POOLS_TIMEOUT, RETRY_AFTER_LOCK_UNAVAILABLE

H = {"X-Admin-Token": ADMIN}
HANG_GUARD = 120.0
"""Only so that a broken build fails instead of hanging; nothing here measures speed."""


class GatedExecutor:
    """An executor whose scale blocks until the test opens its gate (or fails when told to)."""

    def __init__(self) -> None:
        self.pools = {"web": 3, "merit": 2, "ai": 1, "sms": 1}
        self.entered, self.gate = threading.Event(), threading.Event()
        self.fail_with: str | None = None
        self.calls: list[tuple[str, int]] = []
        self.url = ""

    def scale(self, pool: str, n: int) -> dict[str, Any]:
        self.calls.append((pool, n))
        self.entered.set()
        assert self.gate.wait(HANG_GUARD), "the test never opened the executor's gate"
        if self.fail_with:
            raise StackError(self.fail_with)
        before, self.pools[pool] = self.pools[pool], n
        return {"pool": pool, "from": before, "to": n, "drains": []}


@pytest.fixture
def executor() -> Iterator[GatedExecutor]:
    gated = GatedExecutor()
    control = ControlServer(ADMIN, gated.scale, lambda: dict(gated.pools)).start(0)
    gated.url = control.url
    yield gated
    gated.gate.set()
    control.stop()


@pytest.fixture
def settings(settings: Settings, executor: GatedExecutor, valkey_server: str) -> Settings:
    return settings.with_overrides(control_url=executor.url, valkey_url=valkey_server)


@pytest.fixture
def valkey(valkey_server: str) -> Iterator[Redis]:
    client = Redis.from_url(valkey_server)
    yield client
    client.close()


@pytest.fixture
def other_node(settings: Settings, admin_client: TestClient) -> Iterator[TestClient]:
    """A second web node's admin listener: same ledger and Valkey, its own process state."""
    app = create_app(settings.with_overrides(node_name="web_other"), dispatcher=RecordingDispatcher())
    with TestClient(app, client=LOOPBACK), TestClient(create_admin_app(app), client=LOOPBACK) as admin:
        yield admin


def _open_window(admin: TestClient, min_web: int = 3) -> httpx.Response:
    now = time.time()
    return admin.put("/admin/exams/NOVA-101/window", headers=H,
                     json={"opens_at": now - 60, "closes_at": now + 3600, "min_web": min_web})


def _scale_in_background(admin: TestClient, n: int) -> tuple[threading.Thread, list[httpx.Response]]:
    answers: list[httpx.Response] = []
    body = {"pool": "web", "n": n, "actor": "oncall"}
    thread = threading.Thread(target=lambda: answers.append(admin.post("/admin/scale", headers=H, json=body)))
    thread.start()
    return thread, answers


def _wait_until_inside_executor(executor: GatedExecutor, thread: threading.Thread, answers: list[httpx.Response]) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not executor.entered.wait(0.02):
        assert thread.is_alive(), f"the scale ended without reaching the executor: {answers[0].text}"
        assert time.monotonic() < deadline, "the scale never reached the executor"


def _lock(admin: TestClient) -> CapacityLock:
    lock = admin.app.state.proctor.capacity_lock  # type: ignore[attr-defined]
    assert isinstance(lock, CapacityLock)
    return lock


def test_a_window_opened_while_a_scale_waits_for_its_executor_is_refused(
        admin_client: TestClient, executor: GatedExecutor) -> None:
    thread, answers = _scale_in_background(admin_client, 1)  # no window open: the check passes
    _wait_until_inside_executor(executor, thread, answers)  # past its window check, not yet answered
    opened = _open_window(admin_client)  # the race: a window opens before the executor answers
    shown = admin_client.get("/admin/lock", headers=H).json()["capacity_lock"]
    executor.gate.set()
    thread.join(HANG_GUARD)
    assert opened.status_code == 409, f"both accepted: window {opened.status_code}, scale under an open exam"
    assert opened.headers["Retry-After"] == "5"
    detail = opened.json()["detail"]
    assert "scale web 3->1 by oncall on web_test since " in detail and "expires in" in detail, detail
    assert shown["held"] is True and shown["description"].startswith("scale web 3->1 by oncall")
    assert answers[0].status_code == 200 and executor.pools["web"] == 1
    assert admin_client.get("/admin/lock", headers=H).json()["capacity_lock"] == {
        "held": False, "holder": None, "description": None}
    assert admin_client.get("/admin/lock", headers=H).json()["windows"] == []  # the refused window was not stored
    assert _open_window(admin_client).status_code == 200  # the scale released the lock


def test_the_lock_spans_nodes_a_window_put_on_another_node_is_refused_too(
        admin_client: TestClient, other_node: TestClient, executor: GatedExecutor) -> None:
    thread, answers = _scale_in_background(admin_client, 1)
    _wait_until_inside_executor(executor, thread, answers)
    opened = _open_window(other_node)  # the admin asked another node: only Valkey knows of the scale
    executor.gate.set()
    thread.join(HANG_GUARD)
    assert opened.status_code == 409 and "on web_test" in opened.json()["detail"], opened.text
    assert answers[0].status_code == 200
    assert _open_window(other_node).status_code == 200


def test_a_scale_is_refused_while_a_window_write_holds_the_lock(
        admin_client: TestClient, executor: GatedExecutor) -> None:
    lease = _lock(admin_client).acquire(what="window", exam_code="NOVA-101", actor="admin")
    refused = admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1})
    assert refused.status_code == 409 and refused.headers["Retry-After"] == "1"
    assert "window write of NOVA-101 by admin" in refused.json()["detail"]
    assert executor.calls == []  # refused before reading the pools, let alone scaling
    assert lease.release() is True
    executor.gate.set()
    assert admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1}).status_code == 200


def test_the_lock_is_released_when_the_executor_fails(
        admin_client: TestClient, executor: GatedExecutor, valkey: Redis) -> None:
    executor.fail_with = "drain of web_3 failed: HAProxy runtime API unreachable"
    executor.gate.set()
    failed = admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1})
    assert failed.status_code == 409 and "drain of web_3 failed" in failed.json()["detail"]
    assert executor.calls == [("web", 1)]  # it did reach the executor, under the lock
    assert valkey.exists(CAPACITY_LOCK_KEY) == 0
    assert _open_window(admin_client).status_code == 200


def test_a_crashed_holders_lock_expires_and_its_late_release_frees_nothing(
        admin_client: TestClient, executor: GatedExecutor, valkey: Redis) -> None:
    state = admin_client.app.state.proctor  # type: ignore[attr-defined]
    state.capacity_lock = CapacityLock(state.clients, ttl=0.3, node="web_test")  # injected short TTL
    while True:  # pytest-timeout guards a machine that never lets the lock outlive one request
        crashed = state.capacity_lock.acquire(what="scale", pool="web", to=1, actor="oncall")  # never released
        refused = _open_window(admin_client).status_code
        if valkey.pttl(CAPACITY_LOCK_KEY) > 0:  # held through the request: the refusal is the lock's
            break
        # A loaded machine took longer than the TTL between acquire and request (a rehearsal did):
        # the lock may have expired first, so that request proves nothing; take it again.
    assert refused == 409
    deadline = time.monotonic() + HANG_GUARD
    while valkey.exists(CAPACITY_LOCK_KEY):  # Valkey's own expiry, not a sleep of ours
        assert time.monotonic() < deadline, "the lock never expired"
        time.sleep(0.05)
    successor = state.capacity_lock.acquire(what="window", exam_code="NOVA-101", actor="admin")
    assert crashed.release() is False  # the token differs: the successor keeps the lock
    assert crashed.update(**{"from": 3}) is False
    assert state.capacity_lock.holder()["what"] == "window"
    assert successor.release() is True
    assert _open_window(admin_client).status_code == 200


def test_the_lock_outlives_every_wait_under_it(admin_client: TestClient, valkey: Redis) -> None:
    assert CAPACITY_LOCK_TTL > POOLS_TIMEOUT + EXECUTOR_TIMEOUT
    lease = _lock(admin_client).acquire(what="scale", pool="web", to=1, actor="oncall")
    assert (POOLS_TIMEOUT + EXECUTOR_TIMEOUT) * 1000 < valkey.pttl(CAPACITY_LOCK_KEY) <= CAPACITY_LOCK_TTL * 1000
    assert lease.release() is True and valkey.exists(CAPACITY_LOCK_KEY) == 0
    with pytest.raises(ValueError, match="ttl must be > 0"):
        CapacityLock(admin_client.app.state.proctor.clients, ttl=0, node="x")  # type: ignore[attr-defined]


def test_without_valkey_the_lock_fails_closed_and_names_it(
        admin_client: TestClient, executor: GatedExecutor, settings: Settings) -> None:
    state = admin_client.app.state.proctor  # type: ignore[attr-defined]
    down = ValkeyClients(settings.with_overrides(valkey_url=f"redis://127.0.0.1:{closed_port()}/0"))
    state.capacity_lock = CapacityLock(down, ttl=10, node="web_test")
    refused = _open_window(admin_client)
    assert refused.status_code == 503 and "capacity lock unavailable" in refused.json()["detail"]
    assert "Valkey" in refused.json()["detail"] and refused.headers["Retry-After"] == str(RETRY_AFTER_LOCK_UNAVAILABLE)
    assert admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1}).status_code == 503
    assert executor.calls == []
    down.close()


@pytest.fixture
def full_valkey(valkey: Redis) -> Iterator[Redis]:
    """The test Valkey full under noeviction (valkeysupport.filled_past_maxmemory)."""
    with filled_past_maxmemory(valkey, "capacity-filler:") as full:
        yield full


def test_a_full_valkey_refuses_the_lock_with_503_and_retry_after_never_500(
        admin_client: TestClient, executor: GatedExecutor, full_valkey: Redis) -> None:
    """Under noeviction a full Valkey refuses the lock's SET (OOM): the endpoints that need Valkey
    answer 503 + Retry-After, change nothing, and work again once the memory is freed."""
    for refused in (_open_window(admin_client), admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1})):
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == str(RETRY_AFTER_LOCK_UNAVAILABLE)
        assert "OutOfMemoryError" in refused.json()["detail"]
    assert executor.calls == [] and full_valkey.exists(CAPACITY_LOCK_KEY) == 0
    full_valkey.config_set("maxmemory", "0")
    assert _open_window(admin_client).status_code == 200
