"""A Valkey client's connect timeout covers TCP and the TLS handshake, and each attempt that runs
out of it is counted as a connection timeout of its phase, apart from a refusal.

Real loopback sockets, no Valkey: a listener that never answers (the kernel completes the TCP
connect from its backlog, nobody speaks TLS) stalls the handshake; a closed port refuses.
Measured cost: about 1.5 s (0.2 s timeouts: one, then four with the queue client's retries)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stack.config import Settings
from stack.connection_stats import ConnectionStats, install_process_stats, process_stats
from stack.valkey_client import FRESH, POOLED, SOCKET_TIMEOUT, connection_policy, valkey_client

TIMEOUT = 0.2


@pytest.fixture
def stats() -> Iterator[ConnectionStats]:
    before = process_stats()
    yield install_process_stats(ConnectionStats("test"))
    install_process_stats(before)


@pytest.fixture
def silent_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # never accepted, never answered
        yield listener.getsockname()[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(port: int) -> Settings:
    return Settings(valkey_url=f"rediss://127.0.0.1:{port}/0", valkey_connect_timeout=TIMEOUT, component="test")


def test_a_silent_handshake_is_a_handshake_timeout_per_attempt(stats: ConnectionStats, silent_port: int) -> None:
    client = valkey_client(_settings(silent_port), "probe")  # probe: no retries, one attempt per call
    with pytest.raises(RedisTimeoutError):
        client.ping()  # with redis-py's own path this waited the 1 s socket timeout, not the connect timeout
    client.close()
    snap = stats.snapshot()
    assert snap["timeouts"] == {"handshake": 1} and snap["connects"] == 0
    assert snap["connect_errors"] == {"connect_timeout": 1}


def test_each_retried_attempt_counts_and_none_waits_the_command_timeout(stats: ConnectionStats,
                                                                        silent_port: int) -> None:
    client = valkey_client(_settings(silent_port), "queue")  # 3 retries, a 5 s socket timeout
    started = time.monotonic()
    with pytest.raises(RedisTimeoutError):
        client.set("k", "v")
    elapsed = time.monotonic() - started
    client.close()
    assert stats.snapshot()["timeouts"] == {"handshake": 4}  # the first attempt and its 3 retries
    # under redis-py's own handshake (the socket timeout) one attempt alone would take 5 s
    assert elapsed < SOCKET_TIMEOUT, elapsed


def test_a_refused_connection_is_no_timeout(stats: ConnectionStats) -> None:
    client = valkey_client(_settings(_closed_port()), "probe")
    with pytest.raises(RedisConnectionError):
        client.ping()
    client.close()
    snap = stats.snapshot()
    assert snap["timeouts"] == {} and snap["connect_errors"] == {"refused": 1}


def test_the_policy_is_chosen_once_from_the_components_settings() -> None:
    assert connection_policy(Settings()) is POOLED
    assert connection_policy(Settings().with_overrides(valkey_fresh_connections=True)) is FRESH
    fresh = valkey_client(Settings().with_overrides(valkey_fresh_connections=True), "probe")
    assert type(fresh.connection_pool) is FRESH.pool_class
    pooled = valkey_client(Settings(), "probe", policy=POOLED)
    assert type(pooled.connection_pool) is POOLED.pool_class
