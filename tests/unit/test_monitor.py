"""chaos.observe.monitor: /metrics read from the admin listeners, and a run with 0 samples fails loudly."""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from chaos.history import History
from chaos.observe.monitor import NoSamples, admin_urls, require_samples, run_monitor

METRICS = b'proctor_lane_depth{lane="merit"} 3.0\nproctor_http_requests_total{node="web_1"} 7.0\n'


TOKEN = "t" * 32


class _Metrics(BaseHTTPRequestHandler):
    """An admin listener: /metrics with the admin token only, as the web nodes serve it."""

    def do_GET(self) -> None:
        if self.path != "/metrics":
            status = 404
        else:
            status = 200 if self.headers.get("X-Admin-Token") == TOKEN else 403
        self.send_response(status)
        self.end_headers()
        self.wfile.write(METRICS if status == 200 else b"")

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def admin_listener() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _monitor(sources: list[str], history: History, seconds: float = 0.3, token: str = TOKEN) -> int:
    async def run() -> int:
        stop = asyncio.Event()
        task = asyncio.create_task(run_monitor(lambda: sources, history, 0.05, stop, token))
        await asyncio.sleep(seconds)
        stop.set()
        return await task

    return asyncio.run(run())


def test_the_monitor_reads_every_web_nodes_admin_listener() -> None:
    urls = {"api": "http://h:1", "web_1": "http://h:2", "web_1_admin": "http://h:3", "web_2_admin": "http://h:5",
            "admin": "http://h:3"}
    assert admin_urls(urls) == ["http://h:3", "http://h:5"]
    assert admin_urls({"api": "http://h:1", "admin": "http://h:9"}) == ["http://h:9"]  # compose: the one published


def test_samples_from_an_admin_listener_are_recorded(tmp_path, admin_listener: str) -> None:
    history = History(tmp_path / "history.jsonl")
    collected = _monitor([admin_listener], history)
    history.close()
    assert collected >= 1
    require_samples(collected, [admin_listener])  # does not raise


def test_a_monitor_that_collected_nothing_fails_the_run(tmp_path) -> None:
    history = History(tmp_path / "history.jsonl")
    dead = "http://127.0.0.1:9"  # discard port: nothing answers
    collected = _monitor([dead], history)
    history.close()
    assert collected == 0
    with pytest.raises(NoSamples, match="0 samples"):
        require_samples(collected, [dead])


def test_a_monitor_without_the_admin_token_collects_nothing(tmp_path, admin_listener: str) -> None:
    history = History(tmp_path / "history.jsonl")
    assert _monitor([admin_listener], history, token="wrong") == 0
    history.close()
