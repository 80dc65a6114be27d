"""Load shedding (stack/web/shedding.py): a full node answers 503 + Retry-After at once.

Causal, never timed: requests are held inside the app on events until the bound is full,
then the next one is sent; nothing waits for a clock.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from web_support import LOOPBACK, RecordingDispatcher, TestClient, auth, start, token_for

from stack.config import Settings, SettingsError, load_settings
from stack.web.app import create_app
from stack.web.routes.common import NODE_HEADER
from stack.web.shedding import SHED_RETRY_AFTER, InFlightLimit


class _HeldApp:
    """An ASGI app whose ``/hold`` requests wait for ``release``; every other path answers at once."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0
        self.all_entered = asyncio.Event()
        self.expected = 0

    async def __call__(self, scope, receive, send) -> None:  # ASGI
        if scope["path"] == "/hold":
            self.entered += 1
            if self.entered >= self.expected:
                self.all_entered.set()
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _call(app, path: str) -> tuple[int, dict[bytes, bytes]]:
    replies: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        replies.append(message)

    await app({"type": "http", "path": path, "method": "GET", "headers": []}, receive, send)
    return replies[0]["status"], dict(replies[0]["headers"])


async def _fill_then_probe(limit: int, held: int, probes: list[str]) -> tuple[list[int], list[tuple], int]:
    """Hold ``held`` requests inside a node bounded at ``limit``, send ``probes`` one by one,
    release; returns (held statuses, probe replies, in-flight count at the end)."""
    inner = _HeldApp()
    inner.expected = min(held, limit)
    shedder = InFlightLimit(inner, limit=limit)
    holders = [asyncio.create_task(_call(shedder, "/hold")) for _ in range(held)]
    await inner.all_entered.wait()
    replies = [await _call(shedder, path) for path in probes]
    inner.release.set()
    held_statuses = [status for status, _ in await asyncio.gather(*holders)]
    return held_statuses, replies, shedder.in_flight


def test_the_request_past_the_bound_gets_503_with_retry_after() -> None:
    held, replies, in_flight = asyncio.run(_fill_then_probe(limit=2, held=2, probes=["/next"]))
    assert held == [200, 200]
    (status, headers), = replies
    assert status == 503
    assert headers[b"retry-after"] == str(SHED_RETRY_AFTER).encode()
    assert in_flight == 0


def test_health_routes_pass_a_full_node() -> None:
    _, replies, _ = asyncio.run(_fill_then_probe(limit=1, held=1, probes=["/readyz", "/healthz", "/next"]))
    assert [status for status, _ in replies] == [200, 200, 503]


def test_below_the_bound_nothing_is_shed() -> None:
    """Negative control of the bound: one request fewer in flight and the same probe is served."""
    held, replies, _ = asyncio.run(_fill_then_probe(limit=3, held=2, probes=["/next"]))
    assert held == [200, 200]
    assert [status for status, _ in replies] == [200]


def test_a_failing_request_gives_its_slot_back() -> None:
    async def failing(scope, receive, send) -> None:
        raise RuntimeError("boom")

    async def scenario() -> int:
        shedder = InFlightLimit(failing, limit=1)
        for _ in range(3):
            with pytest.raises(RuntimeError):
                await _call(shedder, "/x")
        return shedder.in_flight

    assert asyncio.run(scenario()) == 0


def test_the_bound_is_a_setting_named_in_its_errors() -> None:
    assert load_settings({"PROCTOR_MAX_IN_FLIGHT": "8"}).max_in_flight == 8
    with pytest.raises(SettingsError, match="PROCTOR_MAX_IN_FLIGHT"):
        load_settings({"PROCTOR_MAX_IN_FLIGHT": "0"})
    with pytest.raises(ValueError, match="max_in_flight"):
        InFlightLimit(lambda *a: None, limit=0)


class _HoldingDispatcher(RecordingDispatcher):
    """Holds a finish inside the node (its handler thread) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def submit(self, attempt_id: str) -> None:
        self.entered.set()
        assert self.release.wait(30), "test never released the held finish"
        super().submit(attempt_id)


def test_a_full_node_sheds_with_its_name_and_no_ledger_access(settings: Settings, ledger, tmp_path: Path) -> None:
    dispatcher = _HoldingDispatcher()
    app = create_app(settings.with_overrides(max_in_flight=1), dispatcher=dispatcher)
    with TestClient(app, client=LOOPBACK) as client:
        token = token_for(client)
        attempt = start(client, token)
        finished: list[int] = []
        holder = threading.Thread(target=lambda: finished.append(
            client.post(f"/v1/attempts/{attempt}/finish", headers=auth(token)).status_code))
        holder.start()
        assert dispatcher.entered.wait(30), "the finish never reached the dispatcher"
        shed = client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth(token))
        health = client.get("/healthz")
        dispatcher.release.set()
        holder.join()
        after = client.get(f"/v1/attempts/{attempt}/merit-card", headers=auth(token))
    assert shed.status_code == 503
    assert shed.headers["Retry-After"] == str(SHED_RETRY_AFTER)
    assert shed.headers[NODE_HEADER] == "web_test"
    assert shed.json() == {"detail": "node at capacity, retry later"}
    assert health.status_code == 200
    assert finished == [202]
    assert after.status_code != 503
