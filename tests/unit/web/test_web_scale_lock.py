"""The exam lock and POST /admin/scale: refusal names the exam and its window and never
reaches the executor; --force reaches it and leaves an audit record; the executor is a
real ControlServer (the embedded runner's) with a recording scale function."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest
from web_support import ADMIN, TestClient

from stack.embedded import StackError
from stack.config import Settings
from stack.embedded.control import ControlServer

H = {"X-Admin-Token": ADMIN}


class RecordingExecutor:
    def __init__(self, pools: dict[str, int]) -> None:
        self.pools = dict(pools)
        self.calls: list[tuple[str, int]] = []
        self.url = ""

    def scale(self, pool: str, n: int) -> dict[str, Any]:
        if pool not in self.pools:
            raise StackError(f"scale: kind must be one of {sorted(self.pools)}, not {pool!r}")
        self.calls.append((pool, n))
        before, self.pools[pool] = self.pools[pool], n
        return {"pool": pool, "from": before, "to": n, "drains": []}


@pytest.fixture
def executor() -> Iterator[RecordingExecutor]:
    recording = RecordingExecutor({"web": 3, "merit": 2, "ai": 1, "sms": 1})
    control = ControlServer(ADMIN, recording.scale, lambda: dict(recording.pools)).start(0)
    recording.url = control.url
    yield recording
    control.stop()


@pytest.fixture
def settings(settings: Settings, request: pytest.FixtureRequest) -> Settings:
    """The node learns the executor's URL from its settings (PROCTOR_CONTROL_URL), when a test has one,
    and then gets a real Valkey too: a scale and a window write hold the capacity lock there."""
    if "executor" not in request.fixturenames:
        return settings
    return settings.with_overrides(control_url=request.getfixturevalue("executor").url,
                                   valkey_url=request.getfixturevalue("valkey_server"))


def _window(admin: TestClient, opens: float, closes: float, min_web: int = 3, **workers: int) -> Any:
    body = {"opens_at": opens, "closes_at": closes, "min_web": min_web, "min_workers": workers}
    return admin.put("/admin/exams/NOVA-101/window", headers=H, json=body)


def _audit(admin: TestClient, action: str) -> list[dict[str, Any]]:
    return admin.get("/admin/audit", headers=H, params={"action": action}).json()["records"]


def test_open_window_refuses_scale_in_below_its_minimum_and_names_exam_and_window(
        admin_client: TestClient, executor: RecordingExecutor) -> None:
    assert _window(admin_client, 1796025600.0, 4102444800.0, merit=2).status_code == 200  # 2026-11-30 08:00Z to 2100
    assert admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 3}).status_code == 200  # at minimum
    refused = admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1})
    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert "NOVA-101" in detail and "window 2026-11-30 08:00:00Z to 2100-01-01 00:00:00Z" in detail, detail
    assert "web >= 3" in detail and "--force" in detail
    assert admin_client.post("/admin/scale", headers=H, json={"pool": "merit", "n": 1}).status_code == 409
    assert executor.calls == [("web", 3)]  # neither refusal reached the executor
    assert [r["detail"]["to"] for r in _audit(admin_client, "scale.refused")] == [1, 1]
    assert admin_client.get("/admin/lock", headers=H).json()["locked"] is True


def test_force_overrides_the_lock_and_writes_the_audit_record(
        admin_client: TestClient, executor: RecordingExecutor) -> None:
    now = time.time()
    _window(admin_client, now - 60, now + 3600, merit=2)
    forced = admin_client.post("/admin/scale", headers=H,
                               json={"pool": "web", "n": 1, "force": True, "actor": "oncall", "reason": "cost drill"})
    assert forced.status_code == 200 and executor.calls == [("web", 1)]
    assert forced.json()["lock_overridden"][0]["exam_code"] == "NOVA-101"
    [record] = _audit(admin_client, "scale.lock_override")
    assert record["actor"] == "oncall"
    assert record["detail"]["reason"] == "cost drill" and record["detail"]["from"] == 3 and record["detail"]["to"] == 1
    assert record["detail"]["violations"] == [{"exam_code": "NOVA-101", "opens_at": now - 60, "closes_at": now + 3600,
                                               "pool": "web", "requested": 1, "minimum": 3}]
    [done] = _audit(admin_client, "scale.done")
    assert done["id"] > record["id"]  # the override is on record before the executor acts


def test_no_lock_outside_the_window_and_scale_up_toward_the_minimum_is_allowed(
        admin_client: TestClient, executor: RecordingExecutor) -> None:
    now = time.time()
    _window(admin_client, now + 3600, now + 7200)  # not open yet
    assert admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1}).status_code == 200
    _window(admin_client, now - 60, now + 60)  # open now, min 3, running 1
    assert admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 2}).status_code == 200
    assert executor.calls == [("web", 1), ("web", 2)]
    assert _audit(admin_client, "scale.lock_override") == [] and _audit(admin_client, "scale.refused") == []


def test_bad_windows_and_requests_are_named(admin_client: TestClient, executor: RecordingExecutor) -> None:
    now = time.time()
    assert admin_client.put("/admin/exams/NOPE-1/window", headers=H,
                            json={"opens_at": now, "closes_at": now + 1, "min_web": 1}).json() == {
        "detail": "unknown exam 'NOPE-1'"}
    backwards = _window(admin_client, now, now - 1)
    assert backwards.status_code == 422 and "closes_at must be after opens_at" in backwards.text
    bad_pool = admin_client.post("/admin/scale", headers=H, json={"pool": "cpu", "n": 1})
    assert bad_pool.status_code == 422 and bad_pool.json()["detail"][0]["loc"][-1] == "pool"
    assert admin_client.post("/admin/scale", json={"pool": "web", "n": 1}).status_code == 403  # no token
    assert executor.calls == []


def test_scale_without_an_executor_is_a_named_503(admin_client: TestClient) -> None:
    response = admin_client.post("/admin/scale", headers=H, json={"pool": "web", "n": 1})
    assert response.status_code == 503 and "PROCTOR_CONTROL_URL" in response.json()["detail"]


def test_control_endpoint_wants_the_token_and_passes_executor_refusals_on(executor: RecordingExecutor) -> None:
    import httpx

    url = executor.url
    assert httpx.get(f"{url}/control/pools", headers={"X-Admin-Token": "wrong"}).status_code == 403
    assert httpx.post(f"{url}/control/scale", headers=H, content=b"{not json").status_code == 422
    assert httpx.post(f"{url}/control/scale", headers=H, json={"pool": "web", "n": True}).status_code == 422
    refused = httpx.post(f"{url}/control/scale", headers=H, json={"pool": "gpu", "n": 1})
    assert refused.status_code == 409 and "'gpu'" in refused.json()["detail"]
    assert executor.calls == []
