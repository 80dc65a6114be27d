"""A command that does not block server-side waits at most SOCKET_TIMEOUT for its answer, even
after RQ raised the connection's socket timeout to its dequeue block + 10 s (35 s); a BLMOVE
keeps the long one. Against a node that reads commands and answers none (a silent partition)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

import stack.valkey_client as valkey_client
from stack.valkey_client import CountingConnection


@pytest.fixture
def silent_node():
    """Answers +OK to the connection's set-up; reads SET and BLMOVE and answers neither."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(0.1)
                while not stop.is_set():
                    try:
                        data = conn.recv(65536)
                    except socket.timeout:
                        continue
                    if not data:
                        break
                    if b"\r\nSET\r\n" not in data and b"BLMOVE" not in data:  # the connect's own commands
                        conn.sendall(b"+OK\r\n" * data.count(b"*"))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    server.close()


def _elapsed(conn: CountingConnection, *command: str) -> float:
    started = time.monotonic()
    conn.send_command(*command)
    with pytest.raises(RedisTimeoutError):
        conn.read_response()
    return time.monotonic() - started


def test_a_plain_command_gives_up_at_the_cap_but_a_blocking_pop_keeps_the_socket_timeout(silent_node, monkeypatch):
    monkeypatch.setattr(valkey_client, "SOCKET_TIMEOUT", 0.2)
    # 0.2 s cap against a 3 s socket timeout: the two waits are told apart by the midpoint, far
    # from either, so a slow machine's scheduling delay cannot blur them.
    conn = CountingConnection(host="127.0.0.1", port=silent_node, socket_timeout=3.0, socket_connect_timeout=3.0,
                              protocol=2)
    try:
        assert _elapsed(conn, "SET", "k", "v") < 1.5  # capped, not the raised 3 s
        conn.connect()
        assert _elapsed(conn, "BLMOVE", "a", "b", "LEFT", "RIGHT", "5") >= 2.95  # the socket timeout stands
    finally:
        conn.disconnect()
