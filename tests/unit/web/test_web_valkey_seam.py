"""PROCTOR_VALKEY_FRESH_CONNECTIONS lives in one place, the client factory: the node's
shared client opens a new connection per call only because its pool says so."""

from __future__ import annotations

from typing import Iterator

import pytest
from redis import Redis

import stack.connection_stats as connection_stats
from stack.config import Settings
from stack.connection_stats import ConnectionStats
from stack.valkey_client import FreshConnectionPool, valkey_client
from stack.web.dispatch import ValkeyClients


@pytest.fixture
def counted() -> Iterator[ConnectionStats]:
    before = connection_stats.process_stats()
    yield connection_stats.install_process_stats(ConnectionStats("seam-test"))
    connection_stats.install_process_stats(before)


@pytest.mark.parametrize(("fresh", "connects"), [(False, 1), (True, 3)], ids=["pooled", "fresh-connections"])
def test_the_factory_alone_decides_a_connection_per_call(
    settings: Settings, valkey_server: str, counted: ConnectionStats, fresh: bool, connects: int
) -> None:
    clients = ValkeyClients(settings.with_overrides(valkey_url=valkey_server, valkey_fresh_connections=fresh))
    try:
        with clients.use("queue") as first:
            first.set("k", "1")
        with clients.use("queue") as second:
            second.incr("k")
            assert second.get("k") == b"2"
        assert first is second  # one client per purpose either way: no branch in the node
        assert isinstance(first.connection_pool, FreshConnectionPool) is fresh
    finally:
        clients.close()
    assert counted.snapshot()["connects"] == connects


def test_a_fresh_client_really_opens_a_connection_per_call(settings: Settings, valkey_server: str) -> None:
    """Valkey's own count, not ours: three calls, three new client connections."""
    observer = Redis.from_url(valkey_server)
    client = valkey_client(settings.with_overrides(valkey_url=valkey_server, valkey_fresh_connections=True), "probe")
    try:
        before = observer.info("stats")["total_connections_received"]
        for _ in range(3):
            client.ping()
        assert observer.info("stats")["total_connections_received"] - before == 3
    finally:
        client.close()
        observer.close()
