"""Helpers for tests that serve an app or start a server on a real loopback port."""

from __future__ import annotations

import atexit
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from stack.deploy.ports import free_port

__all__ = ["LANE_TOKEN", "REPO", "ServedApp", "free_port", "lane_client"]

LANE_TOKEN = "test-lane-token"
"""The lanes' bearer token the fake providers of unit tests expect (Settings.ai/sms_client_token)."""


def lane_client() -> httpx.Client:
    """An HTTP client that calls the fake providers as the lanes do (with their bearer token)."""
    client = httpx.Client(headers={"Authorization": f"Bearer {LANE_TOKEN}"}, timeout=5.0, trust_env=False)
    atexit.register(client.close)  # a module's client lives for the test session; its sockets close with it
    return client

REPO = Path(__file__).resolve().parents[2]


class ServedApp:
    """An ASGI app on a real loopback port (a free one unless given), in a daemon thread."""

    def __init__(self, app: FastAPI, port: int | None = None) -> None:
        # Bound here and handed to uvicorn: nothing can take the port between choosing and serving.
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", port or 0))
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> "ServedApp":
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert self.thread.is_alive(), "app failed to start (see the log above)"
            assert time.monotonic() < deadline, "app did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *_: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()
