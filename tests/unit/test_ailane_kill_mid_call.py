"""The mid-call kill of ``ai_key_revoked_worker_killed`` (chaos/scenarios/ai_lane.py): it kills
every worker of the lane, never another lane's, and a kill that came after the call ended
(nothing left pending) is tried again at the next call instead of being counted as landed."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
import pytest

from chaos.scenarios import ai_lane
from chaos.scenarios.ai_lane import LanePlan, _Driver
from stack.components import Component


class _Provider:
    """The reservations the admin export shows; a kill freezes whatever is pending at that moment."""

    def __init__(self, calls_ending_before_the_kill: int) -> None:
        self.pending: list[str] = []
        self.calls = 0
        self.misses_left = calls_ending_before_the_kill

    def next_call(self) -> None:
        self.calls += 1
        self.pending = [f"narrative-{self.calls}#1"]

    def handler(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/admin/export/ai_reservations"
        if not self.pending:
            self.next_call()
        rows = [{"call_id": call_id, "state": "pending"} for call_id in self.pending]
        return httpx.Response(200, json={"rows": rows})


class _Stack:
    def __init__(self, provider: _Provider) -> None:
        self.provider = provider
        self.killed: list[str] = []
        self.urls = {"admin": "http://127.0.0.1:9"}
        self.settings = SimpleNamespace(admin_token="t", time_scale=0.05)

    def components(self) -> list[Component]:
        return [Component("worker_merit_1", "worker", lane="merit", index=1),
                Component("worker_ai_1", "worker", lane="ai", index=1),
                Component("worker_ai_2", "worker", lane="ai", index=2)]

    def kill(self, name: str) -> list[int]:
        self.killed.append(name)
        if self.provider.misses_left and name == "worker_ai_2":  # the call had answered just before
            self.provider.misses_left -= 1
            self.provider.pending = []
        return [100 + len(self.killed)]


def _kill(calls_ending_before_the_kill: int) -> tuple[_Stack, dict]:
    provider = _Provider(calls_ending_before_the_kill)
    stack = _Stack(provider)

    async def drive() -> dict:
        async with httpx.AsyncClient(transport=httpx.MockTransport(provider.handler)) as client:
            driver = _Driver(stack, LanePlan(kill_mid_call=True), client)  # type: ignore[arg-type]
            await driver._kill_mid_call(driver._lane_workers())
            return driver.record

    return stack, asyncio.run(drive())


@pytest.fixture(autouse=True)
def _no_poll_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ai_lane, "POLL_SECONDS", 0.0)


def test_every_worker_of_the_lane_is_killed_and_no_other() -> None:
    stack, record = _kill(calls_ending_before_the_kill=0)
    assert stack.killed == ["worker_ai_1", "worker_ai_2"]
    assert record["killed"]["orphaned_calls"] == ["narrative-1#1"]
    assert record["killed"]["components"] == ["worker_ai_1", "worker_ai_2"]


def test_a_kill_after_the_call_ended_is_tried_again_at_the_next_call() -> None:
    stack, record = _kill(calls_ending_before_the_kill=2)
    assert [a["orphaned_calls"] for a in record["kill_attempts"]] == [[], [], ["narrative-3#1"]]
    assert record["killed"]["orphaned_calls"] == ["narrative-3#1"]
    assert stack.killed == ["worker_ai_1", "worker_ai_2"] * 3
