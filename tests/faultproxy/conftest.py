"""Fixtures: a fault proxy in a background thread, an API client and loopback upstreams."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from chaos.faultproxy.server import ThreadedFaultProxy

from .helpers import Upstream


@pytest.fixture
def fp() -> Iterator[ThreadedFaultProxy]:
    server = ThreadedFaultProxy("127.0.0.1", 0, seed=7).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api(fp: ThreadedFaultProxy) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fp.url, timeout=10) as client:
        yield client


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream(echo=True)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def sink() -> Iterator[Upstream]:
    server = Upstream(echo=False)
    try:
        yield server
    finally:
        server.close()
